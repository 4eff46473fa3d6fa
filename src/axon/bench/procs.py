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


#: The ports :func:`free_port` picks from lie below Linux's ephemeral range (32768-60999 by
#: default), where ``bind(0)`` picks: there an outgoing connection may take a port as its source
#: before the server binds it, and two processes asking at once may be handed the same one.
#: Each pytest-xdist worker (``gw0``, ``gw1``, ...) picks in a band of its own, so no two workers'
#: servers ever meet on one port and take each other's requests.
PORTS_FROM = 20000
PORT_BAND = 1500
_picked = [0]  # ports this process has picked: each call goes on from the last


def free_port(host: str = "127.0.0.1") -> int:
    """A port nothing listens on now, not picked before by this process (until its band wraps
    round): from :data:`PORTS_FROM`, in this xdist worker's band. Another process could still
    bind it before the server does; a failed start then says so."""
    worker = os.environ.get("PYTEST_XDIST_WORKER", "")
    band = int(worker[2:]) % 8 if worker[:2] == "gw" and worker[2:].isdigit() else 0
    first = PORTS_FROM + band * PORT_BAND
    for _ in range(PORT_BAND):
        # From an offset of this process's own, so that processes of one band start apart.
        port = first + (os.getpid() * 7 + _picked[0]) % PORT_BAND
        _picked[0] += 1
        with socket.socket() as sock:
            try:
                sock.bind((host, port))
            except OSError:
                continue
        return port
    raise OSError(f"no free port in {first}-{first + PORT_BAND - 1}")


def free_ports(count: int, host: str = "127.0.0.1") -> list[int]:
    """``count`` distinct ports nothing listens on now (:func:`free_port` never picks one twice
    in a row)."""
    return [free_port(host) for _ in range(count)]


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
