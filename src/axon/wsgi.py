"""Axon as a WSGI application (PEP 3333): gunicorn, uWSGI, waitress, mod_wsgi.

    gunicorn axon.wsgi:application          # serves $AXON_ROOT (default: the current directory)

Bodies stream in bounded chunks (``Limits.chunk_size``): constant memory whatever the batch.
A whole single file goes through ``wsgi.file_wrapper`` when the server offers one, so gunicorn
and uWSGI send it with ``sendfile``. ``close()`` releases every descriptor even when the client
goes away mid-stream.
"""

from __future__ import annotations

import io
import os
from typing import Callable, Iterable, Iterator

from .app import App, Request
from .chunks import iter_chunks
from .errors import BadRequest, FileChanged, HTTPError, URITooLong
from .limits import DEFAULT_LIMITS, Limits
from .response import Response, error_response
from .http.segments import FileSlice
from .runtime import (
    BODY_METHODS, BodyReader, CannotServe, DateHeader, Lazy, build_app, declared_length, default_app, refusal_to_serve,
)

StartResponse = Callable[..., object]


class WSGIApp:
    """Adapts an :class:`App` to the WSGI calling convention."""

    def __init__(self, app: App) -> None:
        self.app = app

    def __call__(self, environ: dict, start_response: StartResponse) -> Iterable[bytes]:
        app = self.app
        try:
            request = self.request(environ)
        except HTTPError as exc:
            response = error_response(exc)
        else:
            response = app.handle(request)
        if hasattr(response.stream, "__aiter__") and not hasattr(response.stream, "__iter__"):
            response.close()
            response = error_response(HTTPError("an async stream cannot be served over WSGI; use a plain generator"))
        try:
            start_response(f"{response.status} {response.reason}", [*response.headers, _date_header()])
        except BaseException:
            response.close()
            raise
        if response.stream is not None:
            return _StreamBody(response)
        body = response.body
        wrapper = environ.get("wsgi.file_wrapper")
        if wrapper is not None and len(body) == 1 and isinstance(body[0], FileSlice) and len(response.files) == 1:
            whole = response.files[0]
            if body[0].offset == 0 and body[0].count == whole.size and not whole.shared:
                # Hand the descriptor to the server as a file object that now owns it.
                response.files = ()
                return wrapper(_CheckedFile(whole.fd, whole.size), app.limits.chunk_size)
        if not response.files:
            return body  # only bytes: the server writes them as they are
        return _SegmentBody(response, app.limits.chunk_size)

    def request(self, environ: dict) -> Request:
        method = environ["REQUEST_METHOD"]
        # Checked on the raw target too: uWSGI drops a variable that overflows its buffer and
        # calls the app anyway, so a too-long query could otherwise arrive as an empty one.
        target = environ.get("REQUEST_URI") or environ.get("RAW_URI") or ""
        if len(target) > self.app.limits.max_url_bytes:
            raise URITooLong(f"URL longer than {self.app.limits.max_url_bytes} bytes")
        try:
            # PEP 3333: PATH_INFO is the server's percent-decoded bytes as latin-1. Recover
            # the bytes and decode them as UTF-8: the path is decoded once, by the server.
            path = environ.get("PATH_INFO", "").encode("latin-1").decode("utf-8")
        except UnicodeError:
            raise BadRequest("path is not valid UTF-8", code="bad_path") from None
        headers = {key[5:].replace("_", "-").lower(): value for key, value in environ.items() if key.startswith("HTTP_")}
        if environ.get("CONTENT_TYPE"):
            headers["content-type"] = environ["CONTENT_TYPE"]
        if environ.get("CONTENT_LENGTH"):
            headers["content-length"] = environ["CONTENT_LENGTH"]
        body = b""
        if method in BODY_METHODS:
            body = self.read_body(environ, self.app.limits)
        return Request(method, path or "/", environ.get("QUERY_STRING", ""), headers, body, environ.get("REMOTE_ADDR"))

    @staticmethod
    def read_body(environ: dict, limits: Limits) -> bytes:
        stream = environ["wsgi.input"]
        # PEP 3333: CONTENT_LENGTH may be empty or absent when there is none.
        size = declared_length(environ.get("CONTENT_LENGTH") or None, limits)
        body = BodyReader(limits)
        # No length: a chunked body, which gunicorn and uWSGI de-chunk for us; read one past the
        # limit to tell "exactly the limit" from "over it".
        body.add(stream.read(limits.max_body_bytes + 1 if size is None else size))
        return body.body()


#: uWSGI's HTTP socket sends no ``Date``, and a ``Last-Modified`` without it leaves caches no
#: clock to compare; gunicorn sends its own in its place; waitress keeps ours.
_date_header = DateHeader()


class _CheckedFile(io.FileIO):
    """A whole file for ``wsgi.file_wrapper``. Servers send it with ``sendfile``, which stops
    quietly at end of file: a file truncated meanwhile would leave a body shorter than its
    Content-Length on a connection kept alive. Closing checks the file still holds what was
    announced, and raises if not, so that the server drops the connection."""

    def __init__(self, fd: int, size: int) -> None:
        super().__init__(fd, "rb", closefd=True)
        self._announced = size

    def close(self) -> None:
        if self.closed:
            return
        try:
            shrank = os.fstat(self.fileno()).st_size < self._announced
        finally:
            super().close()
        if shrank:
            raise FileChanged(f"file shrank while streaming (announced {self._announced} bytes)")


class _SegmentBody:
    """The WSGI body iterable for a segment list; ``close()`` releases the response's files."""

    def __init__(self, response: Response, chunk_size: int) -> None:
        self._response = response
        self._chunks = iter_chunks(response.body, chunk_size)

    def __iter__(self) -> Iterator[bytes]:
        return self._chunks

    def close(self) -> None:
        self._chunks.close()
        self._response.close()


class _StreamBody:
    """The WSGI body iterable for a generator stream."""

    def __init__(self, response: Response) -> None:
        self._response = response

    def __iter__(self) -> Iterator[bytes]:
        return iter(self._response.stream)  # type: ignore[arg-type]

    def close(self) -> None:
        self._response.close()


def create_app(root: str | os.PathLike[str] | None = None, *, limits: Limits = DEFAULT_LIMITS, app: App | None = None) -> WSGIApp:
    """A WSGI callable serving ``root`` (default ``$AXON_ROOT``, else the current directory),
    or wrapping an :class:`App` you built, with your own routes."""
    return WSGIApp(default_app(root, limits=limits, app=app))


_built = Lazy(lambda: build_app(create_app))


def application(environ: dict, start_response: StartResponse) -> Iterable[bytes]:
    """``axon.wsgi:application``: built on first call, so importing this module opens nothing.
    WSGI has no start-up event: while the App cannot be built, every request (the health probe
    too) gets a JSON 503 saying why, and the server's log the reason once."""
    try:
        app = _built()
    except CannotServe as failure:
        response = error_response(refusal_to_serve(failure))
        start_response(f"{response.status} {response.reason}", [*response.headers, _date_header()])
        return response.body  # type: ignore[return-value]
    return app(environ, start_response)
