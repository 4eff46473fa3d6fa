"""End-to-end fixtures: Axon under every runtime, over real sockets.

``server`` is one session-scoped fixture parametrized over the runtimes (as falcon's
``tests/conftest.py`` does for its app flavours), so every e2e test runs against every runtime.
pytest groups the tests by parameter, so one server runs at a time: it is started once, on a free
port, in its own process group, serving ``root`` (a session temp dir of fixture files), and the
whole group is killed when pytest moves to the next runtime or the session ends, pass or fail.

Each test also gets the server's log lines written while it ran as a report section, so a
failure shows what the server said.
"""

from __future__ import annotations

import os
import random
import shutil
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent))

from e2e_wire import (
    A_SIZE,
    B_SIZE,
    BIG_SIZE,
    HOSTILE_NAME,
    JSON_HEADERS,
    UNICODE_NAME,
    Conn,
    ConnectionClosedEarly,
    KiB,
    Response,
    files_body,
    tree_fds,
    tree_rss,
)

HOST = "127.0.0.1"
START_TIMEOUT = 30.0


WSGI_APP = "axon.wsgi:application"
ASGI_APP = "axon.asgi:application"


# ----------------------------------------------------------------------------------- runtimes


def _bin(name: str) -> str:
    """An installed script, preferring the one beside this interpreter."""
    beside = Path(sys.executable).parent / name
    if beside.exists():
        return str(beside)
    return shutil.which(name) or name


@dataclass(frozen=True)
class Runtime:
    name: str
    interface: str  # "wsgi", "asgi" or "native"
    argv: Callable[[str, int], list[str]]  # (root, port) -> command line
    #: Python modules (checked in a subprocess) the runtime needs; missing -> skip.
    requires: tuple[str, ...] = ()
    #: The runtime closes the connection after every response (no keep-alive).
    closes_connections: bool = False
    #: The runtime reads a request's whole body before it calls the app.
    buffers_request_body: bool = False
    #: Longest request line (method, target, version) the runtime hands to the app; a longer one
    #: is refused by the runtime itself before Axon sees it (measured with this suite's client
    #: headers; the suite only tests lengths far from these). None: no limit met by the suite.
    max_request_line: int | None = None
    #: The runtime's own refusals (a too-long request line) are answered in Axon's JSON shape,
    #: as deploy/'s nginx site does.
    front_refusals_are_json: bool = False


def _gunicorn(worker: str, *extra: str) -> Callable[[str, int], list[str]]:
    def argv(root: str, port: int) -> list[str]:
        return [
            sys.executable, "-m", "gunicorn", "--worker-class", worker, "--workers", "1", *extra,
            "--bind", f"{HOST}:{port}", "--graceful-timeout", "2", "--log-level", "warning", WSGI_APP,
        ]  # fmt: skip

    return argv


RUNTIMES: dict[str, Runtime] = {
    # gunicorn's default worker: one request at a time, always Connection: close.
    "gunicorn-sync": Runtime(
        "gunicorn-sync", "wsgi", _gunicorn("sync"), ("gunicorn",),
        # limit_request_line=4094: a longer line gets gunicorn's own text/html 414.
        closes_connections=True, max_request_line=4094,
    ),
    # ``--threads N`` silently switches gunicorn to the gthread worker, which keeps connections alive.
    "gunicorn-gthread": Runtime(
        "gunicorn-gthread", "wsgi", _gunicorn("gthread", "--threads", "4"), ("gunicorn",),
        max_request_line=4094,
    ),
    "uwsgi": Runtime(
        "uwsgi", "wsgi",
        lambda root, port: [
            _bin("uwsgi"), "--http-socket", f"{HOST}:{port}", "--module", WSGI_APP,
            "--master", "--processes", "1", "--threads", "4", "--die-on-term", "--need-app",
            "--lazy-apps", "--disable-logging", "--buffer-size", "65535",
        ],
        # --buffer-size (default 4 KiB; 64 KiB is its maximum, set so that Axon's 16 KiB URL
        # limit is reachable) bounds the request head: past it uWSGI closes the connection with
        # no response. It also bounds the environ it builds, where the query is stored twice
        # (REQUEST_URI and QUERY_STRING): a variable that does not fit is dropped with a
        # warning and the app still runs, so a query over ~32 KiB reaches the app as empty.
        # Plain --http-socket closes the connection after every response, without saying so
        # (no Connection: close header).
        closes_connections=True, max_request_line=32000,
    ),
    "waitress": Runtime(
        "waitress", "wsgi",
        lambda root, port: [
            sys.executable, "-m", "waitress", f"--listen={HOST}:{port}", "--threads=4",
            # waitress queues up to 16 MiB of response per connection before it pauses the app
            # (outbuf_high_watermark), ~20-30 MiB of RSS even for a trivial generator app: its
            # own buffer, not Axon's. 1 MiB is the setting to deploy large-file serving with.
            "--outbuf-high-watermark=1048576", WSGI_APP,
        ],
        # max_request_header_size=256 KiB: past it waitress answers 431 itself. It reads (and
        # spools) the whole request body before calling the app.
        ("waitress",), max_request_line=262000, buffers_request_body=True,
    ),
    "uvicorn": Runtime(
        "uvicorn", "asgi",
        lambda root, port: [
            sys.executable, "-m", "uvicorn", ASGI_APP, "--host", HOST, "--port", str(port),
            "--log-level", "warning", "--no-access-log", "--timeout-graceful-shutdown", "2",
        ],
        # httptools protocol (auto): a request line over ~64 KiB gets uvicorn's text 400.
        ("uvicorn",), max_request_line=65500,
    ),
    "hypercorn": Runtime(
        "hypercorn", "asgi",
        lambda root, port: [
            sys.executable, "-m", "hypercorn", ASGI_APP, "--bind", f"{HOST}:{port}",
            "--workers", "1", "--log-level", "warning", "--graceful-timeout", "2",
        ],
        # h11: a request head over ~64 KiB gets hypercorn's own 431.
        ("hypercorn",), max_request_line=65400,
    ),
    "granian": Runtime(
        "granian", "asgi",
        lambda root, port: [
            _bin("granian"), "--interface", "asgi", ASGI_APP, "--host", HOST, "--port", str(port),
            "--workers", "1", "--log-level", "warning", "--no-access-log",
        ],
        # A request line over ~64 KiB gets granian's own empty-bodied 414.
        ("granian",), max_request_line=65500,
    ),
    "native": Runtime(
        "native", "native",
        lambda root, port: [
            sys.executable, "-m", "axon.cli", "serve", root,
            "--host", HOST, "--port", str(port), "--workers", "1",
        ],
        ("axon.server.cli",),
    ),
    # The production setup: deploy/'s generated nginx site in front of axon serve.
    "nginx+native": Runtime(
        "nginx+native", "native",
        lambda root, port: [
            sys.executable, str(Path(__file__).resolve().parents[1] / "deploy" / "nginx_front.py"),
            root, str(port), "--workers", "1",
        ],
        ("axon.server.cli",), max_request_line=32000, buffers_request_body=True,
        front_refusals_are_json=True,
    ),
}  # fmt: skip


_importable_cache: dict[str, bool] = {}


def importable(module: str) -> bool:
    """Whether ``python -c "import module"`` succeeds (in a subprocess: nothing leaks in here)."""
    if module not in _importable_cache:
        done = subprocess.run([sys.executable, "-c", f"import {module}"], capture_output=True, check=False)
        _importable_cache[module] = done.returncode == 0
    return _importable_cache[module]


# ---------------------------------------------------------------------------------- the server


def free_port() -> int:
    with socket.socket() as s:
        s.bind((HOST, 0))
        return s.getsockname()[1]


@dataclass
class Server:
    runtime: Runtime
    root: Path
    port: int
    proc: subprocess.Popen
    log_path: Path
    quirks: list[tuple[str, str]] = field(default_factory=list)

    @property
    def name(self) -> str:
        return self.runtime.name

    @property
    def pid(self) -> int:
        return self.proc.pid

    def connect(self, timeout: float = 10.0) -> Conn:
        return Conn(HOST, self.port, timeout)

    def request(
        self,
        method: str,
        target: str,
        headers: Iterable[tuple[str, str]] = (),
        body: bytes | None = None,
        *,
        timeout: float = 10.0,
    ) -> Response:
        """One request on a fresh connection with ``Connection: close``, read to EOF."""
        with self.connect(timeout) as conn:
            return conn.request(method, target, headers, body, close=True)

    def get(self, target: str, headers: Iterable[tuple[str, str]] = (), **kw) -> Response:
        return self.request("GET", target, headers, **kw)

    def head(self, target: str, headers: Iterable[tuple[str, str]] = (), **kw) -> Response:
        return self.request("HEAD", target, headers, **kw)

    def post_files(self, paths: list, **kw) -> Response:
        return self.request("POST", "/api/stream-files", JSON_HEADERS, files_body(paths), **kw)

    def log_size(self) -> int:
        try:
            return self.log_path.stat().st_size
        except OSError:
            return 0

    def log_text(self, start: int = 0, limit: int = 20000) -> str:
        try:
            with open(self.log_path, "rb") as f:
                f.seek(start)
                data = f.read()
        except OSError:
            return ""
        text = data.decode("utf-8", "replace")
        return text if len(text) <= limit else "...\n" + text[-limit:]

    def rss(self) -> int:
        return tree_rss(self.pid)

    def fds(self) -> dict[int, list[str]]:
        return tree_fds(self.pid)

    def assert_alive(self) -> None:
        assert self.proc.poll() is None, f"{self.name} exited ({self.proc.returncode}):\n{self.log_text()}"
        resp = self.get("/api/health")
        assert resp.status == 200, resp.describe()

    def quirk(self, message: str) -> None:
        """Note a runtime behaviour the suite tolerates explicitly; listed in the summary."""
        self.quirks.append((self.name, message))
        _QUIRKS.add((self.name, message))

    def stop(self) -> None:
        pgid = self.proc.pid  # start_new_session: the leader's pid is the group's id
        if self.proc.poll() is None:
            _killpg(pgid, signal.SIGTERM)
            try:
                self.proc.wait(5)
            except subprocess.TimeoutExpired:
                pass
        _killpg(pgid, signal.SIGKILL)  # and any worker that outlived its master
        try:
            self.proc.wait(5)
        except subprocess.TimeoutExpired:
            pass


def _killpg(pgid: int, sig: int) -> None:
    try:
        os.killpg(pgid, sig)
    except (ProcessLookupError, PermissionError):
        pass


def _health(port: int) -> bool:
    try:
        with Conn(HOST, port, timeout=2.0) as conn:
            return conn.request("GET", "/api/health", close=True).status == 200
    except (OSError, ConnectionClosedEarly, TimeoutError, AssertionError, ValueError):
        return False


def start_server(runtime: Runtime, root: Path, log_dir: Path) -> Server:
    # AXON_BROWSE: every runtime's built-in app lists directories (test_e2e_browse.py).
    env = dict(os.environ, AXON_ROOT=str(root), AXON_BROWSE="1", PYTHONUNBUFFERED="1")
    for attempt in range(3):
        port = free_port()
        log_path = log_dir / f"{runtime.name}-{attempt}.log"
        with open(log_path, "wb") as log:
            proc = subprocess.Popen(
                runtime.argv(str(root), port),
                cwd=root,
                env=env,
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
        server = Server(runtime, root, port, proc, log_path)
        deadline = time.monotonic() + START_TIMEOUT
        try:
            while time.monotonic() < deadline:
                if proc.poll() is not None:
                    break
                if _health(port):
                    return server
                time.sleep(0.1)
        except BaseException:
            server.stop()
            raise
        server.stop()
        log = server.log_text()
        if "in use" in log.lower() and attempt < 2:
            continue  # lost the race for the free port; try another
        how = f"exited with {proc.returncode}" if proc.returncode is not None else "did not answer"
        pytest.fail(
            f"{runtime.name} {how}: GET /api/health not 200 within {START_TIMEOUT:.0f}s\n"
            f"command: {' '.join(runtime.argv(str(root), port))}\n--- server output ---\n{log}",
            pytrace=False,
        )
    raise AssertionError("unreachable")


# ------------------------------------------------------------------------------------ fixtures


def _make_root(root: Path) -> None:
    rnd = random.Random(20240601)
    ex = root / "examples"
    ex.mkdir()
    (ex / "a.bin").write_bytes(rnd.randbytes(A_SIZE))
    (ex / "b.bin").write_bytes(rnd.randbytes(B_SIZE))
    (ex / "small.txt").write_bytes(b"hello, axon\r\nsecond line\n")
    (ex / "empty.bin").write_bytes(b"")
    (root / "deep" / "dir").mkdir(parents=True)
    (root / "deep" / "dir" / "c.bin").write_bytes(rnd.randbytes(10 * KiB + 7))
    (ex / HOSTILE_NAME).write_bytes(b"hostile name\r\n" + rnd.randbytes(1000))
    (ex / UNICODE_NAME).write_bytes("naïve résumé\n".encode())
    (root / ".secret").write_bytes(b"do not serve me\n")
    (root / ".hid").mkdir()
    (root / ".hid" / "x.txt").write_bytes(b"hidden directory, do not serve me either\n")
    os.symlink(".secret", root / "link-to-dot")  # a visible name for a dot-file: refused as it is
    os.symlink(".hid", root / "link-dir")  # a visible name for a dot-directory: refused as it is
    os.symlink("a.bin", ex / "link.bin")  # inside the root: served as a.bin
    os.symlink("/etc/passwd", root / "escape")  # outside file
    os.symlink("/etc", root / "escdir")  # outside directory
    os.symlink("/dev/zero", ex / "zero.bin")  # endless device
    os.mkfifo(ex / "fifo")  # opening it blocking would hang the server
    with open(ex / "big.bin", "wb") as f:
        f.truncate(BIG_SIZE)  # sparse: fast to create, reads as zeros


@pytest.fixture(scope="session")
def served_root(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The served root (``AXON_ROOT``), populated with the fixture files (see ``_make_root``)."""
    path = tmp_path_factory.mktemp("axon-root")
    _make_root(path)
    return path


@pytest.fixture(scope="session")
def _log_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("server-logs")


@pytest.fixture(scope="session", params=list(RUNTIMES), ids=list(RUNTIMES))
def server(request: pytest.FixtureRequest, served_root: Path, _log_dir: Path) -> Iterable[Server]:
    runtime = RUNTIMES[request.param]
    missing = [m for m in runtime.requires if not importable(m)]
    if missing:
        pytest.skip(f"{runtime.name}: cannot import {', '.join(missing)}")
    srv = start_server(runtime, served_root, _log_dir)
    try:
        yield srv
    finally:
        srv.stop()


@pytest.fixture(autouse=True)
def _server_log_section(request: pytest.FixtureRequest) -> Iterable[None]:
    """Attach what the server logged during a test to that test's report."""
    if "server" not in request.fixturenames:
        yield
        return
    srv: Server = request.getfixturevalue("server")
    start = srv.log_size()
    yield
    text = srv.log_text(start)
    if text.strip():
        request.node.add_report_section("call", f"{srv.name} output", text)


_QUIRKS: set[tuple[str, str]] = set()


def pytest_terminal_summary(terminalreporter, exitstatus, config) -> None:
    if _QUIRKS:
        terminalreporter.section("e2e runtime quirks tolerated")
        for name, message in sorted(_QUIRKS):
            terminalreporter.write_line(f"{name}: {message}")
