"""One connection of Axon's server over a real TCP socket on loopback, on a real event loop driven
by the test: the test holds the client's socket and runs the loop between its steps, so that it
can look at the connection's parts (writer, cycle, flow, state) at any moment."""

from __future__ import annotations

import asyncio
import socket

from conftest import Closed, Reader

from axon.app import App
from axon.server.config import ServerConfig
from axon.server.loops import new_event_loop
from axon.server.outbox import Outbox
from axon.pace import pace_of
from axon.server.protocol import HTTPProtocol
from axon.server.worker import Worker


class Live(Reader):
    """``HTTPProtocol`` on the server end of a loopback TCP connection; ``client`` is the other end."""

    def __init__(self, app: App, *, rcvbuf: int | None = None, **config) -> None:
        self.loop = new_event_loop()
        self.worker = Worker(app, ServerConfig(**config))
        self.worker.loop = self.loop
        self.worker.outbox = Outbox(self.loop)
        self.worker.pace = pace_of(self.loop)
        self.worker._set_deadlines(self.loop.time())
        listener = socket.create_server(("127.0.0.1", 0))
        self.client = socket.socket()
        if rcvbuf is not None:  # a small window: the server's socket fills up soon
            self.client.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, rcvbuf)
        self.client.connect(listener.getsockname())
        server_side, _ = listener.accept()
        listener.close()
        server_side.setblocking(False)
        if rcvbuf is not None:
            server_side.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, rcvbuf)
        self.client.setblocking(False)
        self.transport, self.proto = self.loop.run_until_complete(
            self.loop.connect_accepted_socket(lambda: HTTPProtocol(self.worker), server_side)
        )
        self.buf = b""
        self.received = 0

    @property
    def writer(self):
        return self.proto.writer

    def run(self, seconds: float = 0.0) -> None:
        """Let the loop run for ``seconds`` (0: one turn and the outbox's)."""
        self.loop.run_until_complete(asyncio.sleep(seconds))
        self.loop.run_until_complete(asyncio.sleep(0))

    def send(self, data: bytes) -> None:
        self.client.sendall(data)
        self.run(0.005)

    def _recv(self) -> bytes:
        """The next bytes the client's socket has, running the loop until some come; b"" at EOF."""
        for _ in range(2000):
            try:
                return self.client.recv(1 << 20)
            except BlockingIOError:
                self.run(0.002)
            except ConnectionResetError:
                return b""
        raise TimeoutError("no bytes from the server")

    def _more(self) -> bytes:
        data = self._recv()
        if not data:
            raise Closed(f"EOF; {len(self.buf)} bytes unread")
        self.received += len(data)
        self.buf += data
        return data

    def eof(self) -> bool:
        """Whether the server closed (or cut) the connection once what it sent is read."""
        try:
            while self._recv():
                pass
        except TimeoutError:
            return False
        return True

    def __enter__(self) -> Live:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def close(self) -> None:
        self.client.close()
        self.run(0.01)
        self.transport.abort()
        self.run(0.01)
        self.loop.close()
