"""Nothing the benchmark starts outlives it: not on a normal end, not on SIGTERM, not on kill -9."""

from __future__ import annotations

import os
import re
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from axon.bench import nginx, procs, scenarios
from axon.demo import make_samples

pytestmark = pytest.mark.slow  # real processes stopped by signals

psutil = pytest.importorskip("psutil")


def _alive(pids: list[int]) -> list[int]:
    out = []
    for pid in pids:
        try:
            if psutil.Process(pid).status() != psutil.STATUS_ZOMBIE:
                out.append(pid)
        except psutil.NoSuchProcess:
            pass
    return out


def _wait_gone(pids: list[int], timeout: float = 10.0) -> list[int]:
    deadline = time.monotonic() + timeout
    while _alive(pids) and time.monotonic() < deadline:
        time.sleep(0.05)
    return _alive(pids)


def test_group_stops_workers_that_ignore_sigterm(tmp_path):
    # A "master" whose "workers" ignore SIGTERM: the group's SIGKILL still reaches them.
    script = "trap '' TERM; sleep 60 & sleep 60 & wait"
    with procs.Group(tmp_path, None, grace=0.5) as group:
        leader = group.start(procs.Command(["sh", "-c", script], "fake-server"))
        deadline = time.monotonic() + 5
        while len(psutil.Process(leader.pid).children()) < 2 and time.monotonic() < deadline:
            time.sleep(0.02)
        family = [leader.pid] + [c.pid for c in psutil.Process(leader.pid).children(recursive=True)]
        assert len(family) == 3
    assert _wait_gone(family) == []


def test_wrap_pins_and_ties_to_parent():
    argv = procs.wrap(["nginx", "-c", "x"], "0")
    assert argv[-6:] == ["taskset", "-c", "0", "nginx", "-c", "x"]
    if shutil.which("setpriv"):
        assert argv[:3] == ["setpriv", "--pdeathsig", "TERM"]


needs_tools = pytest.mark.skipif(shutil.which("wrk") is None or not Path(nginx.binary()).exists(),
                                 reason="wrk and nginx are installed by scripts/setup.sh --all")


def _cmdline(process: psutil.Process) -> str:
    """A child's command line, or "" for one that ended (or is a zombie) while we looked: the
    short-lived execs (setpriv, taskset) the benchmark starts do."""
    try:
        return " ".join(process.cmdline())
    except psutil.Error:
        return ""


def _bench_with_nginx(tmp_path: Path) -> tuple[subprocess.Popen, list[int]]:
    """``axon bench --compare`` against nginx, running a long burst; returns it and, once wrk runs,
    every process it started."""
    argv = [sys.executable, "-m", "axon.bench.cli", "--compare", "--targets", "nginx", "--scenarios", "health",
            "--burst", "60", "--sustained", "0", "--connections", "2", "--threads", "1", "--no-chart", "--no-pin",
            "--files-dir", str(tmp_path / "files"), "--out", str(tmp_path / "out")]
    bench = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, start_new_session=True)
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        family = psutil.Process(bench.pid).children(recursive=True)
        names = " ".join(map(_cmdline, family))
        if "wrk" in names and "nginx" in names:
            time.sleep(0.3)  # let nginx's worker appear too
            return bench, [p.pid for p in psutil.Process(bench.pid).children(recursive=True)]
        if bench.poll() is not None:
            pytest.fail(f"bench exited early: {bench.stderr.read().decode()[-2000:]}")
        time.sleep(0.1)
    bench.kill()
    pytest.fail("wrk never started")


@needs_tools
def test_sigterm_stops_servers_and_wrk_and_keeps_results(tmp_path):
    bench, started = _bench_with_nginx(tmp_path)
    assert len(started) >= 3  # nginx master and worker, wrk (and their setpriv/taskset execs)
    os.kill(bench.pid, signal.SIGTERM)
    assert bench.wait(20) == 130
    assert _wait_gone(started) == []
    assert (tmp_path / "out" / "results.json").is_file()  # what was measured so far is kept


@needs_tools
@pytest.mark.skipif(shutil.which("setpriv") is None, reason="needs util-linux's setpriv")
def test_kill_9_of_the_benchmark_still_stops_what_it_started(tmp_path):
    bench, started = _bench_with_nginx(tmp_path)
    os.kill(bench.pid, signal.SIGKILL)
    bench.wait(10)
    assert _wait_gone(started) == []



@pytest.mark.skipif(not Path(nginx.binary()).exists(), reason="nginx is installed by scripts/setup.sh --all")
def test_nginx_is_measured_at_its_best(tmp_path):
    """The yardstick caches open files as axon serve does (issue 17), the whole random-file pool
    and the examples (issue 23), and nginx accepts it."""
    prefix = tmp_path / "prefix"
    nginx.static_command(prefix, 18999, tmp_path)
    conf = prefix / "nginx.conf"
    text = conf.read_text()
    cached = int(re.search(r"open_file_cache max=(\d+) inactive=60s;", text).group(1))
    assert cached >= scenarios.POOL_FILES + len(make_samples(tmp_path / "samples"))
    assert "open_file_cache_valid 60s;" in text and "sendfile on;" in text
    assert f"worker_rlimit_nofile {cached + nginx.WORKER_CONNECTIONS + 64};" in text
    checked = subprocess.run([nginx.binary(), "-t", "-p", str(prefix), "-c", str(conf), "-e", str(prefix / "error.log")],
                             capture_output=True, text=True)
    assert checked.returncode == 0, checked.stderr
