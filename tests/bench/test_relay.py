"""The delay relay, over real sockets: bytes unchanged, each direction delayed, closes passed on."""

from __future__ import annotations

import hashlib
import os
import socket
import socketserver
import threading
import time
from concurrent.futures import ThreadPoolExecutor

import pytest

from axon.bench import relay


class _Echo(socketserver.BaseRequestHandler):
    """Sends back what it reads; at the client's FIN, sends ``b"bye"`` and closes."""

    def handle(self):
        sock = self.request
        while data := sock.recv(1 << 16):
            sock.sendall(data)
        sock.sendall(b"bye")


class _Sink(socketserver.BaseRequestHandler):
    """Reads nothing, for as long as the test runs: what is sent to it piles up in between."""

    def handle(self):
        self.server.release.wait(30)


class _Server(socketserver.ThreadingTCPServer):
    daemon_threads = True
    allow_reuse_address = True
    request_queue_size = 128  # the default 5 drops connections the tests open at once


@pytest.fixture
def upstream():
    servers = []

    def serve(handler):
        server = _Server(("127.0.0.1", 0), handler)
        server.release = threading.Event()
        threading.Thread(target=server.serve_forever, daemon=True).start()
        servers.append(server)
        return server

    yield serve
    for server in servers:
        server.release.set()
        server.shutdown()
        server.server_close()


@pytest.fixture
def through(upstream):
    """``through(handler, delay_ms)`` -> a relay listening on a free port in front of ``handler``."""
    started = []

    def make(handler, delay_ms=10.0, connect_ms=0.0):
        server = upstream(handler)
        r = relay.start("127.0.0.1:0", f"127.0.0.1:{server.server_address[1]}", delay_ms, connect_ms=connect_ms)
        started.append(r)
        return r

    yield make
    for r in started:
        r.stop()


def _recv_all(sock: socket.socket) -> bytes:
    out = bytearray()
    while data := sock.recv(1 << 16):
        out += data
    return bytes(out)


def _echo_round(port: int, payload: bytes) -> bytes:
    """Send ``payload``, then FIN; return everything received until the relay's FIN."""
    with socket.create_connection(("127.0.0.1", port), timeout=30) as sock:
        def send():
            sock.sendall(payload)
            sock.shutdown(socket.SHUT_WR)

        sender = threading.Thread(target=send)
        sender.start()
        received = _recv_all(sock)
        sender.join()
    return received


@pytest.mark.slow  # megabytes through the delay
def test_large_random_payload_passes_unchanged_both_ways(through):
    r = through(_Echo, delay_ms=5)
    payload = os.urandom(24 * 1024 * 1024)  # several times the relay's high-water mark
    received = _echo_round(r.port, payload)
    assert len(received) == len(payload) + 3
    assert hashlib.sha256(received[:-3]).digest() == hashlib.sha256(payload).digest()
    assert received[-3:] == b"bye"


def _ping(sock: socket.socket) -> float:
    """Seconds a ``ping`` takes to come back from the echo server."""
    began = time.monotonic()
    sock.sendall(b"ping")
    got = b""
    while len(got) < 4:
        got += sock.recv(4 - len(got))
    assert got == b"ping"
    return time.monotonic() - began


def test_a_round_trip_takes_at_least_twice_the_delay(through):
    delay_ms = 60
    r = through(_Echo, delay_ms=delay_ms)
    with socket.create_connection(("127.0.0.1", r.port), timeout=10) as sock:
        for _ in range(3):
            assert _ping(sock) >= 2 * delay_ms / 1000


@pytest.mark.slow  # many connections through the relay
def test_many_concurrent_connections_keep_their_own_bytes(through):
    # Several rounds: a connection whose sockets both wait (one at EOF) is referenced by
    # nothing but the relay's own bookkeeping, and a relay without it lost some of them.
    r = through(_Echo, delay_ms=10)
    for _ in range(3):
        payloads = [os.urandom(64 * 1024) + i.to_bytes(4, "big") for i in range(64)]
        with ThreadPoolExecutor(max_workers=64) as pool:
            results = list(pool.map(lambda p: _echo_round(r.port, p), payloads))
        assert results == [p + b"bye" for p in payloads]


def test_a_new_connection_costs_the_connect_delay_once(through):
    delay_ms, connect_ms = 10, 300  # a connect delay well above what a loaded machine adds to a round trip
    r = through(_Echo, delay_ms=delay_ms, connect_ms=connect_ms)
    with socket.create_connection(("127.0.0.1", r.port), timeout=10) as sock:
        elapsed = [_ping(sock), _ping(sock)]
    assert elapsed[0] >= (2 * delay_ms + connect_ms) / 1000
    assert 2 * delay_ms / 1000 <= elapsed[1] < (2 * delay_ms + connect_ms) / 1000


def test_half_close_passes_on_and_the_other_direction_keeps_flowing(through):
    # The client's FIN reaches the echo server (which then answers "bye" and closes), and the
    # server's close reaches the client as an end of stream, after the data sent before it.
    r = through(_Echo, delay_ms=20)
    with socket.create_connection(("127.0.0.1", r.port), timeout=10) as sock:
        sock.sendall(b"last words")
        sock.shutdown(socket.SHUT_WR)
        assert _recv_all(sock) == b"last wordsbye"


def test_the_server_closing_first_closes_the_client(through):
    class Closer(socketserver.BaseRequestHandler):
        def handle(self):
            self.request.sendall(b"go away")
            self.request.close()

    r = through(Closer, delay_ms=10)
    with socket.create_connection(("127.0.0.1", r.port), timeout=10) as sock:
        assert _recv_all(sock) == b"go away"


def test_an_unreachable_upstream_closes_the_client(upstream):
    server = upstream(_Echo)
    port = server.server_address[1]
    server.shutdown()
    server.server_close()
    with relay.start(("127.0.0.1", 0), ("127.0.0.1", port), 10) as r:
        assert r.poll() is None
        with socket.create_connection(("127.0.0.1", r.port), timeout=10) as sock:
            assert _recv_all(sock) == b""
    assert r.poll() is not None  # stopped on leaving the block


@pytest.mark.slow  # fills TCP's buffers through the relay
def test_a_receiver_that_does_not_read_stops_the_sender(through):
    # Bounded memory: the relay holds a few MB per direction, then lets TCP push back.
    r = through(_Sink, delay_ms=1)
    limit = 256 * 1024 * 1024
    sent = 0
    chunk = bytes(1 << 20)
    with socket.create_connection(("127.0.0.1", r.port), timeout=3) as sock:
        try:
            while sent < limit:
                sent += sock.send(chunk)
        except (socket.timeout, TimeoutError):
            pass
    assert sent < 64 * 1024 * 1024


def test_address_parsing():
    assert relay.parse_address("127.0.0.1:8000") == ("127.0.0.1", 8000)
    assert relay.parse_address("[::1]:0") == ("::1", 0)
    with pytest.raises(ValueError):
        relay.parse_address("localhost")
