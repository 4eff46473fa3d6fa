"""Taking connections off the listening socket (server/accept.py): every waiting one at once, or
a few when the socket is shared; real sockets, on both loops."""

from __future__ import annotations

import asyncio
import socket

import pytest
from conftest import Client, batch_target

from axon.server.accept import Acceptor
from axon.server.loops import new_event_loop


class Counting(asyncio.Protocol):
    made: list[asyncio.Transport] = []

    def connection_made(self, transport) -> None:
        Counting.made.append(transport)


@pytest.mark.parametrize("burst, expected", [(2048, 20), (4, 4)])
def test_one_wake_takes_every_waiting_connection_or_a_few(burst, expected) -> None:
    listener = socket.create_server(("127.0.0.1", 0), backlog=64)
    port = listener.getsockname()[1]
    clients = [socket.create_connection(("127.0.0.1", port)) for _ in range(20)]  # all waiting now
    loop = new_event_loop()
    Counting.made = []
    try:
        acceptor = Acceptor(loop, listener, Counting, None, burst)
        acceptor.start()
        acceptor._ready()  # one wake of the socket, before the loop runs
        acceptor.close()
        assert listener.fileno() == -1  # closed, as Server.close closes its sockets
        loop.run_until_complete(asyncio.sleep(0.05))
        assert len(Counting.made) == expected
    finally:
        for transport in Counting.made:
            transport.close()
        loop.run_until_complete(asyncio.sleep(0))
        loop.close()
        for c in clients:
            c.close()


def test_a_burst_of_clients_is_served_by_a_busy_worker(serve, root) -> None:
    """Fifty clients connect at once and each asks for a batch: every one is answered."""
    server = serve()
    target = batch_target([f"small/f{i:02d}.bin" for i in range(1, 9)])
    clients = [Client(server.port) for _ in range(50)]
    try:
        for c in clients:
            c.send(f"GET {target} HTTP/1.1\r\nHost: t\r\n\r\n".encode())
        assert all(c.response().status == 200 for c in clients)
    finally:
        for c in clients:
            c.close()
