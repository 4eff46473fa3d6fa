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

    def __init__(self, url: bytes, headers: dict[str, str] | None = None, in_head: bool = True,
                 keep_alive: bool = False) -> None:
        # The request as it arrives (a head read whole in one call arrives with its fields).
        self.url = url
        self.headers: dict[str, str] = {} if headers is None else headers
        self.body: list[bytes] | None = None  # the pieces, once one arrived
        self.size = 0  # body bytes
        self.head_bytes = 0  # header bytes counted as the parser reports them
        self.head_raw = 0  # bytes fed while the head was incomplete (a header still arriving)
        self.nheaders = 0
        self.chunks = 0  # chunks of a chunked body begun
        self.framing = 0  # bytes fed past the head that were not body (chunk lines, trailers)
        self.in_head = in_head
        self.continue_pending = False  # "Expect: 100-continue", not answered yet
        # How it is answered.
        self.http11 = True
        self.keep_alive = keep_alive  # may the connection carry another request after this one
        self.head = False
        self.request: Request | None = None  # None when refused: then ``refusal`` says why
        self.refusal: HTTPError | None = None
