"""The requests wrk's Lua builds: files drawn at random from the pool, a header that changes.

Each test runs the real wrk, for a second, against a small HTTP server started here that records
every request it is sent and answers 404 for any file not in the pool, so that a bad draw shows
as an error in wrk's counts as well as in the record.
"""

from __future__ import annotations

import shutil
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from urllib.parse import parse_qsl, unquote, urlsplit

import pytest

from axon.bench import lua, wrk
from axon.bench.results import Result, value
from axon.bench.scenarios import AXON, DISTINCT_HEADER, POOL_FILES, STATIC, find, pool_name, request_for

pytestmark = pytest.mark.slow  # the real wrk, a second a test

needs_wrk = pytest.mark.skipif(shutil.which("wrk") is None, reason="wrk is installed by scripts/setup.sh --all")
POOL = {pool_name(i) for i in range(POOL_FILES)}


class Recorder(ThreadingHTTPServer):
    daemon_threads = True

    def __init__(self) -> None:
        super().__init__(("127.0.0.1", 0), _Handler)
        self.lock = threading.Lock()
        self.seen: list[tuple[str, list[str], str | None]] = []  # (path, files named, distinct header)
        self.gate: _Gate | None = None  # holds answers back (a stall), when set

    def handle_error(self, request, client_address) -> None:
        pass  # wrk resets its connections when it stops: nothing to report

    @property
    def base(self) -> str:
        return f"http://127.0.0.1:{self.server_address[1]}"


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"  # keep-alive, as wrk expects
    disable_nagle_algorithm = True  # head and body are two writes: no 40 ms wait for the client's ACK

    def do_GET(self) -> None:  # noqa: N802 (http.server's name)
        parts = urlsplit(self.path)
        if parts.path == "/api/stream-files":
            files = [value for _, value in parse_qsl(parts.query)]
        elif parts.path.startswith("/files/"):
            files = [unquote(parts.path[len("/files/"):])]
        else:
            files = []
        server: Recorder = self.server  # type: ignore[assignment]
        if server.gate is not None:
            server.gate.wait()
        with server.lock:
            server.seen.append((parts.path, files, self.headers.get(DISTINCT_HEADER)))
        ok = parts.path == "/api/health" or (files and all(name in POOL or name.startswith("examples/") for name in files))
        body = b"ok" if ok else b"not in the pool"
        self.send_response(200 if ok else 404)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args: object) -> None:
        pass


@pytest.fixture
def server() -> Iterator[Recorder]:
    recorder = Recorder()
    thread = threading.Thread(target=recorder.serve_forever, daemon=True)
    thread.start()
    try:
        yield recorder
    finally:
        recorder.shutdown()
        recorder.server_close()


def _run(server: Recorder, request, rate: float | None = None) -> wrk.WrkResult:
    result = wrk.run(server.base, request, wrk.Load(1, 4, 2, timeout=2, rate=rate))
    assert result.requests > 20, result.raw
    assert result.errors == {"connect": 0, "read": 0, "write": 0, "status": 0, "timeout": 0}, result.raw
    return result


@needs_wrk
def test_random_batches_name_distinct_pool_files_drawn_anew_on_every_thread(server):
    result = _run(server, request_for(find("R32"), AXON))
    seen = list(server.seen)
    assert len(seen) >= result.requests
    batches = [tuple(files) for path, files, _ in seen if path == "/api/stream-files"]
    assert all(len(b) == 32 and len(set(b)) == 32 for b in batches)  # 32 files, none twice in a batch
    assert set().union(*batches) <= POOL
    # Every batch is new: two wrk threads seeded alike would send each batch twice.
    assert len(set(batches)) == len(batches)
    named = [name for b in batches for name in b]
    assert len(set(named)) > min(len(named), POOL_FILES) * 0.5  # spread over the pool, not a corner
    assert len({name.split("/")[1] for name in named}) == 10  # every directory of the pool


@needs_wrk
def test_a_static_server_gets_one_random_file_a_request(server):
    request = request_for(find("R32"), STATIC)
    assert request.per_batch == 32 and request.draw.count == 1
    result = _run(server, request)
    files = [files[0] for path, files, _ in server.seen if path.startswith("/files/")]
    assert len(files) >= result.requests and set(files) <= POOL
    assert len(set(files)) > len(files) * 0.5  # random, not one file over and over


@needs_wrk
@pytest.mark.parametrize("rate", [None, 200.0], ids=["peak", "paced"])
def test_distinct_sends_a_new_header_value_on_every_request(server, rate):
    result = _run(server, request_for(find("T1~"), AXON), rate)
    seen = [(path, files, header) for path, files, header in server.seen if path == "/api/stream-files"]
    assert len(seen) >= result.requests
    assert {tuple(files) for _, files, _ in seen} == {("examples/8kb.bin",)}  # the same work every time
    values = [header for _, _, header in seen]
    assert None not in values and len(set(values)) == len(values)


@needs_wrk
def test_random_files_under_the_constant_rate_too(server):
    _run(server, request_for(find("F1"), AXON), rate=200.0)
    files = [files[0] for path, files, _ in server.seen if path.startswith("/files/")]
    assert set(files) <= POOL and len(set(files)) > len(files) * 0.5


def test_a_request_that_never_changes_leaves_wrk_its_prepared_bytes():
    """No request() hook for a fixed request: wrk then sends the same buffer, at its full speed."""
    fixed = lua.peak_script(request_for(find("T1"), AXON))
    assert "function request(" not in fixed and "math.random" not in fixed
    for name in ("R1", "F1", "health~"):
        assert "function request(" in lua.peak_script(request_for(find(name), AXON)), name
    batch = lua.peak_script(request_for(find("R256"), AXON), seed=7)
    assert "AXON_DRAW = 256" in batch and "AXON_DRAW_BATCH = true" in batch and "AXON_SEED = 7" in batch
    assert f'AXON_DISTINCT_HEADER = "{DISTINCT_HEADER}"' in lua.paced_script(request_for(find("B32~"), AXON), 10, 2)


def test_python_and_lua_name_pool_files_alike():
    assert pool_name(0) == "pool/00/00000.bin" and pool_name(9999) == "pool/09/09999.bin"
    assert pool_name(1000) == "pool/01/01000.bin"
    assert Path(pool_name(123)).parent.name == "00"


class _Gate:
    """Holds every answer of a :class:`Recorder` back for a while, once, as a stalled server does."""

    def __init__(self, after: float, seconds: float) -> None:
        self.lock = threading.Lock()
        self.after, self.seconds = after, seconds
        self.start: float | None = None

    def wait(self) -> None:
        import time

        with self.lock:  # one answer at a time while the stall lasts: every connection waits
            now = time.monotonic()
            if self.start is None:
                self.start = now
            if self.seconds and now - self.start >= self.after:
                seconds, self.seconds = self.seconds, 0.0
                time.sleep(seconds)


@needs_wrk
def test_several_connections_a_thread_send_the_rate_asked(server):
    """Each thread paces its own share of the connections: the rate asked is the rate sent."""
    result = wrk.run(server.base, request_for(find("F1"), AXON), wrk.Load(2, 8, 2, timeout=2, rate=300.0))
    assert result.paced_rate == 300.0 and result.held, result.raw
    assert result.sent_rate == pytest.approx(300, rel=0.05)
    assert result.requests == pytest.approx(result.sent, abs=8)  # each sent request was answered, but the last few


@needs_wrk
def test_a_stall_is_charged_to_every_request_due_during_it(server):
    """A server that holds every answer for 0.6 s: the requests due meanwhile are measured from
    when they were due, so a tenth of all requests and more show most of the stall (measured from
    when they went out, only one a connection would)."""
    server.gate = _Gate(after=0.5, seconds=0.6)
    result = wrk.run(server.base, request_for(find("F1"), AXON), wrk.Load(2, 8, 2, timeout=2, rate=200.0))
    assert result.latency.percentiles["90"] > 250, result.latency
    assert result.latency.max >= 550, result.latency
    # Every connection was busy: the sends waited for the server, not for wrk's own wake-ups.
    assert result.send_lag is not None and result.send_lag["99"] < 250, result.send_lag


@needs_wrk
def test_a_rate_the_generator_cannot_send_is_not_valid(server):
    """One connection cannot carry thousands of requests a second to this server: the phase says
    how much was sent, and it has no latency to report."""
    result = wrk.run(server.base, request_for(find("F1"), AXON), wrk.Load(1, 1, 1, timeout=2, rate=100_000.0))
    assert result.sent_rate < 0.5 * 100_000 and not result.held
    row = Result("axon", "F1", "rate", wrk=result)
    assert value(row, "p99") is None and value(row, "sent") == pytest.approx(result.sent_rate)
