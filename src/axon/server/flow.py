"""Flow control of one connection: :class:`FlowControl`, when to read and when to write.

Reading pauses while an answer is pending (what arrives meanwhile is kept, one read at most) and
after a refusal. Writing: plain TCP connections run with a write-buffer high-water mark of 0, so
the transport pauses the protocol whenever *anything* is left unsent and resumes it once the
kernel took everything; the writer writes a chunk and, if paused, waits here before reading the
next one. What one slow reader holds in user space is one chunk, however slowly it reads. While
the writer waits the connection's write clock runs: a client that stops reading is cut.

``sendfile`` writes to the socket behind the transport's back, so when it meets a full socket
(``EAGAIN``) the loop watches the socket for writability, through a duplicate descriptor of our
own (transports refuse ``add_writer`` on their own). The same socket object sends the head that
precedes a ``sendfile`` with ``MSG_MORE``.
"""

from __future__ import annotations

import asyncio
import os
import socket
from typing import Any, Protocol

from ..errors import ClientGone

_MSG_MORE = getattr(socket, "MSG_MORE", 0)


class Stalls(Protocol):
    """What flow control tells its connection (:class:`~.protocol.HTTPProtocol`, which imports
    this module): that it waits for the client to read, and that it no longer does."""

    def stalled(self) -> None: ...

    def unstalled(self) -> None: ...


class FlowControl:
    # Slots: the compiled answer reads ``paused`` on every request (_simplehead.c, ``get``).
    __slots__ = ("transport", "read_paused", "paused", "closed", "_conn", "_loop", "_sock_fd", "_waiter", "_own_sock")

    def __init__(self, conn: Stalls, transport: Any, loop: asyncio.AbstractEventLoop, sock_fd: int) -> None:
        #: The connection's transport; the connection sets it again if it is replaced.
        self.transport = transport
        #: Reading is paused (``transport.pause_reading``).
        self.read_paused = False
        #: The transport holds unsent bytes (``pause_writing``): write nothing more until resumed.
        self.paused = False
        #: The connection is gone: nothing more can be read or written.
        self.closed = False
        self._conn = conn
        self._loop = loop
        self._sock_fd = sock_fd
        self._waiter: asyncio.Future | None = None
        self._own_sock: socket.socket | None = None  # see own_socket()

    # -- reading --------------------------------------------------------------------------------

    def pause_reading(self) -> None:
        if not self.read_paused and not self.closed:
            self.read_paused = True
            self.transport.pause_reading()

    def resume_reading(self) -> None:
        if self.read_paused:
            self.read_paused = False
            self.transport.resume_reading()

    # -- writing, told by the transport (through the connection) --------------------------------

    def pause_writing(self) -> None:
        self.paused = True

    def resume_writing(self) -> None:
        self.paused = False
        waiter, self._waiter = self._waiter, None
        if waiter is not None and not waiter.done():
            waiter.set_result(None)

    def connection_lost(self) -> None:
        self.closed = True
        waiter, self._waiter = self._waiter, None
        if waiter is not None and not waiter.done():
            waiter.set_exception(ClientGone())
        own, self._own_sock = self._own_sock, None
        if own is not None:
            self._loop.remove_writer(own.fileno())
            own.close()

    def gone(self) -> bool:
        """Whether nothing more can be written: the connection is closing or closed."""
        return self.closed or self.transport.is_closing()

    # -- waiting for the client -----------------------------------------------------------------

    async def drain(self) -> None:
        """Wait until the transport took everything written so far."""
        if self.gone():
            raise ClientGone()
        waiter = self._waiter = self._loop.create_future()
        self._conn.stalled()
        try:
            await waiter
        finally:
            self._conn.unstalled()

    async def writable(self) -> bool:
        """Wait until the socket takes more (``sendfile`` met a full socket). False if no
        descriptor is left to watch it with."""
        if self.gone():
            raise ClientGone()
        own = self.own_socket()
        if own is None:
            return False
        fd = own.fileno()
        waiter = self._waiter = self._loop.create_future()
        self._loop.add_writer(fd, _wake, waiter)
        self._conn.stalled()
        try:
            await waiter
        finally:
            if self._own_sock is not None:
                self._loop.remove_writer(fd)
            self._conn.unstalled()
        return True

    # -- the socket of our own ------------------------------------------------------------------

    def own_socket(self) -> socket.socket | None:
        """A socket object of our own on a duplicate of the connection's descriptor, made once
        per connection and closed with it: to send with ``MSG_MORE`` (the transport's
        pseudo-socket builds a socket object, and calls ``getsockname``, on every call) and to
        watch writability. None if no descriptor is left to duplicate."""
        if self._own_sock is None and not self.closed:
            try:
                self._own_sock = socket.socket(fileno=os.dup(self._sock_fd))
            except OSError:
                return None
        return self._own_sock

    def send_more(self, buffers: list[bytes]) -> None:
        """Send ``buffers`` on the socket with ``MSG_MORE``: the kernel holds a partial segment
        for the data that follows at once (a ``sendfile``), as a cork would, for this one call.
        What the socket does not take, or everything while the transport still holds bytes, is
        handed to the transport, which sends it in order and pauses writing meanwhile."""
        sent = 0
        # Bytes still queued in the transport go first: then it must send these too, after them.
        queued = self.paused or self.transport.get_write_buffer_size()
        own = None if queued or self.gone() else self.own_socket()
        if own is not None:
            try:
                sent = own.sendmsg(buffers, (), _MSG_MORE)
            except BlockingIOError:
                pass
            except OSError:
                raise ClientGone() from None
        data = buffers[0] if len(buffers) == 1 else b"".join(buffers)
        if sent < len(data):
            self.transport.write(data[sent:] if sent else data)


def _wake(waiter: asyncio.Future) -> None:
    if not waiter.done():
        waiter.set_result(None)
