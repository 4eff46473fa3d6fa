"""Axon as an ASGI application: uvicorn, hypercorn, granian.

    uvicorn axon.asgi:application           # serves $AXON_ROOT (default: the current directory)

File bodies go out through the server's zero-copy extension ``http.response.zerocopysend`` when
it advertises it (the server is handed our open, checked descriptor), and as
``http.response.body`` chunks of ``Limits.chunk_size`` otherwise. Reading stops as soon as the
client disconnects. Lifespan events are answered: ``axon.asgi:application`` builds its App at
startup, and a startup fails, saying why, when it cannot serve (``runtime.build_app``).

``http.response.pathsend`` is deliberately not used: it hands the server a *name* to open later.
Granian, for one, opens it after ``send`` has returned (measured: passing ``/proc/self/fd/N``
failed because the descriptor was already closed), so the file served would be whatever the
name points to by then, and a symlink swapped in meanwhile would escape the root jail.
"""

from __future__ import annotations

import asyncio
import os
from typing import Any, Awaitable, Callable

from .app import App, Request
from .chunks import iter_chunks
from .errors import ClientGone, FileChanged, HTTPError
from .limits import DEFAULT_LIMITS, Limits
from .response import Response, error_response
from .runtime import (
    BODY_METHODS, BodyReader, CannotServe, Lazy, build_app, declared_length, default_app, fold_headers, refusal_to_serve,
)
from .streams import aiter_stream

Scope = dict[str, Any]
Receive = Callable[[], Awaitable[dict]]
Send = Callable[[dict], Awaitable[None]]


class ASGIApp:
    """Adapts an :class:`App` to ASGI 3."""

    def __init__(self, app: App) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        kind = scope["type"]
        if kind == "http":
            await self.http(scope, receive, send)
        elif kind == "lifespan":
            await lifespan(receive, send)
        # Anything else (websocket) is not served: returning closes it.

    async def http(self, scope: Scope, receive: Receive, send: Send) -> None:
        app = self.app
        try:
            request = await self.request(scope, receive)
        except HTTPError as exc:
            response = error_response(exc)
        except ClientGone:
            return  # gone while sending its body: no one to answer
        else:
            response = await app.handle_async(request)
        try:
            await send({"type": "http.response.start", "status": response.status, "headers": _encode(response.headers)})
            if response.stream is not None:
                await send_stream(response, send, app)
            elif response.files and response.body:
                await send_segments(scope, receive, send, response, app.limits.chunk_size)
            else:
                await send({"type": "http.response.body", "body": b"".join(response.body)})  # type: ignore[arg-type]
        except FileChanged:
            raise  # the server must cut the connection: the body cannot be what it claimed
        except (ClientGone, OSError):
            pass  # the client went away; there is no one left to tell
        finally:
            response.close()

    async def request(self, scope: Scope, receive: Receive) -> Request:
        # Servers percent-decode the path once into scope["path"]; the query stays raw.
        path = scope["path"]
        query = scope.get("query_string", b"").decode("latin-1")
        headers = fold_headers(scope.get("headers", ()))
        body = b""
        if scope["method"] in BODY_METHODS:
            body = await read_body(receive, headers, self.app.limits)
        client = scope.get("client")  # (host, port), or None where the server knows none
        return Request(scope["method"], path, query, headers, body, client[0] if client else None)


async def read_body(receive: Receive, headers: dict[str, str], limits: Limits) -> bytes:
    declared_length(headers.get("content-length"), limits)
    body = BodyReader(limits)
    while True:
        message = await receive()
        if message["type"] == "http.disconnect":
            raise ClientGone()
        body.add(message.get("body", b""))
        if not message.get("more_body", False):
            return body.body()


async def send_segments(scope: Scope, receive: Receive, send: Send, response: Response, chunk_size: int) -> None:
    extensions = scope.get("extensions") or {}
    body = response.body
    watcher = asyncio.ensure_future(_wait_disconnect(receive))
    try:
        if "http.response.zerocopysend" in extensions:
            await _zerocopy(send, body, watcher)
        else:
            for chunk in iter_chunks(body, chunk_size):
                # Some servers (hypercorn, granian) never suspend in send() once the client has
                # gone; yield so the watcher can see the disconnect before the next read.
                await asyncio.sleep(0)
                if watcher.done():
                    raise ClientGone()
                await send({"type": "http.response.body", "body": chunk, "more_body": True})
        await send({"type": "http.response.body", "body": b"", "more_body": False})
    finally:
        watcher.cancel()


async def _zerocopy(send: Send, body: list, watcher: asyncio.Future) -> None:
    files: dict[int, Any] = {}
    try:
        for seg in body:
            await asyncio.sleep(0)  # as in send_segments: let the watcher run
            if watcher.done():
                raise ClientGone()
            if isinstance(seg, bytes):
                await send({"type": "http.response.body", "body": seg, "more_body": True})
                continue
            if not seg.count:  # an empty file: nothing to hand over
                continue
            handle = files.get(seg.fd)
            if handle is None:
                handle = files[seg.fd] = os.fdopen(seg.fd, "rb", buffering=0, closefd=False)
            await send({"type": "http.response.zerocopysend", "file": handle, "offset": seg.offset, "count": seg.count, "more_body": True})
    finally:
        for handle in files.values():
            handle.close()


async def _wait_disconnect(receive: Receive) -> None:
    while (await receive())["type"] != "http.disconnect":
        pass


async def send_stream(response: Response, send: Send, app: App) -> None:
    async for chunk in aiter_stream(response.stream, app.executor):  # type: ignore[arg-type]
        if type(chunk) is not bytes:
            chunk = bytes(chunk)  # ASGI's body is bytes; a stream may give a view (object bodies)
        await send({"type": "http.response.body", "body": chunk, "more_body": True})
    await send({"type": "http.response.body", "body": b"", "more_body": False})


async def lifespan(receive: Receive, send: Send) -> None:
    while True:
        message = await receive()
        if message["type"] == "lifespan.startup":
            await send({"type": "lifespan.startup.complete"})
        elif message["type"] == "lifespan.shutdown":
            await send({"type": "lifespan.shutdown.complete"})
            return


def _encode(headers: list[tuple[str, str]]) -> list[tuple[bytes, bytes]]:
    return [(name.lower().encode("latin-1"), value.encode("latin-1")) for name, value in headers]


def create_app(root: str | os.PathLike[str] | None = None, *, limits: Limits = DEFAULT_LIMITS, app: App | None = None) -> ASGIApp:
    """An ASGI callable serving ``root`` (default ``$AXON_ROOT``, else the current directory),
    or wrapping an :class:`App` you built, with your own routes."""
    return ASGIApp(default_app(root, limits=limits, app=app))


_built = Lazy(lambda: build_app(create_app))


async def application(scope: Scope, receive: Receive, send: Send) -> None:
    """``axon.asgi:application``: built on first call (the lifespan's startup, where the server
    sends one), so importing this module opens nothing."""
    try:
        app = _built()
    except CannotServe as failure:
        await cannot_serve(failure, scope, receive, send)
        return
    await app(scope, receive, send)


async def cannot_serve(failure: CannotServe, scope: Scope, receive: Receive, send: Send) -> None:
    """Say why the App cannot serve: the lifespan's startup fails with it (the server exits
    saying so); a request, where the server sends no lifespan, gets it in a JSON 503."""
    kind = scope["type"]
    if kind == "lifespan":
        if (await receive())["type"] == "lifespan.startup":
            await send({"type": "lifespan.startup.failed", "message": str(failure)})
    elif kind == "http":
        response = error_response(refusal_to_serve(failure))
        await send({"type": "http.response.start", "status": response.status, "headers": _encode(response.headers)})
        await send({"type": "http.response.body", "body": b"".join(response.body)})  # type: ignore[arg-type]
