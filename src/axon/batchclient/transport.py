"""The blocking transport: a request and its answer over ``http.client``; what ``axon fetch`` and
``axon.engines``' tar shards send with. A round trip has a connection of its own, or one from a
:class:`Connections` pool, kept alive across round trips (the tar shards: one round trip is sent
while another is read, each on its connection, and each connection goes on to the next).

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

__all__ = ["Connections", "RoundTrip", "network_errors"]

Key = tuple[str, str, int]  # scheme, host, port


def _connect(key: Key, timeout: float | None) -> http.client.HTTPConnection:
    scheme, host, port = key
    if scheme == "https":
        return http.client.HTTPSConnection(host, port, timeout=timeout, context=ssl.create_default_context())
    return http.client.HTTPConnection(host, port, timeout=timeout)


class Connections:
    """Connections kept alive between round trips, by server; ``close()`` closes every one,
    those lent out too. A round trip given this pool sends ``Connection: keep-alive`` (its
    request says so) and hands its connection back once its answer was read to the end."""

    def __init__(self, timeout: float | None) -> None:
        self.timeout = timeout
        self._idle: dict[Key, list[http.client.HTTPConnection]] = {}
        self._all: set[http.client.HTTPConnection] = set()

    def take(self, key: Key) -> tuple[http.client.HTTPConnection, bool]:
        """A connection to ``key``'s server, and whether it was used before."""
        idle = self._idle.get(key)
        if idle:
            return idle.pop(), True
        connection = _connect(key, self.timeout)
        self._all.add(connection)
        return connection, False

    def give(self, key: Key, connection: http.client.HTTPConnection) -> None:
        self._idle.setdefault(key, []).append(connection)

    def drop(self, connection: http.client.HTTPConnection) -> None:
        self._all.discard(connection)
        connection.close()

    def close(self) -> None:
        connections, self._all, self._idle = self._all, set(), {}
        for connection in connections:
            connection.close()


class RoundTrip:
    """``with RoundTrip(request, timeout) as trip: head = trip.start()``, then
    ``trip.chunks(size)``, ``trip.read_exactly(size)`` or ``trip.error_body()``; the connection
    closes on leaving, or goes back to ``pool`` if the answer was read to its end.

    ``send()`` sends the request without waiting for the answer (a reader asks for its next
    batch before reading this one); a failure to send is raised by ``start()``, so that it
    reaches the caller with the batch it concerns.
    """

    def __init__(self, request: BatchRequest, timeout: float | None, cancel: Cancel | None = None,
                 pool: Connections | None = None) -> None:
        self.request = request
        self.cancel = cancel
        self.pool = pool
        self._key: Key = (request.scheme, request.host, request.port)
        if pool is None:
            self._connection, self._reused = _connect(self._key, timeout), False
        else:
            self._connection, self._reused = pool.take(self._key)
        self._response: http.client.HTTPResponse | None = None
        self._watch: AbstractContextManager[None] = nullcontext()
        self._sent: FetchError | bool = False

    def __enter__(self) -> RoundTrip:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    def close(self) -> None:
        try:
            self._watch.__exit__(None, None, None)
        finally:
            response = self._response
            if self.pool is None:
                self._connection.close()
            elif response is not None and response.isclosed() and not response.will_close:
                self.pool.give(self._key, self._connection)  # read to its end: the connection is free
            else:
                self.pool.drop(self._connection)

    def send(self) -> None:
        """Connect (unless the connection is kept from before) and send the request."""
        if self._sent is not False:
            return
        try:
            self._send()
            self._sent = True
        except FetchError as exc:
            self._sent = exc

    def _send(self) -> None:
        request = self.request
        if self._connection.sock is None:
            with self._errors("connecting"):
                self._connection.connect()  # now, not inside request(): a Cancel must know the socket first
        if self.cancel is not None and self._connection.sock is not None:
            self._watch = self.cancel.watching(self._connection.sock)
            self._watch.__enter__()
        with self._errors("sending the request"):
            self._connection.request(request.method, request.target, request.body or None, dict(request.headers))

    def start(self) -> ResponseHead:
        """Send the request (unless :meth:`send` did), read the answer's head."""
        self.send()
        if isinstance(self._sent, FetchError):
            if not self._reused:
                raise self._sent
            self._again()  # a kept connection the server closed while it was idle
        try:
            with self._errors("sending the request"):  # the answer's head, as http.client reads it
                response = self._response = self._connection.getresponse()
        except FetchError as exc:
            if not (self._reused and isinstance(exc.__cause__, (ConnectionError, http.client.RemoteDisconnected))):
                raise
            self._again()
            with self._errors("sending the request"):
                response = self._response = self._connection.getresponse()
        return ResponseHead(response.status, response.reason, response.headers)

    def _again(self) -> None:
        """Send once more on a new connection: the kept one was closed before any answer came."""
        self._connection.close()
        self._reused = False
        self._sent = False
        self._send()
        self._sent = True

    def error_body(self) -> bytes:
        """The start of a refusal's body (at most :data:`MAX_ERROR_BODY` bytes)."""
        assert self._response is not None
        with self._errors("reading the error response"):
            return self._response.read(MAX_ERROR_BODY)

    def read_exactly(self, size: int) -> bytes:
        """``size`` bytes of the body (fewer only where it ended, after its Content-Length: a
        shorter one is a FetchError), in one ``bytes`` object that http.client's buffered reader
        has the socket fill: no chunk is copied into another."""
        response = self._response
        assert response is not None
        with self._errors("receiving the response"):
            data = response.read(size)
        if len(data) < size and response.length:  # http.client ends a short body quietly
            raise FetchError(f"{self.request.origin}: the body ended {response.length} bytes short of its Content-Length")
        return data

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
