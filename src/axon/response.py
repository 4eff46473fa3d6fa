"""What a handler returns: a status, headers, and a body of segments (or a generator stream).

It sits above ``storage`` (it holds the open files to close) and below ``plan`` (the planners
build responses directly); ``app`` re-exports it. Runtimes read ``status``, ``headers``
(``Content-Length`` already in them when the length is known), then either ``body`` (a list of
segments) or ``stream`` (an iterable of bytes, sent chunked), and call ``close()`` when done,
whatever happened.
"""

from __future__ import annotations

import json
from http import HTTPStatus
from typing import Any, AsyncIterable, Iterable, Union

from .errors import HTTPError
from .storage import File
from .http.segments import Segment, body_length

Stream = Union[Iterable[bytes], AsyncIterable[bytes]]  # an object body's may give read-only memoryviews

_JSON = ("Content-Type", "application/json")
#: Errors and the health probe describe a moment, not a resource: no cache may keep them.
NO_STORE = ("Cache-Control", "no-store")


class Response:
    """A planned response. ``length`` is None only for a stream (length unknown in advance).

    ``repeatable`` is set by the App on the answer of a route that declared it (``App.add_route(...,
    repeatable=True)``): a later GET of the same target and ``Accept``, without ``Range`` or a
    precondition, gets the same head while the files it holds are the same versions, so a server
    may send that head again with the files opened anew (server/shortcuts.py)."""

    __slots__ = ("status", "headers", "body", "stream", "files", "length", "repeatable")

    def __init__(
        self,
        status: int = 200,
        headers: list[tuple[str, str]] | None = None,
        body: list[Segment] | None = None,
        *,
        stream: Stream | None = None,
        files: list[File] | tuple[File, ...] = (),
        length: int | None = None,
    ) -> None:
        """``length``: the body's, when the caller knows it without reading every segment (a
        batch's planner adds its files' sizes to its blocks'); it must be exactly the body's."""
        self.status = status
        self.headers = list(headers) if headers is not None else []
        self.stream = stream
        self.files = files
        self.repeatable = False
        if stream is not None:
            self.body: list[Segment] = []
            self.length: int | None = None
        else:
            self.body = body if body is not None else []
            self.length = body_length(self.body) if length is None else length
            if status != 304 and not 100 <= status < 200 and status != 204:
                self.headers.append(("Content-Length", str(self.length)))

    @property
    def reason(self) -> str:
        return REASONS.get(self.status, "Unknown")

    def without_body(self) -> "Response":
        """The same response for a HEAD request: headers kept, files released, no body."""
        self.close()
        self.body = []
        self.stream = None
        return self

    def close(self) -> None:
        """Release every descriptor and the stream. Safe to call more than once."""
        files, self.files = self.files, ()
        for f in files:
            f.close()
        stream, self.stream = self.stream, None
        close = getattr(stream, "close", None)
        if close is not None:
            close()


#: Each status's reason phrase, as RFC 9110 names it, on every Python: ``http.HTTPStatus`` took
#: RFC 9110's names for 413, 416 and 422 only in Python 3.13. The status lines of Axon's own
#: server are made from it too (``server/wire.py``).
REASONS: dict[int, str] = {s.value: s.phrase for s in HTTPStatus} | {
    413: "Content Too Large", 416: "Range Not Satisfiable", 422: "Unprocessable Content",
}


def json_response(data: Any, status: int = 200, headers: list[tuple[str, str]] | None = None) -> Response:
    body = json.dumps(data, ensure_ascii=True, separators=(",", ":")).encode("ascii")
    return Response(status, [_JSON, *(headers or ())], [body])


def text_response(text: str, status: int = 200, content_type: str = "text/plain; charset=utf-8") -> Response:
    return Response(status, [("Content-Type", content_type)], [text.encode("utf-8")])


def stream_response(chunks: Stream, status: int = 200, content_type: str = "application/octet-stream") -> Response:
    """A body whose length is not known in advance: sent chunked (HTTP/1.1) by the runtime."""
    return Response(status, [("Content-Type", content_type)], stream=chunks)


def redirect(location: str, status: int = 307) -> Response:
    if any(c in location for c in "\r\n\x00"):
        raise ValueError("a redirect location must not contain CR, LF or NUL")
    return Response(status, [("Location", location)], [])


def error_response(error: HTTPError) -> Response:
    return Response(error.status, [_JSON, NO_STORE, *error.headers], [error.to_json()])
