"""Timeouts (slow headers, idle keep-alive, stalled writes), the connection cap, body limits
and lingering close, over real sockets. The server keeps serving everyone else throughout."""

from __future__ import annotations

import socket
import threading
import time

import pytest
from conftest import Client, get, wait_for

from axon.app import App, Request
from axon.limits import Limits
from axon.response import Response
from axon.server import protocol

#: Short enough for the fast loop; the worker sweeps deadlines every quarter of it, so each fires
#: between ``TIMEOUT`` and ``1.5 * TIMEOUT`` after its phase began.
TIMEOUT = 0.3
FAST = Limits(header_timeout=TIMEOUT, keepalive_timeout=TIMEOUT, write_timeout=TIMEOUT)
#: Fired, not merely ended by something else much later (a loaded machine delays the sweep).
LATE = 3.0


def connections(server) -> int:
    return server.call(lambda: len(server.worker.connections))


def test_slow_headers_get_408_and_a_closed_connection(serve) -> None:
    server = serve(limits=FAST)
    with Client(server.port) as slow:
        slow.send(b"GET /api/health HTTP/1.1\r\nHost: t\r\n")  # never finished
        started = time.monotonic()
        assert get(server.port, "/api/health").status == 200  # everyone else is served
        resp = slow.response()
        waited = time.monotonic() - started
        assert resp.status == 408 and resp.json()["error"]["code"] == "request_timeout"
        assert 0.7 * TIMEOUT < waited < LATE
        assert slow.is_closed()


def test_a_slowloris_trickle_does_not_extend_the_header_deadline(serve) -> None:
    server = serve(limits=FAST)
    with Client(server.port) as slow:
        slow.send(b"GET /api/health HTTP/1.1\r\n")
        started = time.monotonic()
        stop = threading.Event()

        def trickle() -> None:  # one header byte every third of the timeout, forever
            while not stop.wait(TIMEOUT / 3):
                try:
                    slow.sock.send(b"X")
                except OSError:
                    return

        thread = threading.Thread(target=trickle)
        thread.start()
        try:
            assert slow.response().status == 408
            assert time.monotonic() - started < LATE
        finally:
            stop.set()
            thread.join()


def test_a_connection_that_sends_nothing_is_closed(serve) -> None:
    server = serve(limits=FAST)
    with Client(server.port) as idle:
        started = time.monotonic()
        assert idle.is_closed(timeout=5)
        assert time.monotonic() - started < LATE


def test_idle_keep_alive_is_closed(serve) -> None:
    server = serve(limits=FAST)
    with Client(server.port) as c:
        assert c.get("/api/health").status == 200
        started = time.monotonic()
        assert c.is_closed(timeout=5)
        assert 0.7 * TIMEOUT < time.monotonic() - started < LATE
    assert wait_for(lambda: connections(server) == 0)


def test_a_client_that_stops_reading_is_cut_after_the_write_timeout(serve) -> None:
    server = serve(limits=FAST)
    sock = socket.socket()
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    sock.connect(("127.0.0.1", server.port))
    try:
        sock.sendall(b"GET /files/big.bin HTTP/1.1\r\n\r\n")
        assert wait_for(lambda: connections(server) == 1)
        assert wait_for(lambda: connections(server) == 0, timeout=6)
        assert get(server.port, "/api/health").status == 200
    finally:
        sock.close()


def test_the_connection_cap_answers_503(serve) -> None:
    server = serve(max_connections=2)
    with Client(server.port) as a, Client(server.port) as b:
        assert a.get("/api/health").status == 200 and b.get("/api/health").status == 200
        with Client(server.port) as c:
            resp = c.response()
            assert resp.status == 503 and resp.header("connection") == "close"
            assert c.is_closed()
    assert wait_for(lambda: connections(server) == 0)
    assert get(server.port, "/api/health").status == 200


def test_a_refusal_is_read_by_a_client_still_sending_its_body(serve) -> None:
    # The 413 is decided from Content-Length; the client keeps sending 2 MiB. The server shuts
    # its side and drops what still comes, so the client reads a 413, not a reset.
    server = serve()
    with Client(server.port) as c:
        body = b"x" * (2 * 1024 * 1024)
        c.send(b"POST /api/stream-files HTTP/1.1\r\nContent-Length: %d\r\n\r\n" % len(body))
        sender = threading.Thread(target=lambda: _send_quietly(c.sock, body))
        sender.start()
        resp = c.response()
        sender.join()
    assert resp.status == 413 and resp.json()["error"]["code"] == "body_too_large"


def test_a_last_answer_read_late_arrives_whole(serve, root, monkeypatch) -> None:
    # An 8 MiB answer that closes the connection, to a client that reads nothing for longer than
    # the lingering close lasts: most of it is still in the server's transport (the kernel holds
    # a few MiB) when it is handed over. It leaves under the write clock, then the server lingers.
    monkeypatch.setattr(protocol, "LINGER_SECONDS", 0.1)
    data = bytes(range(256)) * (32 * 1024)
    app = App(root, limits=Limits(header_timeout=1.0, keepalive_timeout=1.0, write_timeout=30.0))

    @app.route("/big")
    def big(request: Request) -> Response:
        return Response(200, [("Content-Type", "application/octet-stream")], [data])

    server = serve(app)
    with Client(server.port) as c:
        c.sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 16 * 1024)
        c.send(b"GET /big HTTP/1.1\r\nConnection: close\r\n\r\n")
        time.sleep(1.0)  # past the lingering close: 0.1 s, found by a sweep of every 0.25 s
        resp = c.response()
        assert resp.status == 200 and resp.body == data
        assert c.is_closed()


def _send_quietly(sock: socket.socket, data: bytes) -> None:
    try:
        sock.sendall(data)
    except OSError:
        pass


@pytest.mark.parametrize("chunked", [False, True])
def test_the_body_limit_comes_from_limits(serve, chunked) -> None:
    server = serve(limits=Limits(max_body_bytes=64))
    body = b'{"files": ["a.txt", "' + b"x" * 100 + b'"]}'
    with Client(server.port) as c:
        if chunked:
            c.send(b"POST /api/stream-files HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n%x\r\n%s\r\n0\r\n\r\n" % (len(body), body))
        else:
            c.send(b"POST /api/stream-files HTTP/1.1\r\nContent-Length: %d\r\n\r\n%s" % (len(body), body))
        assert c.response().status == 413


def test_header_limits_come_from_limits(serve) -> None:
    server = serve(limits=Limits(max_headers=3, max_header_bytes=200, max_url_bytes=100))
    with Client(server.port) as c:
        c.send(b"GET /api/health HTTP/1.1\r\nA: 1\r\nB: 2\r\nC: 3\r\nD: 4\r\n\r\n")
        assert c.response().status == 431
    with Client(server.port) as c:
        c.send(b"GET /api/health HTTP/1.1\r\nA: " + b"1" * 300 + b"\r\n\r\n")
        assert c.response().status == 431
    with Client(server.port) as c:
        c.send(b"GET /api/health?" + b"q" * 120 + b" HTTP/1.1\r\n\r\n")
        assert c.response().status == 414
    with Client(server.port) as c:
        c.send(b"GET /api/health HTTP/1.1\r\nA: 1\r\nB: 2\r\n\r\n")
        assert c.response().status == 200


def test_abuse_does_not_stop_the_others(serve) -> None:
    server = serve(limits=FAST)
    abusers = []
    try:
        for i in range(30):
            s = socket.create_connection(("127.0.0.1", server.port))
            s.sendall([b"GET / HTTP/1.1\r\nX: ", b"\x00\x01garbage\r\n\r\n", b"POST / HTTP/1.1\r\nContent-Length: 100\r\n\r\nab"][i % 3])
            abusers.append(s)
        for _ in range(20):
            started = time.monotonic()
            assert get(server.port, "/files/a.txt").status == 200
            assert time.monotonic() - started < 0.5
    finally:
        for s in abusers:
            s.close()
    assert wait_for(lambda: connections(server) == 0)
