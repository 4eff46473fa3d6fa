"""Multipart framing (RFC 2046): boundaries, part headers, and the segments of a whole body.

Part header values built from file names are escaped here and only here: the ASCII fallback
is the name transliterated (accents dropped, compatibility forms spelled out) with anything still
outside printable ASCII (and quote and backslash) replaced by ``_``; the real name goes in
RFC 5987 ``filename*``; ``Content-Location`` is the URL of the file on the built-in ``/files/``
endpoint, the requested path percent-encoded after that prefix. No CR, LF or quote from a
request reaches a header raw.
"""

from __future__ import annotations

import re
import secrets
import unicodedata
from functools import lru_cache
from typing import Iterable
from urllib.parse import quote

from .segments import Segment

CRLF = b"\r\n"
# RFC 5987 attr-char, less the alphanumerics and "_.-~" that quote() always keeps.
_ATTR_SAFE = "!#$&+^`|"
# What quote() gives back unchanged, with each safe set used here: a name or path made only of
# these is its own quoting. Checked first, since most are, and quote() costs three times the match
# (once per part of every batch: distinct files miss the caches below).
_PLAIN_NAME = re.compile(r"[A-Za-z0-9_.~!#$&+^`|-]*")
_PLAIN_PATH = re.compile(r"[A-Za-z0-9_.~/-]*")


def new_boundary() -> str:
    """128 random bits: unpredictable, so no file can contain the delimiter by design."""
    return secrets.token_hex(16)


def ascii_fallback(name: str) -> str:
    """``name`` for clients that read only ``filename``: ``résumé ü.txt`` becomes ``resume u.txt``.

    NFKD splits accented letters into letter and combining mark (the marks are dropped) and
    spells out compatibility forms (ligatures, full-width letters); what it produces is checked
    like the rest, since full-width forms of quote and backslash decompose to the real ones.
    """
    if name.isascii() and name.isprintable() and '"' not in name and "\\" not in name:
        return name  # what the rest would give, character by character (NFKD keeps ASCII as it is)
    decomposed = unicodedata.normalize("NFKD", name)
    return "".join(
        c if " " <= c <= "~" and c not in '"\\' else "_" for c in decomposed if not unicodedata.combining(c)
    )


@lru_cache(maxsize=4096)  # called with basenames: short, or the file system refuses them
def content_disposition(name: str) -> str:
    encoded = name if _PLAIN_NAME.fullmatch(name) else quote(name, safe=_ATTR_SAFE)
    return f"attachment; filename=\"{ascii_fallback(name)}\"; filename*=UTF-8''{encoded}"


def file_part_headers(requested: str, name: str, content_type: str) -> str:
    """The per-file header lines of a batch part (without Content-Length), cached per path
    (unless the path is long: a cache keyed by what clients send must stay small)."""
    if len(requested) + len(name) > CACHED_PATH_CHARS:
        return part_headers(requested, name, content_type)
    return _cached_part_headers(requested, name, content_type)


#: What is said of one file in a batch of whole files (its part's headers and its record in the
#: batch's identity, plan/formats.py) is kept for this many files, as many as the open-file cache
#: holds, so that a pool of files served at random is formatted once per file version, not once
#: per request; only for paths of at most ``CACHED_PATH_CHARS`` (requested and resolved
#: together) and texts of at most ``CACHED_TEXT_BYTES``, so that what clients send cannot grow
#: it past what the README states. The other per-file texts (slices' part headers, archives'
#: records) are kept for ``OTHER_CACHE`` files.
PER_FILE_CACHE = 10_000
OTHER_CACHE = 1024
CACHED_PATH_CHARS = 256
CACHED_TEXT_BYTES = 1024


#: A part's Content-Location is this prefix and the requested path: an absolute path, so that
#: resolved against the URL of the batch, whatever route served it, it fetches that very file.
FILES_PREFIX = "/files/"


def part_headers(requested: str, name: str, content_type: str) -> str:
    """What :func:`file_part_headers` gives, made anew."""
    basename = name.rsplit("/", 1)[-1]
    location = requested if _PLAIN_PATH.fullmatch(requested) else quote(requested, safe="/")
    return (
        f"Content-Type: {content_type}\r\n"
        f"Content-Disposition: {content_disposition(basename)}\r\n"
        f"Content-Location: {FILES_PREFIX}{location}\r\n"
    )


_cached_part_headers = lru_cache(maxsize=OTHER_CACHE)(part_headers)


def frame(boundary: str, parts: Iterable[tuple[str, Segment | int]]) -> list[Segment]:
    """The body segments for ``parts``, each a block of header lines and its content (or the
    content's size alone, which stands in the list for the content to come).

    ``--B CRLF headers CRLF data CRLF --B ... CRLF --B-- CRLF``, with neighbouring bytes joined so
    that each part costs one bytes segment and one file slice.
    """
    delimiter = f"--{boundary}\r\n"
    segments: list[Segment] = []
    pending = ""
    for header_lines, content in parts:
        # A size alone stands in for content whose bytes come later (a layout: formats.py).
        size = content if type(content) is int else len(content) if isinstance(content, bytes) else content.count
        pending += f"{delimiter}{header_lines}Content-Length: {size}\r\n\r\n"
        if not isinstance(content, bytes):  # a slice of a file or an object
            segments.append(pending.encode("ascii"))
            segments.append(content)
            pending = "\r\n"
        else:
            segments.append(pending.encode("ascii") + content)
            pending = "\r\n"
    segments.append(f"{pending}--{boundary}--\r\n".encode("ascii"))
    return segments
