"""Bytes on the wire: status lines, the response head, the Date header, chunk framing.

Everything a response head needs that does not depend on the request is precomputed: the status
line table (as uvicorn's), and ``Date`` + ``Server`` as one line rebuilt once per second.
"""

from __future__ import annotations

import time

from ..http.conditional import http_date
from ..response import REASONS
from ..untracked import untracked

SERVER = b"axon"
CRLF = b"\r\n"
LAST_CHUNK = b"0\r\n\r\n"
CONTINUE = b"HTTP/1.1 100 Continue\r\n\r\n"
CLOSE = b"Connection: close\r\n"
KEEP_ALIVE = b"Connection: keep-alive\r\n"
CHUNKED = b"Transfer-Encoding: chunked\r\n"

STATUS_LINES: dict[int, bytes] = {
    status: f"HTTP/1.1 {status} {reason}\r\n".encode("ascii") for status, reason in REASONS.items()
}


def status_line(status: int, reason: str) -> bytes:
    line = STATUS_LINES.get(status)
    if line is None:
        line = f"HTTP/1.1 {int(status)} {reason}\r\n".encode("latin-1")
    return line


def date_line(now: float | None = None) -> bytes:
    """``Date: ...`` and ``Server: axon`` as one bytes line (a worker rebuilds it each second)."""
    when = time.time() if now is None else now
    return b"Date: " + http_date(when).encode("ascii") + b"\r\nServer: " + SERVER + CRLF


class UnsafeHeader(ValueError):
    """A handler put CR, LF or NUL in a header: sending it would split the response."""


def encode_head(status: int, reason: str, headers: list[tuple[str, str]], tail: bytes) -> bytes:
    """The status line, ``headers`` and ``tail`` (pre-encoded lines), then the blank line: a
    whole head, for the answers a worker makes once (:func:`frame_head` says what is refused)."""
    return b"".join((frame_head(status, reason, headers), tail, CRLF))


def frame_head(status: int, reason: str, headers: list[tuple[str, str]]) -> bytes:
    """The status line and ``headers``, each line ended by CRLF: a head as a prepared answer
    holds it (:mod:`.answer`), before ``Date``, ``Connection`` and the blank line.

    Raises :class:`UnsafeHeader` if a name or value holds CR, LF or NUL (response splitting),
    and ``UnicodeEncodeError`` for a header that is not latin-1.
    """
    line = STATUS_LINES.get(status) or status_line(status, reason)
    if not headers:
        return line
    try:
        key = (status, reason, tuple(headers))
        framed = _FRAMED.get(key)
    except TypeError:  # a header given as a list: fine, just not cached
        key, framed = None, None
    if framed is None:
        framed = line + encode_headers(headers)
        # Only text keys: 1, 1.0 and True are equal keys that encode differently.
        if key is not None and all(type(name) is str and type(value) is str for name, value in key[2]):
            if len(_FRAMED) >= _FRAMED_MAX:
                _FRAMED.clear()
            untracked(key[2])  # kept: its tuples of tuples out of the collector's walk (axon.untracked)
            _FRAMED[untracked(key)] = framed
    return framed


#: Framed heads by their status and headers: a server sends the same few again and again (health,
#: a file's or a batch's validators and length, the usual errors). Checked once, when encoded.
_FRAMED: dict[tuple, bytes] = {}
_FRAMED_MAX = 1024


def encode_headers(headers: list[tuple[str, str]]) -> bytes:
    """``Name: value`` lines, each ended by CRLF; :class:`UnsafeHeader` for CR, LF or NUL."""
    text = "\r\n".join([f"{name}: {value}" for name, value in headers])
    # Every CR and LF must be one of the separators just added: none may come from a header.
    lines = len(headers) - 1
    if text.count("\n") != lines or text.count("\r") != lines or "\x00" in text:
        raise UnsafeHeader("a response header contains CR, LF or NUL")
    return text.encode("latin-1") + CRLF


def chunk_head(size: int) -> bytes:
    return b"%x\r\n" % size
