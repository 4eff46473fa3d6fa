"""Fuzzing with one invariant (as h11's ``fuzz/``): any bytes give a 4xx (or the answer a valid
request deserves) or a closed connection; never a 500, a crash or a hang. Afterwards the server
still answers ``/api/health`` and logged no error of its own.

Inputs are random bytes and mutations of the corpus (bytes flipped, inserted, deleted, cut,
requests glued together), cut into random reads. In-process on a fake transport (many
examples, fast) and over a real socket, where the client half-closes after sending: the server
must answer or close within two seconds.
"""

from __future__ import annotations

import logging
import re
import socket
import time

import pytest
from conftest import HEAD_READERS, Client, head_reader_set
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from test_server_corpus import CORPUS

# What a server may answer to bytes it was never meant to see: anything but a crash (500).
# 501 and 505 are the protocol's answers for a transfer coding or an HTTP version not spoken.
ALLOWED_5XX = {501, 505}

SEEDS = [c.raw for c in CORPUS if len(c.raw) < 4000]


@st.composite
def mutated(draw) -> bytes:
    data = bytearray(draw(st.sampled_from(SEEDS)))
    for _ in range(draw(st.integers(0, 4))):
        kind = draw(st.sampled_from(["flip", "insert", "delete", "cut", "glue", "dup"]))
        if not data:
            break
        at = draw(st.integers(0, len(data) - 1))
        if kind == "flip":
            data[at] = draw(st.integers(0, 255))
        elif kind == "insert":
            data[at:at] = draw(st.sampled_from([b"\r\n", b"\n", b"\r", b":", b" ", b"\x00", b"%", b"0\r\n\r\n",
                                                b"Transfer-Encoding: chunked\r\n", b"Content-Length: 5\r\n", b"\xff"]))
        elif kind == "delete":
            del data[at : at + draw(st.integers(1, 8))]
        elif kind == "cut":
            del data[at:]
        elif kind == "glue":
            data += draw(st.sampled_from(SEEDS))
        elif kind == "dup":
            data[at:at] = data[at : at + draw(st.integers(1, 30))]
    return bytes(data)


inputs = st.one_of(st.binary(max_size=600), mutated())


@st.composite
def cut(draw, data: bytes) -> list[bytes]:
    if len(data) < 2:
        return [data]
    points = sorted(set(draw(st.lists(st.integers(1, len(data) - 1), max_size=8))))
    return [data[a:b] for a, b in zip([0, *points], [*points, len(data)])]


def check_statuses(out: bytes) -> None:
    """Every status line in ``out`` (which methods were HEAD is unknown here, so scan for them:
    no file in the root contains one)."""
    assert not out or out.startswith(b"HTTP/1.1 "), out[:100]
    for status in re.findall(rb"HTTP/1\.1 (\d{3}) ", out):
        assert int(status) < 500 or int(status) in ALLOWED_5XX, out[:2000]


class _Errors(logging.Handler):
    def __init__(self) -> None:
        super().__init__(logging.ERROR)
        self.records: list[logging.LogRecord] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.records.append(record)


@pytest.fixture
def errors():
    handler = _Errors()
    logger = logging.getLogger("axon")
    logger.addHandler(handler)
    yield handler.records
    logger.removeHandler(handler)


@pytest.mark.slow  # fuzz
@settings(max_examples=400, deadline=None, database=None, suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
@given(data=st.data())
def test_fuzz_fake_transport(harness, errors, data) -> None:
    raw = data.draw(inputs)
    pieces = data.draw(cut(raw))
    h = harness()
    h.feed(*pieces)
    h.proto.eof_received()
    check_statuses(bytes(h.transport.out))
    assert not errors, [r.getMessage() for r in errors]
    h.finish()


@pytest.fixture(scope="module", params=HEAD_READERS)
def fuzz_server(root, request):
    from axon.app import App
    from axon.server.config import ServerConfig
    from axon.server.worker import ThreadServer

    with head_reader_set(request.param):
        server = ThreadServer(App(root), ServerConfig(port=0)).start()
    yield server
    server.stop()


@settings(max_examples=120, deadline=None, database=None, suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
@given(data=st.data())
def test_fuzz_socket(fuzz_server, errors, data) -> None:
    raw = data.draw(inputs)
    pieces = data.draw(cut(raw))
    with Client(fuzz_server.port, timeout=2.0) as c:
        try:
            for piece in pieces:
                c.send(piece)
            c.sock.shutdown(socket.SHUT_WR)
        except OSError:
            pass  # the server refused and closed already
        started = time.monotonic()
        received = b""
        while True:
            try:
                chunk = c.sock.recv(65536)
            except ConnectionResetError:
                break
            except TimeoutError:
                pytest.fail(f"no answer and no close within 2 s for {raw!r}")
            if not chunk:
                break
            received += chunk
        assert time.monotonic() - started < 2.5
    check_statuses(received)
    assert not errors, [r.getMessage() for r in errors]


def test_the_server_is_fine_after_fuzzing(fuzz_server) -> None:
    with Client(fuzz_server.port) as c:
        assert c.get("/api/health").status == 200
    assert fuzz_server.call(lambda: len(fuzz_server.worker.connections)) <= 1
