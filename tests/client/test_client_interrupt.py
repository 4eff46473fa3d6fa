"""``axon fetch`` (multipart) interrupted: the real command in a subprocess, against Axon under
uvicorn behind a proxy that passes the answer on slowly (a download of seconds).

Ctrl-C stops it within a second and saves where it stood, counting the bytes of the part it keeps
as received; a second Ctrl-C changes nothing; after SIGKILL the journal of the last second is
there. Each time the same command run again resumes (fewer bytes cross the proxy than a whole
batch), says where it took over, reports the rate of its own bytes only, ends with every byte
right, and leaves nothing stray: no ``*.part``, no journal.
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from live_server import live_server, runtime_available
from slow_proxy import SlowProxy

from axon.client.journal import JOURNAL_DIR
from axon.client.progress import format_bytes

pytestmark = pytest.mark.slow  # real processes interrupted with signals

RATE = 1_000_000  # bytes a second through the proxy: the batch below takes about 6 s
SIZES = [1_500_000, 10_000, 1_000_000, 1_000_000, 1_000_000, 1_500_000]
NAMES = [f"slow/f{i}.bin" for i in range(len(SIZES))]


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, dict[str, bytes]]]:
    why = runtime_available("uvicorn")
    if why is not None:
        pytest.skip(why)
    root = tmp_path_factory.mktemp("interrupt-root")
    files = {name: os.urandom(size) for name, size in zip(NAMES, SIZES)}
    for name, data in files.items():
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_bytes(data)
    with live_server("uvicorn", root) as url:
        yield url, files


def start_fetch(url: str, dest: Path) -> subprocess.Popen:
    env = {k: v for k, v in os.environ.items() if k != "AXON_SECRET"}
    return subprocess.Popen([sys.executable, "-m", "axon.cli", "fetch", url, *NAMES, "-o", str(dest), "--no-progress"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env,
                            preexec_fn=_ctrl_c_as_in_a_terminal)


def _ctrl_c_as_in_a_terminal() -> None:
    # A suite started in the background by a non-interactive shell (`cmd &`) ignores SIGINT, and
    # a child inherits that: the command under test would never see the Ctrl-C sent to it.
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def wait_until(done: Callable[[], bool], process: subprocess.Popen, limit: float = 20.0) -> None:
    deadline = time.monotonic() + limit
    while not done():
        assert process.poll() is None, process.communicate()
        assert time.monotonic() < deadline, "the download never got there"
        time.sleep(0.01)


def parts(dest: Path) -> list[Path]:
    return sorted(dest.rglob("*.part"))


def journals(dest: Path) -> list[Path]:
    return sorted((dest / JOURNAL_DIR).glob("*.json")) if (dest / JOURNAL_DIR).exists() else []


UNITS = {"B": 1, "KiB": 1 << 10, "MiB": 1 << 20, "GiB": 1 << 30}


def resume_and_check(url: str, dest: Path, files: dict[str, bytes], proxy: SlowProxy) -> None:
    """The same command again: it resumes, says where, counts only its own bytes in the rate;
    every file is the server's, nothing stray is left."""
    saved = json.loads(journals(dest)[0].read_text())
    before = proxy.sent
    rerun = start_fetch(url, dest)
    out, err = rerun.communicate(timeout=60)
    assert rerun.returncode == 0, err
    # Resumed where the journal says: only what was left of the body moves again, whatever offset
    # the last save caught (slack for the answer's head and what the proxy still passed on to the
    # killed run's connection after ``before``).
    assert proxy.sent - before < saved["length"] - saved["offset"] + 64 * 1024, saved
    assert out.rstrip().endswith(f"; resumed at {format_bytes(saved['offset'])} of {format_bytes(saved['length'])}"), out
    number, unit = re.search(r" s, ([\d.]+) (\w+)/s", out).groups()  # type: ignore[union-attr]
    assert float(number) * UNITS[unit] < RATE * 1.1, out  # no faster than the proxy passes bytes on
    for name, data in files.items():
        assert (dest / name).read_bytes() == data, name
    assert parts(dest) == [] and not (dest / JOURNAL_DIR).exists()


def test_ctrl_c_stops_within_a_second_and_the_next_run_resumes(server, tmp_path: Path):
    url, files = server
    dest = tmp_path / "dest"
    with SlowProxy(url, RATE) as proxy:
        process = start_fetch(proxy.url, dest)
        wait_until(lambda: proxy.sent > 2_000_000, process)
        sent = time.monotonic()
        process.send_signal(signal.SIGINT)
        out, err = process.communicate(timeout=30)
        stopped_after = time.monotonic() - sent
        assert process.returncode == 130, err
        assert stopped_after < 1.0, f"stopped {stopped_after:.1f} s after SIGINT"
        assert "interrupted after" in err and "run the same command again to resume" in err
        assert "Traceback" not in err
        (journal,) = journals(dest)
        saved = json.loads(journal.read_text())
        # What was received counts, the part kept to resume included, not only the whole files.
        number, unit = re.search(r"\(([\d.]+) (\w+) received", err).groups()  # type: ignore[union-attr]
        assert abs(float(number) * UNITS[unit] - saved["offset"]) < 0.15 * UNITS["MiB"], (err, saved["offset"])
        assert [p.relative_to(dest).as_posix() for p in parts(dest)] == [saved["part"][1]]  # the one it names
        resume_and_check(proxy.url, dest, files, proxy)


def test_a_second_ctrl_c_changes_nothing(server, tmp_path: Path):
    url, files = server
    dest = tmp_path / "dest"
    with SlowProxy(url, RATE) as proxy:
        process = start_fetch(proxy.url, dest)
        wait_until(lambda: proxy.sent > 2_000_000, process)
        for _ in range(3):
            process.send_signal(signal.SIGINT)
            time.sleep(0.005)
        out, err = process.communicate(timeout=30)
        assert process.returncode == 130 and "Traceback" not in err, err
        assert len(journals(dest)) == 1 and len(parts(dest)) == 1
        resume_and_check(proxy.url, dest, files, proxy)


def test_after_sigkill_the_next_run_resumes_and_leaves_nothing_stray(server, tmp_path: Path):
    """Killed just after the part the journal names was finished and the next one begun (the
    journal is saved each second, and the first file takes longer): the next run must still
    resume, and the temporary file of the part begun must not be left behind."""
    url, files = server
    dest = tmp_path / "dest"
    with SlowProxy(url, RATE) as proxy:
        process = start_fetch(proxy.url, dest)
        wait_until(lambda: bool(journals(dest)), process)  # a journal saved, inside the first file
        named = json.loads(journals(dest)[0].read_text())["part"][1]
        wait_until(lambda: any(p.relative_to(dest).as_posix() != named for p in parts(dest)), process)
        process.send_signal(signal.SIGKILL)
        process.wait(10)
        assert journals(dest) and parts(dest)
        resume_and_check(proxy.url, dest, files, proxy)
