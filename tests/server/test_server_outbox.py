"""Answers held to the end of the loop's turn (server/outbox.py): they leave when the turn ends,
in their place among whatever else a connection writes (sendfile, streams, 100 Continue, its
end), and a client that pipelines without reading holds no more than one write's worth."""

from __future__ import annotations

import asyncio
import socket
import time

import pytest
from conftest import FILES, Client, batch_target, big_content, parse_multipart

from axon.app import App, Request
from axon.response import stream_response
from axon.server.writer import MEMORY_BODY_MAX

HEALTH = b'{"status":"available"}'


def test_an_answer_leaves_when_the_turn_ends_not_before(harness) -> None:
    h = harness()
    h.proto.data_received(b"GET /api/health HTTP/1.1\r\n\r\nGET /api/health HTTP/1.1\r\n\r\n")
    assert h.transport.out == b""  # held: the loop has not finished its turn
    h.loop.run_until_complete(asyncio.sleep(0))
    assert [r.body for r in h.responses()] == [HEALTH, HEALTH]
    assert h.transport.writes == 1  # both answers of the read in one write


@pytest.mark.parametrize("mode", ["sendfile", "copy"])
def test_held_answers_keep_their_place_among_sendfile_and_streams(serve, root, mode) -> None:
    app = App(root)

    @app.route("/stream")
    def stream(request: Request):
        return stream_response(iter([b"st", b"ream"]), content_type="text/plain")

    server = serve(app, sendfile=mode == "sendfile")
    with Client(server.port) as c:
        c.get("/files/a.txt"), c.get("/files/a.txt")  # remembered: answered past the App, held
        batch = batch_target(["a.txt", "mid.bin"])
        c.send(
            b"GET /api/health HTTP/1.1\r\n\r\n"
            b"GET /files/a.txt HTTP/1.1\r\n\r\n"
            b"GET /files/big.bin HTTP/1.1\r\n\r\n"  # sendfile on the socket itself, from a task
            b"GET /api/health HTTP/1.1\r\n\r\n"
            b"GET /files/k64.bin HTTP/1.1\r\n\r\n"  # sendfile in the one-write path
            b"GET /api/health HTTP/1.1\r\n\r\n"
            b"GET /stream HTTP/1.1\r\n\r\n"  # chunked, from a task
            + f"GET {batch} HTTP/1.1\r\n\r\n".encode()
            + b"HEAD /api/health HTTP/1.1\r\n\r\n"
        )
        got = [c.response() for _ in range(8)]
        head = c.response(method="HEAD")
    assert [r.status for r in got] == [200] * 8
    assert got[0].body == HEALTH and got[1].body == FILES["a.txt"]
    assert got[2].body == big_content(root)
    assert got[3].body == HEALTH and got[4].body == FILES["k64.bin"]
    assert got[5].body == HEALTH and got[6].body == b"stream"
    assert [p[1] for p in parse_multipart(got[7])] == [FILES["a.txt"], FILES["mid.bin"]]
    assert head.status == 200 and head.body == b""


def test_a_held_answer_goes_before_100_continue(serve) -> None:
    server = serve()
    with Client(server.port) as c:
        c.send(b"GET /api/health HTTP/1.1\r\n\r\n"
               b"POST /api/stream-files HTTP/1.1\r\nExpect: 100-continue\r\nContent-Type: application/json\r\n"
               b"Content-Length: 19\r\n\r\n")
        assert c.response().body == HEALTH  # (a response skips a 100 before it: the lines below must be it)
        assert c._line() == b"HTTP/1.1 100 Continue"
        assert c._line() == b""
        c.send(b'{"files":["a.txt"]}')
        batch = c.response()
    assert batch.status == 200 and [p[1] for p in parse_multipart(batch)] == [FILES["a.txt"]]


def test_held_answers_are_written_before_the_transport_may_close_at_eof(harness) -> None:
    # The FIN read in the same turn as the requests: eof_received returning a false value lets
    # the transport close, so what is held must be in it by then.
    h = harness()
    h.proto.data_received(b"GET /api/health HTTP/1.1\r\n\r\nGET /api/health HTTP/1.1\r\n\r\n")
    keep_open = h.proto.eof_received()
    if not keep_open:
        assert [r.body for r in h.responses()] == [HEALTH, HEALTH]


def test_held_answers_leave_before_a_half_closed_connection_ends(serve) -> None:
    server = serve()
    with Client(server.port) as c:
        c.get("/files/b.bin"), c.get("/files/b.bin")  # remembered: held like the health probe
        c.send(b"GET /api/health HTTP/1.1\r\n\r\nGET /files/b.bin HTTP/1.1\r\n\r\n")
        c.sock.shutdown(socket.SHUT_WR)  # the FIN may come in the same turn as the requests
        assert c.response().body == HEALTH
        assert c.response().body == FILES["b.bin"]
        assert c.is_closed()


def test_a_client_pipelining_without_reading_holds_one_write_at_most(serve) -> None:
    # Thousands of requests for a 4 KiB file in one go, and the client reads nothing for a while:
    # what the server keeps for it (held, and in the transport) stays about one write's worth
    # plus what the socket buffers, not the 40 MB that answering them all would be.
    server = serve()
    target = b"/files/small/f01.bin"
    count = 10_000
    with Client(server.port) as c:
        c.sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 64 * 1024)
        c.get(target.decode()), c.get(target.decode())
        request = b"GET " + target + b" HTTP/1.1\r\n\r\n"
        c.sock.sendall(request * count)
        time.sleep(0.5)

        def kept() -> int:
            return sum(conn.writer._held_bytes * (conn.writer._held is not None) + conn.transport.get_write_buffer_size()
                       for conn in server.worker.connections)

        assert kept() <= 2 * MEMORY_BODY_MAX
        for _ in range(count):  # each checked as it comes: a refusal says so, not the end after it
            answer = c.response()
            assert (answer.status, answer.body) == (200, FILES["small/f01.bin"]), answer.body[:200]
