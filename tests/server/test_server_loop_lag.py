"""``axon serve`` times its own event loop: a real server whose loop a handler holds up shows the
stall in ``/metrics``, an idle one shows none; the bench's app shows the lag without --metrics.
And a batch of a thousand files does not hold the loop: it is planned and written in slices."""

from __future__ import annotations

import json
import select
import textwrap
import threading
import time
from pathlib import Path

import pytest
from conftest import Client, get, wait_for

from axon.pace import SHARE

pytestmark = pytest.mark.slow  # a server process each


def lag_buckets(port: int) -> dict[str, float]:
    """``le`` -> cumulative count of ``axon_event_loop_lag_seconds`` as a scrape shows it."""
    resp = get(port, "/metrics")
    assert resp.status == 200
    out = {}
    for line in resp.body.decode().splitlines():
        if line.startswith("axon_event_loop_lag_seconds_bucket{"):
            le = line.split('le="', 1)[1].split('"', 1)[0]
            out[le] = float(line.rsplit(" ", 1)[1])
    return out


def over(buckets: dict[str, float], bound: str) -> float:
    """Samples over the bucket bound ``bound`` (the text's cumulative counts)."""
    return buckets["+Inf"] - buckets[bound]


@pytest.fixture
def stalling_site(tmp_path: Path, root: Path, monkeypatch) -> str:
    # A handler declared not to block that blocks: what a user may write, and what the lag is for.
    (tmp_path / "stallsite.py").write_text(textwrap.dedent(f"""
        import time
        from axon import App

        app = App({str(root)!r})

        @app.route("/stall", blocking=False)
        def stall(request):
            time.sleep(0.4)
            return {{"slept": 0.4}}
    """))
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.chdir(tmp_path)
    return "stallsite"


def test_a_blocked_loop_shows_in_metrics_and_an_idle_one_does_not(spawn, stalling_site, monkeypatch) -> None:
    monkeypatch.delenv("AXON_METRICS_DIR", raising=False)
    server = spawn("--workers", "1", "--metrics", "--app", f"{stalling_site}:app")
    time.sleep(0.5)  # idle: the timer alone
    idle = lag_buckets(server.port)
    assert idle["+Inf"] >= 5, idle
    assert over(idle, "0.1") == 0, idle
    assert get(server.port, "/stall").status == 200
    stalled = lag_buckets(server.port)
    # The timer fell due during the 0.4 s the handler held the loop: at least 0.4 s less one
    # interval late, once.
    assert over(stalled, "0.25") - over(idle, "0.25") == 1, stalled


def test_the_bench_app_shows_the_lag_without_counting_requests(spawn) -> None:
    server = spawn("--workers", "1", "--app", "axon.bench.echo_app:app")
    time.sleep(0.2)
    text = get(server.port, "/metrics").body.decode()
    assert "# TYPE axon_event_loop_lag_seconds histogram" in text
    assert "axon_requests_total" not in text  # nothing counted per request: a server without --metrics
    assert lag_buckets(server.port)["+Inf"] > 0


def test_the_timer_can_be_turned_off(spawn) -> None:
    # What scripts/instructions.py does, so that its counts hold the requests' work alone.
    server = spawn("--workers", "1", "--metrics", env={"AXON_NO_LOOP_LAG": "1"})
    text = get(server.port, "/metrics").body.decode()
    assert "axon_requests_total" in text and "axon_event_loop_lag_seconds" not in text


@pytest.fixture
def thousand_files(tmp_path: Path) -> Path:
    root = tmp_path / "many"
    root.mkdir()
    for i in range(1000):
        (root / f"f{i:04d}.bin").write_bytes(i.to_bytes(2, "big") * 2048)
    return root


def test_a_batch_of_a_thousand_cold_files_lets_another_connection_be_answered_meanwhile(spawn, thousand_files) -> None:
    # No open-file cache: each of the thousand files is opened and fstat-ed for the request.
    server = spawn("--workers", "1", "--file-cache", "0", serve_root=thousand_files)
    body = json.dumps({"files": [f"f{i:04d}.bin" for i in range(1000)]}).encode()
    counts = []
    with Client(server.port, timeout=30) as batch, Client(server.port) as probe:
        for _ in range(6):
            batch.send(b"POST /api/stream-files HTTP/1.1\r\nHost: test\r\nContent-Type: application/json\r\n"
                       b"Content-Length: %d\r\n\r\n%s" % (len(body), body))
            # Health probes on the other connection, one after the other, until the batch's
            # answer begins: counted by order, not by time, so that a busy machine cannot make
            # it pass or fail. Planned in one go, the batch held the loop from its request to
            # its answer: no probe came between, but one the loop read before the batch's request.
            answered = 0
            while not select.select([batch.sock], [], [], 0)[0]:
                assert probe.get("/api/health").status == 200
                answered += 1
            counts.append(answered)
            resp = batch.response("POST")
            assert resp.status == 200 and resp.body.count(b"Content-Length: 4096\r\n") == 1000
    # In one go about one a batch, when the loop read it first; a few to a dozen each now.
    assert sum(counts) >= 16, counts


def test_a_worker_without_traffic_shows_its_lag(spawn, tmp_path) -> None:
    # Each worker publishes its counts to a file of the metrics directory, which /metrics sums:
    # a worker that has answered nothing publishes its loop's lag all the same.
    directory = tmp_path / "metrics"
    spawn("--workers", "2", "--metrics", env={"AXON_METRICS_DIR": str(directory)}, wait_health=False)
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline and len(list(directory.glob("*.metrics"))) < 2:
        time.sleep(0.05)
    assert len(list(directory.glob("*.metrics"))) == 2  # no request yet, both workers there


@pytest.fixture
def turn_site(tmp_path: Path, thousand_files: Path, monkeypatch) -> str:
    # The one-file batch of the bench's R1, at a route that also says in which turn of the loop
    # it was planned: a callback that queues itself again counts the turns.
    (tmp_path / "turnsite.py").write_text(textwrap.dedent(f"""
        import asyncio
        from axon import App

        app = App({str(thousand_files)!r})
        turns = []

        def tick():
            turns.append(None)
            asyncio.get_running_loop().call_soon(tick)

        @app.route("/one", blocking=False)
        def one(request):
            if not turns:
                tick()
            response = app.send_batch(request, [value for _, value in request.query])
            response.headers.append(("X-Turn", str(len(turns))))
            return response
    """))
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.chdir(tmp_path)
    return "turnsite"


def test_one_file_batches_wait_a_few_turns_while_large_batches_run(spawn, thousand_files, turn_site) -> None:
    # A budget that holds many slices of the large batches' plans and writes: released one a turn,
    # a one-file batch waited a turn for each large batch ahead of it, however little each needed.
    server = spawn("--workers", "1", "--app", f"{turn_site}:app", serve_root=thousand_files,
                   env={"AXON_TURN_BUDGET": "0.005"})
    connections = 12
    stop = threading.Event()
    done = [0] * connections

    def large(k: int) -> None:
        names = [f"f{(k * 97 + i) % 1000:04d}.bin" for i in range(256)]
        body = json.dumps({"files": names}).encode()
        with Client(server.port, timeout=30) as c:
            while not stop.is_set():
                resp = c.request("POST", "/api/stream-files", {"Content-Type": "application/json"}, body)
                assert resp.status == 200 and resp.body.count(b"Content-Length: 4096\r\n") == 256
                done[k] += 1

    threads = [threading.Thread(target=large, args=(k,), daemon=True) for k in range(connections)]
    for t in threads:
        t.start()
    try:
        assert wait_for(lambda: all(done), timeout=30), done  # every large batch under way
        before = sum(done)
        stamps = []
        with Client(server.port) as probe:
            for i in range(40):
                resp = probe.get(f"/one?f=f{i * 7:04d}.bin")
                assert resp.status == 200 and resp.body.count(b"Content-Length: 4096\r\n") == 1
                stamps.append(int(resp.header("X-Turn")))
        during = sum(done) - before
    finally:
        stop.set()
        for t in threads:
            t.join(30)
    assert during >= connections, (during, stamps)  # the large batches ran all along
    # Turns from one answer to the next: the client's round trip and the request's way into the
    # line (about four turns), then the wait for the work ahead of it: a share of a turn for
    # each large batch, not a turn each. The median: a busy machine may hold the client a while.
    gaps = sorted(b - a for a, b in zip(stamps, stamps[1:]))
    assert gaps[len(gaps) // 2] <= 4 + connections * SHARE + 2, gaps


def test_small_batches_of_one_read_are_answered_over_many_turns(spawn, thousand_files, turn_site) -> None:
    # Batches small enough to be planned at once and written in one write (15 files of 4 KiB):
    # without asking the turn's budget, the hundred of one read were answered in the one turn
    # that read them (as fifty connections' would be), however long it ran.
    server = spawn("--workers", "1", "--app", f"{turn_site}:app", serve_root=thousand_files)
    count = 100
    requests = b"".join(
        b"GET /one?%s HTTP/1.1\r\nHost: test\r\n\r\n"
        % "&".join(f"f{j}=f{(i * 15 + j) % 1000:04d}.bin" for j in range(15)).encode()
        for i in range(count)
    )
    with Client(server.port, timeout=30) as c:
        c.send(requests)
        stamps = []
        for _ in range(count):
            resp = c.response("GET")
            assert resp.status == 200 and resp.body.count(b"Content-Length: 4096\r\n") == 15
            stamps.append(int(resp.header("X-Turn")))
    # A batch costs a fraction of the turn's budget (1 ms), so a turn answers several: by
    # order, the count of turns, never fewer on a busy machine (about one a read, unpaced).
    assert len(set(stamps)) >= 8, stamps
