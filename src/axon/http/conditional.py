"""Conditional requests (RFC 9110 section 13): validators and the order they are evaluated in."""

from __future__ import annotations

import hashlib
import math
import re
from datetime import timezone
from email.utils import formatdate, parsedate_to_datetime

_ETAG = re.compile(r'\s*(W/)?("[^"]*")\s*(?:,|$)')


# formatdate renders years 1 to 9999 only; tmpfs, xfs and btrfs keep mtimes beyond either end.
_FIRST_DATE, _LAST_DATE = -62135596800, 253402300799


def http_date(seconds: float) -> str:
    # Whole seconds, as evaluate() compares; clamped to what an HTTP date can say.
    return formatdate(min(max(math.floor(seconds), _FIRST_DATE), _LAST_DATE), usegmt=True)


def parse_http_date(value: str) -> float | None:
    try:
        parsed = parsedate_to_datetime(value)
    except (TypeError, ValueError, IndexError):
        return None
    if parsed is None:
        return None
    if parsed.tzinfo is None:  # asctime (and "-0000") carry no zone; HTTP dates are GMT
        parsed = parsed.replace(tzinfo=timezone.utc)
    return parsed.timestamp()


def _tags(header: str) -> list[tuple[bool, str]]:
    """(weak, opaque-tag) pairs of an ETag list; an unparsable list matches nothing."""
    out: list[tuple[bool, str]] = []
    pos = 0
    while pos < len(header):
        m = _ETAG.match(header, pos)
        if not m or m.end() == pos:
            return out
        out.append((bool(m.group(1)), m.group(2)))
        pos = m.end()
    return out


def _matches(header: str, etag: str, *, strong: bool) -> bool:
    if header.strip() == "*":
        return True
    tag = etag[2:] if etag.startswith("W/") else etag
    for weak, opaque in _tags(header):
        if opaque == tag and not (strong and (weak or etag.startswith("W/"))):
            return True
    return False


def evaluate(method: str, headers: dict[str, str], etag: str, mtime: float | None) -> int | None:
    """304, 412, or None to go on, evaluating preconditions in RFC 9110's order (13.2.2).

    ``mtime`` is None for a representation without a modification date (a batch): the date
    conditions are then ignored, as RFC 9110 13.1.3 and 13.1.4 require.
    """
    if_match = headers.get("if-match")
    if if_match is not None:
        if not _matches(if_match, etag, strong=True):
            return 412
    elif mtime is not None:
        since = headers.get("if-unmodified-since")
        if since is not None:
            when = parse_http_date(since)
            if when is not None and math.floor(mtime) > when:  # HTTP dates have whole seconds
                return 412
    safe = method in ("GET", "HEAD")
    if_none_match = headers.get("if-none-match")
    if if_none_match is not None:
        if _matches(if_none_match, etag, strong=False):
            return 304 if safe else 412
    elif safe and mtime is not None:
        since = headers.get("if-modified-since")
        if since is not None:
            when = parse_http_date(since)
            if when is not None and math.floor(mtime) <= when:
                return 304
    return None


def if_range_allows(header: str | None, etag: str, mtime: float | None, *, date_is_strong: bool = True) -> bool:
    """Whether a ``Range`` may be honoured: no ``If-Range``, or one naming the current version.

    A date names a version only when the ``Last-Modified`` it matches is strong (RFC 9110
    13.1.5, 8.8.2.2): ``date_is_strong`` is False when the representation changed less than a
    second before this response, since another version could then carry the same date; and a
    representation without a date (``mtime`` None) can only be named by its entity tag.
    """
    if header is None:
        return True
    header = header.strip()
    if header.startswith('"') or header.startswith("W/"):
        return not header.startswith("W/") and _matches(header, etag, strong=True)
    if mtime is None or not date_is_strong:
        return False
    when = parse_http_date(header)
    return when is not None and math.floor(mtime) == when


#: How long after a change a ``Last-Modified`` stays weak: the date has whole seconds, so two
#: versions written within one second can share it (RFC 9110 8.8.2.2).
WEAK_DATE_NS = 1_000_000_000


def date_is_strong(changed_ns: int, now_ns: int) -> bool:
    """Whether a ``Last-Modified`` derived from a change at ``changed_ns`` validates strongly in
    a response made at ``now_ns`` (both in nanoseconds since the epoch)."""
    return now_ns - changed_ns >= WEAK_DATE_NS


def body_etag(body: bytes) -> str:
    """A strong entity tag for a body built whole in memory (a listing, the limits): a hash of
    its bytes, so that the same bytes carry the same tag on every node and after a restart, and
    any other bytes another tag (RFC 9110 8.8.3)."""
    return '"' + hashlib.blake2b(body, digest_size=16).hexdigest() + '"'
