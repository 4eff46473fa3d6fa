"""The listening socket (:func:`bind`), and taking new connections off it: :class:`Acceptor`.

uvloop's server takes one connection per turn of the loop (it accepts the next only once the
last one's protocol was made, a turn later). A worker busy answering fifty clients turns its
loop every few tens of milliseconds, so when fifty clients connect at once the last waits fifty
turns for its first answer: a second and more, measured (BENCHMARKS.md, "Real traffic"). Here
the worker takes every waiting connection when the socket is ready, as nginx's ``multi_accept``
does, and makes each one's transport through the loop's own ``connect_accepted_socket``.

When several workers share one listening socket (no ``--reuse-port``), a worker takes only a few
at a time, so that a burst is spread over the workers rather than landing on whichever woke
first.
"""

from __future__ import annotations

import asyncio
import errno
import logging
import socket
import ssl
from collections.abc import Callable
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from .config import ServerConfig

log = logging.getLogger("axon.server")

#: Connections taken per wake when the socket is shared with other workers.
SHARED_BURST = 4
#: Seconds accepting pauses when the process is out of descriptors (as asyncio's loop does).
OUT_OF_FDS_PAUSE = 0.1


def bind(config: ServerConfig, *, listen: bool = True) -> socket.socket:
    """The listening socket for ``config.host``/``config.port`` (port 0: any free port).

    With ``config.reuse_port`` it joins the port's ``SO_REUSEPORT`` group; ``listen=False``
    only holds the port (the supervisor's socket then: a bound socket that does not listen is
    given no connections, and lets each worker bind a listening one of its own)."""
    infos = socket.getaddrinfo(config.host or None, config.port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)
    family, kind, proto, _, address = infos[0]
    sock = socket.socket(family, kind, proto)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        if config.reuse_port:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
        sock.bind(address)
        if listen:
            sock.listen(config.backlog)
        sock.setblocking(False)
    except BaseException:
        sock.close()
        raise
    return sock


class Acceptor:
    def __init__(
        self, loop: asyncio.AbstractEventLoop, sock: socket.socket, factory: Callable[[], asyncio.Protocol],
        ssl_context: ssl.SSLContext | None, burst: int,
    ) -> None:
        self._loop = loop
        self._sock = sock
        self._factory = factory
        self._ssl = ssl_context
        self._burst = burst
        self._reading = False
        self._closed = False

    def start(self) -> None:
        self._sock.setblocking(False)
        self._reading = True
        self._loop.add_reader(self._sock.fileno(), self._ready)

    def close(self) -> None:
        """Stop taking connections and close the listening socket, as ``Server.close`` does (the
        connections already taken are served on)."""
        self._closed = True
        self._pause()
        self._sock.close()

    def _pause(self) -> None:
        if self._reading:
            self._reading = False
            self._loop.remove_reader(self._sock.fileno())

    def _ready(self) -> None:
        for _ in range(self._burst):
            try:
                conn, _ = self._sock.accept()
            except (BlockingIOError, InterruptedError):
                return
            except OSError as exc:
                if exc.errno in (errno.EMFILE, errno.ENFILE, errno.ENOBUFS, errno.ENOMEM):
                    # Out of descriptors: the waiting clients stay queued; try again shortly.
                    log.warning("cannot accept a connection (%s); pausing %.1f s", exc.strerror, OUT_OF_FDS_PAUSE)
                    self._pause()
                    self._loop.call_later(OUT_OF_FDS_PAUSE, self._resume)
                return  # ECONNABORTED and the like: that client left; the next wake goes on
            conn.setblocking(False)
            if conn.family in (socket.AF_INET, socket.AF_INET6):
                conn.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            self._loop.create_task(self._connect(conn))

    def _resume(self) -> None:
        if not self._closed and not self._reading:
            self.start()

    async def _connect(self, conn: socket.socket) -> None:
        try:
            await self._loop.connect_accepted_socket(self._factory, conn, ssl=self._ssl)
        except Exception as exc:  # noqa: BLE001 - a TLS handshake that failed, a client gone: that one only
            log.debug("a connection could not be set up: %s", exc)
            conn.close()
