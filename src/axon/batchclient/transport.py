"""The blocking transport: one request on a connection of its own, over ``http.client``; what
``axon fetch`` and ``axon.engines``' tar shards send with.

It moves bytes and nothing else: the request comes built (:mod:`.request`), the answer leaves as
a :class:`~.head.ResponseHead` and body chunks (or as a file to ``read``), and what they mean is
decided by the sans-IO core. ``http.client`` does the HTTP (chunked coding, interim answers);
this adds what a fetch needs around it: ``timeout`` on each network operation, failures as a
:class:`FetchError` saying what was under way, and a canceller (``axon.client.cancel.Cancel``)
that shuts the socket down from another thread.
"""

from __future__ import annotations

import http.client
import ssl
import socket
from collections.abc import Iterator
from contextlib import AbstractContextManager, contextmanager, nullcontext
from typing import Protocol

from .errors import FetchError
from .head import ResponseHead
from .refusal import MAX_ERROR_BODY
from .request import BatchRequest


class Cancel(Protocol):
    """What the transport uses of a canceller (``axon.client.cancel.Cancel``)."""

    def watching(self, sock: socket.socket) -> AbstractContextManager[None]:
        """While the block runs, a cancel shuts ``sock`` down."""
        ...

    def check(self) -> None:
        """Raise ``Cancelled`` if cancelled."""
        ...

__all__ = ["RoundTrip", "network_errors"]


class RoundTrip:
    """``with RoundTrip(request, timeout) as trip: head = trip.start()``, then
    ``trip.chunks(size)`` or ``trip.error_body()``; the connection closes on leaving."""

    def __init__(self, request: BatchRequest, timeout: float | None, cancel: Cancel | None = None) -> None:
        self.request = request
        self.cancel = cancel
        if request.scheme == "https":
            self._connection: http.client.HTTPConnection = http.client.HTTPSConnection(
                request.host, request.port, timeout=timeout, context=ssl.create_default_context()
            )
        else:
            self._connection = http.client.HTTPConnection(request.host, request.port, timeout=timeout)
        self._response: http.client.HTTPResponse | None = None
        self._watch: AbstractContextManager[None] = nullcontext()

    def __enter__(self) -> RoundTrip:
        return self

    def __exit__(self, *exc_info: object) -> None:
        try:
            self._watch.__exit__(None, None, None)
        finally:
            self._connection.close()

    def start(self) -> ResponseHead:
        """Connect, send the request, read the answer's head."""
        request = self.request
        with self._errors("connecting"):
            self._connection.connect()  # now, not inside request(): a Cancel must know the socket first
        if self.cancel is not None and self._connection.sock is not None:
            self._watch = self.cancel.watching(self._connection.sock)
            self._watch.__enter__()
        with self._errors("sending the request"):
            self._connection.request(request.method, request.target, request.body or None, dict(request.headers))
            response = self._response = self._connection.getresponse()
        return ResponseHead(response.status, response.reason, response.headers)

    def error_body(self) -> bytes:
        """The start of a refusal's body (at most :data:`MAX_ERROR_BODY` bytes)."""
        assert self._response is not None
        with self._errors("reading the error response"):
            return self._response.read(MAX_ERROR_BODY)

    def read(self, size: int) -> bytes:
        """At most ``size`` bytes of the body, ``b""`` at its end (a body cut short simply ends:
        the reader notices what is missing). The answer as a file, for a reader that pulls."""
        assert self._response is not None
        with self._errors("receiving the response"):
            return self._response.read1(size)

    def chunks(self, chunk_size: int) -> Iterator[bytes]:
        """The body as it arrives (:meth:`read`). With a Cancel, it is checked between chunks,
        where the caller's state is whole."""
        while True:
            chunk = self.read(chunk_size)
            if self.cancel is not None:
                self.cancel.check()
            if not chunk:
                return
            yield chunk

    def _errors(self, doing: str) -> AbstractContextManager[None]:
        return network_errors(self.request.origin, doing, self.cancel)


@contextmanager
def network_errors(origin: str, doing: str, cancel: Cancel | None = None) -> Iterator[None]:
    """Turns a socket or HTTP failure inside the block into a :class:`FetchError` saying when
    (a ``Cancelled`` if ``cancel`` was set: the failure is its shutting the socket)."""
    try:
        yield
    except (OSError, http.client.HTTPException) as exc:
        if cancel is not None:
            cancel.check()
        detail = str(exc) or type(exc).__name__
        raise FetchError(f"{origin}: failed while {doing}: {detail}") from exc
