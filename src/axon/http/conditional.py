"""Conditional requests (RFC 9110 section 13): validators and the order they are evaluated in."""

from __future__ import annotations

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


def evaluate(method: str, headers: dict[str, str], etag: str, mtime: float) -> int | None:
    """304, 412, or None to go on, evaluating preconditions in RFC 9110's order (13.2.2)."""
    mtime = math.floor(mtime)  # HTTP dates have whole seconds
    if_match = headers.get("if-match")
    if if_match is not None:
        if not _matches(if_match, etag, strong=True):
            return 412
    else:
        since = headers.get("if-unmodified-since")
        if since is not None:
            when = parse_http_date(since)
            if when is not None and mtime > when:
                return 412
    safe = method in ("GET", "HEAD")
    if_none_match = headers.get("if-none-match")
    if if_none_match is not None:
        if _matches(if_none_match, etag, strong=False):
            return 304 if safe else 412
    elif safe:
        since = headers.get("if-modified-since")
        if since is not None:
            when = parse_http_date(since)
            if when is not None and mtime <= when:
                return 304
    return None


def if_range_allows(header: str | None, etag: str, mtime: float) -> bool:
    """Whether a ``Range`` may be honoured: no ``If-Range``, or one naming the current version."""
    if header is None:
        return True
    header = header.strip()
    if header.startswith('"') or header.startswith("W/"):
        return not header.startswith("W/") and _matches(header, etag, strong=True)
    when = parse_http_date(header)
    # A date validator is only strong enough when it matches exactly (RFC 9110 13.1.5).
    return when is not None and math.floor(mtime) == when
