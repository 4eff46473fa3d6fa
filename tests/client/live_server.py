"""Axon under a real server (gunicorn, uvicorn, or its own) in a subprocess, on a free port.

``with live_server("gunicorn", root) as url:`` yields the base URL once ``/api/health`` answers,
and stops the server's whole process group at the end. ``runtime_available`` says whether a
runtime can be started here, for ``pytest.skip``.
"""

from __future__ import annotations

import contextlib
import http.client
import importlib.util
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from axon.bench.procs import free_port

COMMANDS = {
    # One worker each: tests that need two workers to agree build two Apps in-process instead.
    "gunicorn": ["-m", "gunicorn", "--workers", "1", "--bind", "127.0.0.1:{port}", "axon.wsgi:application"],
    "uvicorn": ["-m", "uvicorn", "--host", "127.0.0.1", "--port", "{port}", "--log-level", "warning",
                "axon.asgi:application"],
    "native": ["-m", "axon.cli", "serve", "--host", "127.0.0.1", "--port", "{port}", "--workers", "1",
               "--log-level", "warning"],
    # axon demo as the README gives it (its DIR among the args): the files it writes, served.
    "demo": ["-m", "axon.cli", "demo", "--host", "127.0.0.1", "--port", "{port}"],
}
# What each runtime needs importable: the server, and the Axon module it runs.
_NEEDS = {"gunicorn": ("gunicorn", "axon.wsgi"), "uvicorn": ("uvicorn", "axon.asgi"),
          "native": ("httptools", "axon.server.cli"), "demo": ("httptools", "axon.server.cli")}


@dataclass(frozen=True)
class LiveAxon:
    """A running server (the ``live_axon`` fixture): its runtime, URL, served root and secret."""

    runtime: str
    url: str
    root: Path
    secret: str

    def put(self, path: str, data: bytes) -> Path:
        """Write a file under the served root (each test keeps to its own subdirectory)."""
        target = self.root / path
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_bytes(data)
        return target


def make_files(live: LiveAxon, folder: str) -> dict[str, bytes]:
    """Three files under ``folder`` of the served root (a subdirectory, a non-ASCII name, sizes
    that are no multiple of anything): path -> bytes."""
    files = {
        f"{folder}/one.bin": os.urandom(300_000),
        f"{folder}/sub/two.bin": os.urandom(200_001),
        f"{folder}/three é.txt": b"three\r\n",
    }
    for path, data in files.items():
        live.put(path, data)
    return files


def runtime_available(runtime: str) -> str | None:
    """None if ``runtime`` can run Axon here, else why not."""
    server, module = _NEEDS[runtime]
    if importlib.util.find_spec(server) is None:
        return f"{server} is not installed"
    try:
        __import__(module)
    except Exception as exc:  # the core may be mid-way through a change
        return f"{module} cannot be imported: {exc}"
    return None


def dead_netloc() -> str:
    """A loopback ``host:port`` nothing listens on (bound, then closed: connecting is refused)."""
    return f"127.0.0.1:{free_port()}"


@contextlib.contextmanager
def nginx_static(root: Path, prefix: Path) -> Iterator[str]:
    """nginx serving ``root`` as static files (at ``/files/``, as the bench's yardstick does), its
    own files under ``prefix``: a server that is not Axon. Yields ``host:port``; skips the test
    where nginx is not installed."""
    import pytest

    from axon.bench import nginx, procs

    if not Path(nginx.binary()).exists():
        pytest.skip("nginx is installed by scripts/setup.sh --all")
    port = free_port()
    server = procs.start(nginx.static_command(prefix, port, root), None, prefix / "out.log")
    try:
        procs.wait_ready(f"http://127.0.0.1:{port}/api/health")
        yield f"127.0.0.1:{port}"
    finally:
        procs.stop(server)


def says_not_axon(said: str, netloc: str) -> bool:
    """Whether an error a reader raised for ``nginx_static`` at ``netloc`` says what a user must
    know: the URL that answered, that its ``/api/limits`` is missing, and no HTML page as a reason."""
    return (f"http://{netloc}/api/limits answered 404" in said and "/api/limits is missing" in said
            and "<html" not in said.lower())


def healthy(port: int) -> bool:
    try:
        connection = http.client.HTTPConnection("127.0.0.1", port, timeout=1)
        connection.request("GET", "/api/health")
        return connection.getresponse().status == 200
    except OSError:
        return False


@contextlib.contextmanager
def live_server(runtime: str, root: Path, env: Mapping[str, str] | None = None, args: Sequence[str] = (),
                log: Path | None = None) -> Iterator[str]:
    """``runtime`` serving ``root`` (with ``args`` after its own, its output to ``log`` or
    nowhere) until the block ends; yields its base URL."""
    port = free_port()
    argv = [sys.executable, *(arg.format(port=port) for arg in COMMANDS[runtime]), *args]
    environment = {k: v for k, v in os.environ.items() if k != "AXON_SECRET"}
    environment.update(AXON_ROOT=str(root), **(env or {}))
    with open(log, "wb") if log is not None else contextlib.nullcontext(subprocess.DEVNULL) as out:
        process = subprocess.Popen(argv, env=environment, stdout=out, stderr=subprocess.STDOUT, start_new_session=True)
    try:
        deadline = time.monotonic() + 20
        while not healthy(port):
            if process.poll() is not None or time.monotonic() > deadline:
                said = log.read_text(errors="replace")[-2000:] if log is not None else ""
                raise RuntimeError(f"{runtime} serving Axon did not become healthy {said}")
            time.sleep(0.05)
        yield f"http://127.0.0.1:{port}"
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(process.pid, signal.SIGTERM)
        try:
            process.wait(10)
        except subprocess.TimeoutExpired:
            os.killpg(process.pid, signal.SIGKILL)
            process.wait(5)
