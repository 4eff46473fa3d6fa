"""Flow control (axon/server/flow.py) on a real loopback socket: reading pauses while an answer
is pending, a client that does not read stalls the writer (and runs the write clock) until it
does, and a connection that is gone wakes whoever waits with ClientGone."""

from __future__ import annotations

import pytest
from conftest import FILES, big_content
from live import Live
from test_server_protocol import gated_app

from axon.app import App
from axon.errors import ClientGone
from axon.server.state import State


def test_a_client_that_does_not_read_stalls_the_writer_until_it_does(root) -> None:
    with Live(App(root), rcvbuf=64 * 1024, sendfile=True) as conn:
        conn.send(b"GET /files/big.bin HTTP/1.1\r\nHost: t\r\n\r\n")
        conn.run(0.1)
        flow = conn.proto.flow
        assert flow.paused or conn.proto.state is State.STALLED
        assert conn.proto.state is State.STALLED  # the write clock runs
        assert conn.proto.deadline == conn.worker.write_deadline
        assert conn.received < len(big_content(root))
        resp = conn.response()  # reading lets it go on
        assert resp.body == big_content(root)
        conn.run(0.01)
        assert conn.proto.state is State.IDLE and not flow.paused


def test_reading_pauses_while_an_answer_is_pending(root) -> None:
    app, gate = gated_app(root)
    with Live(app) as conn:
        conn.send(b"GET /slow HTTP/1.1\r\n\r\n")
        conn.send(b"GET /files/a.txt HTTP/1.1\r\n\r\n")  # kept, not parsed
        assert conn.proto.flow.read_paused
        gate.set()
        conn.run(0.01)
        assert [conn.response().body for _ in range(2)] == [b"slow", FILES["a.txt"]]
        assert not conn.proto.flow.read_paused


def test_send_more_puts_bytes_on_the_socket_in_order(root) -> None:
    with Live(App(root), sendfile=True) as conn:
        conn.proto.flow.send_more([b"HTTP/1.1 200 OK\r\n", b"Content-Length: 3\r\n\r\n"])
        conn.transport.write(b"abc")  # what follows goes by the transport, after them
        assert conn.response().body == b"abc"


def test_a_connection_gone_wakes_the_waiting_writer(root) -> None:
    with Live(App(root)) as conn:
        flow = conn.proto.flow
        flow.pause_writing()  # as the transport says when it holds unsent bytes
        waiting = conn.loop.create_task(flow.drain())
        conn.run(0.01)
        assert not waiting.done()
        conn.client.close()
        conn.run(0.05)  # the transport sees the end: connection_lost
        assert flow.closed
        with pytest.raises(ClientGone):
            conn.loop.run_until_complete(waiting)
        with pytest.raises(ClientGone):
            conn.loop.run_until_complete(flow.drain())
