"""axon.metrics: counts that match the requests made, exactly, in the Prometheus text format.

Requests go through the WSGI adapter in-process (the same path a server takes), then through
gunicorn with two workers over real sockets, where each worker counts its own and a scrape of
either must show the sum. The scrape is parsed by a strict reader of the 0.0.4 text format.
"""

from __future__ import annotations

import asyncio
import io
import json
import multiprocessing
import os
import re
import signal
import socket
import subprocess
import sys
import textwrap
import threading
import time
import urllib.error
import urllib.request
from collections import Counter
from pathlib import Path
from wsgiref.util import setup_testing_defaults

import pytest

from axon import App
from axon.app import Request
from axon.metrics import (
    CONTENT_TYPE,
    DEFAULT_BUCKETS,
    PUBLISH_INTERVAL,
    Metrics,
    instrument,
)
from axon.records import BATCH, Records
from axon.response import Response
from axon.wsgi import create_app

# -- a strict reader of the text format ---------------------------------------------------------

_NAME = r"[a-zA-Z_:][a-zA-Z0-9_:]*"
_SAMPLE = re.compile(rf"^({_NAME})(?:\{{((?:[a-zA-Z_][a-zA-Z0-9_]*=\"(?:[^\"\\\n]|\\[\\\"n])*\",?)*)\}})? (\S+)$")
_LABEL = re.compile(r'([a-zA-Z_][a-zA-Z0-9_]*)="((?:[^"\\\n]|\\[\\"n])*)"')


def parse(text: str) -> dict[tuple, float]:
    """{(name, ((label, value), ...)): value}; fails on anything the 0.0.4 format does not allow."""
    assert text.endswith("\n")
    samples: dict[tuple, float] = {}
    types: dict[str, str] = {}
    current = None
    for line in text.splitlines():
        if line.startswith("# HELP "):
            current = line.split(" ")[2]
            continue
        if line.startswith("# TYPE "):
            _, _, name, kind = line.split(" ")
            assert name == current and name not in types, line
            assert kind in ("counter", "gauge", "histogram", "summary", "untyped")
            types[name] = kind
            continue
        found = _SAMPLE.match(line)
        assert found, f"not a sample line: {line!r}"
        name, labels, value = found.groups()
        family = re.sub(r"_(bucket|sum|count)$", "", name) if types.get(current) == "histogram" else name
        assert family == current, f"{name} outside its family {current}"
        key = (name, tuple(sorted(_LABEL.findall(labels or ""))))
        assert key not in samples, f"duplicate sample {line}"
        samples[key] = float(value.replace("+Inf", "inf"))
    return samples


def value(samples: dict, name: str, **labels: str) -> float:
    return samples.get((name, tuple(sorted(labels.items()))), 0.0)


def family(samples: dict, name: str) -> dict[tuple, float]:
    return {labels: v for (n, labels), v in samples.items() if n == name}


# -- calling the app in-process ------------------------------------------------------------------


def call(wsgi, path: str, query: str = "", method: str = "GET", body: bytes = b"", **headers: str):
    env = {"REQUEST_METHOD": method, "PATH_INFO": path, "QUERY_STRING": query, "wsgi.input": io.BytesIO(body)}
    if body:
        env["CONTENT_LENGTH"] = str(len(body))
    env.update({"HTTP_" + k.upper(): v for k, v in headers.items()})
    setup_testing_defaults(env)
    seen = {}

    def start_response(status, response_headers, exc_info=None):
        seen["status"] = int(status.split()[0])
        seen["headers"] = dict(response_headers)

    chunks = wsgi(env, start_response)
    try:
        data = b"".join(chunks)
    finally:
        getattr(chunks, "close", lambda: None)()
    return seen["status"], seen["headers"], data


def standalone(**kwargs) -> Metrics:
    """A Metrics reading records of its own, fed by :func:`started` and :func:`finished` as an App
    feeds its records."""
    records = Records()
    metrics = Metrics(records, **kwargs)
    records.attach(metrics)
    return metrics


def started(metrics: Metrics) -> None:
    next(metrics.records.begun)


def finished(metrics: Metrics, request: Request, response: Response, seconds: float) -> None:
    metrics.records.add(request, response, seconds, time.perf_counter())


@pytest.fixture
def app(root: Path) -> App:
    return App(root)


def test_counts_match_the_requests_made(app: App, root: Path):
    instrument(app)
    wsgi = create_app(app=app)
    made = []  # (method, status, bytes on the wire, files)

    def request(path, query="", method="GET", body=b"", files=0, **headers):
        status, response_headers, data = call(wsgi, path, query, method, body, **headers)
        made.append((method, status, len(data), files))
        return status, response_headers, data

    for _ in range(3):
        request("/api/health")
    request("/api/stream-files", "f1=a.txt&f2=b.bin", files=2)
    request("/api/stream-files", "f1=a.txt&f2=a.txt&f3=sub/c.json", files=2)  # a.txt once
    request("/api/stream-files", method="POST", body=json.dumps({"files": ["b.bin"]}).encode(), files=1)
    status, headers, _ = request("/files/b.bin", files=1)
    request("/files/b.bin", files=1, range="bytes=0-99")
    request("/files/b.bin", files=1, range="bytes=0-9,20-29")
    assert request("/files/b.bin", if_none_match=headers["ETag"])[0] == 304
    assert request("/files/b.bin", method="HEAD")[0] == 200
    assert request("/files/missing.bin")[0] == 404
    assert request("/files/../outside.txt")[0] == 403
    assert request("/api/stream-files", "f1=a.txt&f2=nope")[0] == 404
    assert request("/api/health", method="DELETE")[0] == 405
    assert request("/files/b.bin", range="bytes=99999-")[0] == 416
    assert request("/api/health", method="BREW")[0] == 405

    status, headers, text = call(wsgi, "/metrics")
    assert status == 200 and headers["Content-Type"] == CONTENT_TYPE == "text/plain; version=0.0.4; charset=utf-8"
    samples = parse(text.decode())

    expected = Counter((m if m in ("GET", "HEAD", "POST", "DELETE") else "other", str(s)) for m, s, _, _ in made)
    got = Counter({(dict(labels)["method"], dict(labels)["status"]): v for labels, v in family(samples, "axon_requests_total").items()})
    assert got == expected  # and the scrape itself is not among them
    assert value(samples, "axon_response_bytes_total") == sum(n for _, _, n, _ in made)
    assert value(samples, "axon_files_total") == sum(f for m, s, _, f in made if s < 300 and m != "HEAD")
    assert value(samples, "axon_requests_in_flight") == 0
    errors = {(dict(k)["status"], dict(k)["code"]): v for k, v in family(samples, "axon_errors_total").items()}
    assert errors == {
        ("404", "not_found"): 2, ("403", "outside_root"): 1, ("405", "method_not_allowed"): 2,
        ("416", "range_not_satisfiable"): 1,
    }

    # The histogram: cumulative, one bucket per bound and +Inf, count = requests.
    buckets = family(samples, "axon_request_duration_seconds_bucket")
    bounds = sorted((float(dict(k)["le"].replace("+Inf", "inf")), v) for k, v in buckets.items())
    assert [b for b, _ in bounds] == [*DEFAULT_BUCKETS, float("inf")]
    assert all(a[1] <= b[1] for a, b in zip(bounds, bounds[1:]))
    assert bounds[-1][1] == value(samples, "axon_request_duration_seconds_count") == len(made)
    assert 0 < value(samples, "axon_request_duration_seconds_sum") < 5


def test_async_runtimes_are_counted_and_timed(app: App):
    metrics = instrument(app, buckets=(0.01, 0.05))

    @app.route("/slow")
    def slow(request):  # a blocking handler: run in the thread pool by async runtimes
        time.sleep(0.03)
        return {"ok": True}

    async def main():
        for path in ("/slow", "/api/health", "/nowhere"):
            await app.handle_async(Request("GET", path))

    asyncio.run(main())
    samples = parse(metrics.render().decode())
    assert value(samples, "axon_requests_total", method="GET", status="200") == 2
    assert value(samples, "axon_requests_total", method="GET", status="404") == 1
    assert value(samples, "axon_errors_total", status="404", code="no_route") == 1
    assert value(samples, "axon_request_duration_seconds_bucket", le="0.01") == 2  # health, 404
    assert value(samples, "axon_request_duration_seconds_bucket", le="0.05") == 3  # and /slow
    assert value(samples, "axon_request_duration_seconds_count") == 3


def test_in_flight_counts_requests_being_handled(app: App):
    instrument(app)
    entered, release = threading.Event(), threading.Event()

    @app.route("/wait")
    def wait(request):
        entered.set()
        release.wait(5)
        return "done"

    wsgi = create_app(app=app)
    worker = threading.Thread(target=call, args=(wsgi, "/wait"))
    worker.start()
    assert entered.wait(5)
    assert value(parse(call(wsgi, "/metrics")[2].decode()), "axon_requests_in_flight") == 1
    release.set()
    worker.join()
    assert value(parse(call(wsgi, "/metrics")[2].decode()), "axon_requests_in_flight") == 0


def test_threads_lose_no_count():
    metrics = standalone()
    response = Response(200, [], [b"x" * 10])
    request = Request("GET", "/files/x")
    threads, rounds = 8, 5000

    def work():
        for _ in range(rounds):
            started(metrics)
            finished(metrics, request, response, 0.0002)

    pool = [threading.Thread(target=work) for _ in range(threads)]
    previous = sys.getswitchinterval()
    sys.setswitchinterval(1e-6)  # switch threads as often as possible
    try:
        for t in pool:
            t.start()
        for t in pool:
            t.join()
    finally:
        sys.setswitchinterval(previous)
    samples = parse(metrics.render().decode())
    total = threads * rounds
    assert value(samples, "axon_requests_total", method="GET", status="200") == total
    assert value(samples, "axon_response_bytes_total") == 10 * total
    assert value(samples, "axon_request_duration_seconds_count") == total
    assert value(samples, "axon_requests_in_flight") == 0


def test_random_methods_do_not_grow_memory():
    metrics = standalone()
    response = Response(405, [], [b'{"error": {"status": 405, "code": "method_not_allowed"}}'])
    for i in range(5000):
        request = Request(f"M{i}", "/api/health")
        started(metrics)
        finished(metrics, request, response, 0.0)
    samples = parse(metrics.render().decode())
    assert len(samples) < 100  # one block for "other", one error count: not a series per method
    assert value(samples, "axon_requests_total", method="other", status="405") == 5000
    assert value(samples, "axon_requests_in_flight") == 0


def test_labels_stay_bounded_and_escaped():
    metrics = standalone()
    for method in ("GET", "FROB", "X" * 100):
        request = Request(method, "/teapot")
        started(metrics)
        finished(metrics, request, Response(418, [], [b'{"error": {"status": 418, "code": "te\\"a"}}']), 0.0)
    text = metrics.render().decode()
    samples = parse(text)
    assert value(samples, "axon_requests_total", method="other", status="418") == 2
    assert value(samples, "axon_errors_total", status="418", code="other") == 3  # not a clean code


def test_head_and_304_send_no_bytes_and_no_files(app: App):
    metrics = instrument(app)
    wsgi = create_app(app=app)
    _, headers, _ = call(wsgi, "/files/b.bin", method="HEAD")
    call(wsgi, "/files/b.bin", if_modified_since=headers["Last-Modified"])
    samples = parse(metrics.render().decode())
    assert value(samples, "axon_requests_total", method="HEAD", status="200") == 1
    assert value(samples, "axon_requests_total", method="GET", status="304") == 1
    assert value(samples, "axon_response_bytes_total") == 0
    assert value(samples, "axon_files_total") == 0


# -- many processes ------------------------------------------------------------------------------


def _child(metrics: Metrics, n: int, leave_in_flight: bool) -> None:
    response, request = Response(200, [], [b"abc"]), Request("GET", "/files/abc")
    for _ in range(n):
        started(metrics)
        finished(metrics, request, response, 0.001)
    if leave_in_flight:
        started(metrics)  # then die without finishing: a crashed worker
    time.sleep(3 * PUBLISH_INTERVAL)  # a while, as workers live: its counts get published
    os._exit(0)


def test_workers_are_summed_and_dead_ones_stop_being_in_flight(tmp_path: Path):
    metrics = standalone(directory=tmp_path)  # made before the fork, as a server's master does
    started(metrics)  # the parent's own request, still in flight
    fork = multiprocessing.get_context("fork")
    children = [fork.Process(target=_child, args=(metrics, n, n == 7)) for n in (5, 7)]
    for c in children:
        c.start()
    for c in children:
        c.join()
        assert c.exitcode == 0
    samples = parse(metrics.render().decode())
    files = sorted(p.name for p in tmp_path.iterdir())
    assert files == sorted(f"{pid}.metrics" for pid in (os.getpid(), *(c.pid for c in children)))
    assert value(samples, "axon_requests_total", method="GET", status="200") == 12
    assert value(samples, "axon_response_bytes_total") == 36
    assert value(samples, "axon_request_duration_seconds_count") == 12
    assert value(samples, "axon_requests_in_flight") == 1  # the parent's; the dead child's is gone


def test_a_reused_pid_carries_on_from_its_file(tmp_path: Path):
    from axon.metrics.files import Slots, read_file

    path = tmp_path / "123.metrics"
    first = Slots(path)
    old = {f"r GET 200 {i}": float(i) for i in range(2000)}  # enough keys to grow the file
    first.write({**old, "started": sum(old.values()) + 3})  # and 3 requests in flight at death
    second = Slots(path)  # a new process that got the same pid
    second.write({"r GET 200 7": 1, "started": 2})  # 1 finished, 1 in flight
    values = read_file(path)
    assert values["r GET 200 7"] == 8 and values["r GET 200 1999"] == 1999 and len(values) == 2001
    assert values["started"] - sum(v for k, v in values.items() if k.startswith("r ")) == 1


# -- over real sockets: gunicorn, two workers ----------------------------------------------------

_GUNICORN_APP = """
from axon import App
from axon.metrics import instrument
from axon.wsgi import create_app

app = App()
instrument(app)
application = create_app(app=app)
"""


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.mark.slow  # gunicorn's worker processes
def test_gunicorn_workers_scraped_through_any_of_them(tmp_path: Path, root: Path):
    pytest.importorskip("gunicorn")
    (tmp_path / "metrics_app.py").write_text(textwrap.dedent(_GUNICORN_APP))
    port = _free_port()
    env = dict(os.environ, AXON_ROOT=str(root), AXON_METRICS_DIR=str(tmp_path / "metrics"),
               PYTHONPATH=f"{tmp_path}{os.pathsep}{os.environ.get('PYTHONPATH', '')}")
    server = subprocess.Popen(
        [sys.executable, "-m", "gunicorn", "-w", "2", "--preload", "-b", f"127.0.0.1:{port}", "metrics_app:application"],
        env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, start_new_session=True,
    )
    base = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 20
        while True:
            try:
                urllib.request.urlopen(base + "/metrics", timeout=1).read()
                break
            except OSError:
                assert server.poll() is None and time.monotonic() < deadline, server.stderr.read().decode()
                time.sleep(0.1)
        sizes = 0
        for i in range(40):  # new connection each: the kernel spreads them over both workers
            with urllib.request.urlopen(f"{base}/api/stream-files?a=a.txt&b=b.bin") as r:
                sizes += len(r.read())
        for _ in range(10):
            with pytest.raises(urllib.error.HTTPError) as refused:
                urllib.request.urlopen(base + "/files/nope")
            assert refused.value.code == 404
            sizes += len(refused.value.read())
        time.sleep(2 * PUBLISH_INTERVAL)  # the other worker's counts are published that often
        for _ in range(6):  # whichever worker answers, the sums are the same
            with urllib.request.urlopen(base + "/metrics") as r:
                assert r.headers["Content-Type"] == CONTENT_TYPE
                samples = parse(r.read().decode())
            assert value(samples, "axon_requests_total", method="GET", status="200") == 40
            assert value(samples, "axon_requests_total", method="GET", status="404") == 10
            assert value(samples, "axon_errors_total", status="404", code="not_found") == 10
            assert value(samples, "axon_files_total") == 80
            assert value(samples, "axon_response_bytes_total") == sizes
            assert value(samples, "axon_requests_in_flight") == 0
        written = {p.name for p in (tmp_path / "metrics").iterdir()}
        assert len(written) >= 2, written  # each worker its own file (and the master's, unused)
    finally:
        os.killpg(server.pid, signal.SIGTERM)
        server.wait(10)


def test_open_when_requests_must_be_signed(root: Path):
    app = App(root, secret="s3cret")
    if not hasattr(app, "public_paths"):
        pytest.skip("this App has no request signing")
    instrument(app)
    wsgi = create_app(app=app)
    assert call(wsgi, "/files/a.txt")[0] in (401, 403)  # unsigned: refused
    status, _, text = call(wsgi, "/metrics")
    assert status == 200 and b"axon_requests_total" in text


def test_the_app_records_and_metrics_read(app: App):
    """No per-request call into the metrics: the App records each response and begun request
    (axon.records), the metrics read them in batches; nothing of the App is wrapped."""
    metrics = instrument(app)
    assert app.records.readers == (metrics,) and metrics.records is app.records
    assert "handle" not in vars(app) and "_finish" not in vars(app)
    for _ in range(BATCH - 1):
        app.handle(Request("GET", "/api/health")).close()
    assert len(app.records.queue) == BATCH - 1  # waiting: read in a batch
    app.handle(Request("GET", "/api/health")).close()
    assert len(app.records.queue) == 0
    assert value(parse(metrics.render().decode()), "axon_requests_total", method="GET", status="200") == BATCH


def test_scrapes_are_never_in_flight_nor_counted(app: App):
    """Requests for /metrics that fail (a POST: 405) are no traffic either, and leave nothing in
    flight; the scrape being answered is not in flight."""
    instrument(app)
    wsgi = create_app(app=app)
    assert call(wsgi, "/metrics", method="POST")[0] == 405
    call(wsgi, "/files/a.txt")
    samples = parse(call(wsgi, "/metrics")[2].decode())
    assert value(samples, "axon_requests_in_flight") == 0
    assert family(samples, "axon_requests_total") == {(("method", "GET"), ("status", "200")): 1}


def test_requests_before_instrument_are_not_in_flight(app: App):
    for _ in range(5):
        app.handle(Request("GET", "/api/health")).close()
    metrics = instrument(app)
    app.handle(Request("GET", "/api/health")).close()
    samples = parse(metrics.render().decode())
    assert value(samples, "axon_requests_in_flight") == 0
    assert value(samples, "axon_requests_total", method="GET", status="200") == 1


def _count_in_child(metrics: Metrics, conn) -> None:
    request = Request("GET", "/files/abc")
    for _ in range(3):
        started(metrics)  # begun, never finished
    conn.send(value(parse(metrics.render().decode()), "axon_requests_in_flight"))
    conn.close()
    os._exit(0)


def test_a_forked_child_counts_its_own_without_a_directory():
    metrics = standalone()
    response, request = Response(200, [], [b"abc"]), Request("GET", "/files/abc")
    for _ in range(10):
        started(metrics)
        finished(metrics, request, response, 0.001)
    parent, child = multiprocessing.Pipe()
    with parent, child:
        process = multiprocessing.get_context("fork").Process(target=_count_in_child, args=(metrics, child))
        process.start()
        assert parent.recv() == 3
        process.join()
        process.close()


def test_a_snapshot_and_a_drain_at_once_never_deadlock():
    """A drain holds the records' lock while it calls the metrics' read (which takes theirs); a
    snapshot (the publisher's, every second, or a scrape's) must not hold the metrics' lock while
    it asks the records for the requests begun. Switching threads as often as the interpreter
    can, a second of both at once hung for good when it did."""
    import sys
    import threading

    records = Records()
    metrics = Metrics(records, directory=None)
    records.attach(metrics)
    until = time.monotonic() + 1.5

    def snapshots() -> None:
        while time.monotonic() < until:
            metrics.snapshot()

    def drains() -> None:
        while time.monotonic() < until:
            records.add_sent("GET", "/p", "", 200, 1, 1, 0.001, time.perf_counter(), None)
            records.drain()

    interval = sys.getswitchinterval()
    sys.setswitchinterval(1e-6)
    try:
        threads = [threading.Thread(target=f, daemon=True) for f in (snapshots, drains)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(10)
    finally:
        sys.setswitchinterval(interval)
    assert not any(thread.is_alive() for thread in threads), "a snapshot and a drain deadlocked"
