"""The async transport, on aiohttp (the ``fsspec`` extra): a built request sent, its answer read
back as a :class:`~.head.ResponseHead` and body chunks. Used by ``axon.client.afetch`` (a session of its
own per call) and by ``axon://`` (its filesystem's pooled session).

aiohttp does the HTTP (connections, chunked coding, interim answers, the body's length); this
turns its failures into a :class:`FetchError` saying what was under way, as the blocking
transport does. The one module of :mod:`axon.batchclient` that imports a third-party package;
nothing imports it until an async client runs.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Iterator
from contextlib import contextmanager

import aiohttp
import yarl

from .errors import FetchError
from .head import ResponseHead, headers_from_pairs
from .refusal import MAX_ERROR_BODY
from .request import BatchRequest

__all__ = ["AsyncRoundTrip", "session_for_one_fetch"]


def session_for_one_fetch(timeout: float | None) -> aiohttp.ClientSession:
    """A session for one fetch: ``timeout`` bounds each network operation (connecting, each
    read), not the whole transfer; the bytes come as sent, never decompressed."""
    bounds = aiohttp.ClientTimeout(total=None, sock_connect=timeout, sock_read=timeout)
    return aiohttp.ClientSession(timeout=bounds, auto_decompress=False)


class AsyncRoundTrip:
    """``async with AsyncRoundTrip(session, request) as trip: head = await trip.start()``,
    then ``trip.chunks()`` or ``await trip.error_body()``; the answer is released on leaving."""

    def __init__(self, session: aiohttp.ClientSession, request: BatchRequest) -> None:
        self.session = session
        self.request = request
        self._response: aiohttp.ClientResponse | None = None

    async def __aenter__(self) -> AsyncRoundTrip:
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        if self._response is not None:
            self._response.release()

    async def start(self) -> ResponseHead:
        request = self.request
        # Encoded already: yarl must not encode (or decode) the target again.
        url = yarl.URL(request.url, encoded=True)
        with self._errors("sending the request"):
            response = self._response = await self.session.request(
                request.method, url, data=request.body or None, headers=list(request.headers), allow_redirects=False,
            )
        pairs = [(name.decode("latin-1"), value.decode("latin-1")) for name, value in response.raw_headers]
        return ResponseHead(response.status, response.reason or "", headers_from_pairs(pairs))

    async def error_body(self) -> bytes:
        """The start of a refusal's body (at most :data:`MAX_ERROR_BODY` bytes)."""
        assert self._response is not None
        body = b""
        with self._errors("reading the error response"):
            while len(body) < MAX_ERROR_BODY:
                chunk = await self._response.content.read(MAX_ERROR_BODY - len(body))
                if not chunk:
                    break
                body += chunk
        return body

    async def chunks(self, chunk_size: int | None = None) -> AsyncIterator[bytes]:
        """The body as it arrives: at most ``chunk_size`` bytes a chunk, or without it each
        chunk as aiohttp received it (``readany`` would join every chunk waiting into one new
        ``bytes``: a copy of the body whenever the reader falls behind)."""
        assert self._response is not None
        content = self._response.content
        while True:
            with self._errors("receiving the response"):
                if chunk_size is None:
                    chunk, http_chunk_ended = await content.readchunk()
                else:
                    chunk, http_chunk_ended = await content.read(chunk_size), False
            if not chunk:
                if http_chunk_ended:  # the end of a chunk of a chunked body, not of the body
                    continue
                return
            yield chunk

    @contextmanager
    def _errors(self, doing: str) -> Iterator[None]:
        try:
            yield
        except aiohttp.ClientPayloadError as exc:  # the connection closed before the body's end
            raise FetchError(f"{self.request.origin}: failed while {doing}: the body was cut short ({exc})") from exc
        except (aiohttp.ClientError, asyncio.TimeoutError, OSError) as exc:
            if isinstance(exc, aiohttp.ClientConnectorError):
                doing = "connecting"  # aiohttp connects inside the request
            detail = str(exc) or type(exc).__name__
            raise FetchError(f"{self.request.origin}: failed while {doing}: {detail}") from exc
