"""One request on a connection, from its first byte to its answer: :class:`Exchange`.

The connection makes one when a request's first bytes are parsed, the parser's callbacks fill
it in (the head and body as they arrive, with the counts the limits are checked against), and
once it is complete it waits in the connection's queue until its turn to be answered. It is a
plain record: the connection decides, the response writer frames the answer from it.

What the answer's framing needs is decided here once: whether the connection may carry another
request (``keep_alive``) and the HTTP version (``http11``) when the head is complete (keep-alive
again at the end of a chunked body, whose trailer may say close), and whether the request was a
``HEAD`` (``head``) when it is complete, so that no function passes them along by position.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from ..app import Request
    from ..errors import HTTPError


class Exchange:
    __slots__ = (
        "url", "headers", "body", "size", "head_bytes", "head_raw", "nheaders", "in_head", "chunks", "framing",
        "continue_pending", "http11", "keep_alive", "head", "request", "refusal",
    )
    # Set by :func:`exchange`, each one, when the object is made.
    url: bytes
    headers: dict[str, str]
    body: list[bytes] | None
    size: int
    head_bytes: int
    head_raw: int
    nheaders: int
    chunks: int
    framing: int
    in_head: bool
    continue_pending: bool
    http11: bool
    keep_alive: bool
    head: bool
    request: Request | None
    refusal: HTTPError | None


def exchange(url: bytes, headers: dict[str, str] | None = None, in_head: bool = True,
             keep_alive: bool = False) -> Exchange:
    """A new :class:`Exchange` for a request whose target is ``url`` (the one way to make one).
    A function rather than ``__init__``: calling a class with a Python ``__init__`` goes through
    C and back into a new frame, and a connection makes one for every request."""
    ex = _new(Exchange)
    # The request as it arrives (a head read whole in one call arrives with its fields).
    ex.url = url
    ex.headers = {} if headers is None else headers
    ex.body = None  # the pieces, once one arrived
    ex.size = 0  # body bytes
    ex.head_bytes = 0  # header bytes counted as the parser reports them
    ex.head_raw = 0  # bytes fed while the head was incomplete (a header still arriving)
    ex.nheaders = 0
    ex.chunks = 0  # chunks of a chunked body begun
    ex.framing = 0  # bytes fed past the head that were not body (chunk lines, trailers)
    ex.in_head = in_head
    ex.continue_pending = False  # "Expect: 100-continue", not answered yet
    # How it is answered.
    ex.http11 = True
    ex.keep_alive = keep_alive  # may the connection carry another request after this one
    ex.head = False
    ex.request = None  # None when refused: then ``refusal`` says why
    ex.refusal = None
    return ex


_new = object.__new__
