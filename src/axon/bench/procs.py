"""Start servers and load generators so that none of them outlives the benchmark.

Every child starts in its own session (so its own process group): a server's workers share its
group, and killing the group reaches them all, however the server forks. The groups are killed
when their ``with`` block ends, at interpreter exit (``atexit``), and on SIGINT/SIGTERM/SIGHUP,
which we turn into an exception so that the ``finally`` blocks run. Where util-linux's
``setpriv`` exists, each child also gets a parent-death signal, so even a ``kill -9`` of the
benchmark stops the servers' masters, which then stop their workers.
"""

from __future__ import annotations

import atexit
import contextlib
import os
import shutil
import signal
import socket
import subprocess
import time
import urllib.error
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

_live: dict[int, subprocess.Popen] = {}  # pgid -> process, everything not yet stopped


@dataclass(frozen=True)
class Command:
    argv: list[str]
    name: str
    env: dict[str, str] = field(default_factory=dict)  # added to the current environment
    cwd: str | None = None


def wrap(argv: list[str], cpus: str | None) -> list[str]:
    """``argv`` pinned to ``cpus`` (taskset list syntax, e.g. ``0`` or ``0,2-3``) and tied to our life."""
    out = list(argv)
    if cpus:
        out = ["taskset", "-c", cpus, *out]
    if shutil.which("setpriv"):
        out = ["setpriv", "--pdeathsig", "TERM", "--", *out]
    return out


def start(command: Command, cpus: str | None, log: Path) -> subprocess.Popen:
    """Start ``command`` in a new session, stdout and stderr to ``log``."""
    env = {**os.environ, **command.env}
    with open(log, "ab") as out:
        proc = subprocess.Popen(
            wrap(command.argv, cpus), cwd=command.cwd, env=env, stdin=subprocess.DEVNULL,
            stdout=out, stderr=subprocess.STDOUT, start_new_session=True,
        )
    track(proc)
    return proc


def track(proc: subprocess.Popen) -> None:
    """Count ``proc`` (started with ``start_new_session=True``) among those to stop at exit."""
    _live[proc.pid] = proc


def stop(proc: subprocess.Popen, grace: float = 5.0) -> None:
    """SIGTERM the process group, then SIGKILL whatever is left of it after ``grace`` seconds."""
    pgid = proc.pid  # start_new_session: the leader's pid is the group id
    _signal_group(pgid, signal.SIGTERM)
    try:
        proc.wait(grace)
    except subprocess.TimeoutExpired:
        pass
    # Workers may linger after their master is gone: the group outlives its leader.
    _signal_group(pgid, signal.SIGKILL)
    try:
        proc.wait(grace)
    except subprocess.TimeoutExpired:  # pragma: no cover - a process that survives SIGKILL
        pass
    _live.pop(pgid, None)


def stop_all() -> None:
    for proc in list(_live.values()):
        stop(proc, grace=2.0)


def _signal_group(pgid: int, sig: int) -> None:
    try:
        os.killpg(pgid, sig)
    except (ProcessLookupError, PermissionError):
        pass


class Interrupted(BaseException):
    """A SIGTERM or SIGHUP, raised like KeyboardInterrupt so that cleanup runs."""


def _on_signal(signum: int, frame: object) -> None:
    if signum == signal.SIGINT:
        raise KeyboardInterrupt
    raise Interrupted(signal.Signals(signum).name)


_SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)
atexit.register(stop_all)


def install_handlers() -> dict[signal.Signals, Any]:
    """Make SIGINT/SIGTERM/SIGHUP unwind as exceptions so that every ``finally`` (and so every
    ``stop``) runs. Main thread only. Returns the previous handlers, for :func:`restore_handlers`."""
    previous = {sig: signal.getsignal(sig) for sig in _SIGNALS}
    for sig in _SIGNALS:
        signal.signal(sig, _on_signal)
    return previous


def restore_handlers(previous: dict[signal.Signals, Any]) -> None:
    for sig, handler in previous.items():
        signal.signal(sig, handler)


class Group:
    """The processes of one running target; stopped in reverse start order when the block ends."""

    def __init__(self, log_dir: Path, cpus: str | None, grace: float = 5.0) -> None:
        self.log_dir = log_dir
        self.cpus = cpus
        self.grace = grace
        self.procs: list[tuple[str, subprocess.Popen]] = []

    def start(self, command: Command) -> subprocess.Popen:
        proc = start(command, self.cpus, self.log_dir / f"{command.name}.log")
        self.procs.append((command.name, proc))
        return proc

    @property
    def pids(self) -> list[int]:
        return [p.pid for _, p in self.procs]

    def check_alive(self) -> None:
        for name, proc in self.procs:
            if proc.poll() is not None:
                raise RuntimeError(f"{name} exited with {proc.returncode} (log: {self.log_dir / name}.log)")

    def __enter__(self) -> Group:
        return self

    def __exit__(self, *exc: object) -> None:
        for _, proc in reversed(self.procs):
            stop(proc, self.grace)
        self.procs.clear()


def free_port(host: str = "127.0.0.1") -> int:
    """A port nothing listens on now. Another process could take it before the server binds;
    on a benchmark machine that race is rare, and a failed start says so."""
    with socket.socket() as sock:
        sock.bind((host, 0))
        return sock.getsockname()[1]


def free_ports(count: int, host: str = "127.0.0.1") -> list[int]:
    """``count`` distinct ports nothing listens on now: all held open together while picked, so
    the kernel cannot hand out one twice (as it may to :func:`free_port` called in a row)."""
    with contextlib.ExitStack() as held:
        socks = [held.enter_context(socket.socket()) for _ in range(count)]
        for sock in socks:
            sock.bind((host, 0))
        return [sock.getsockname()[1] for sock in socks]


def wait_ready(url: str, group: Group | None = None, timeout: float = 30.0) -> None:
    """Poll ``url`` until it answers 2xx; fail early if a process of ``group`` died."""
    deadline = time.monotonic() + timeout
    last: object = None
    while time.monotonic() < deadline:
        if group is not None:
            group.check_alive()
        try:
            with urllib.request.urlopen(url, timeout=2) as response:
                if 200 <= response.status < 300:
                    return
                last = response.status
        except urllib.error.HTTPError as exc:
            last = exc.code
        except OSError as exc:
            last = exc
        time.sleep(0.1)
    raise TimeoutError(f"{url} not ready after {timeout:.0f}s (last: {last})")
