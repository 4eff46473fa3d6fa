"""Fixtures for Axon's own server: a served root, servers in a thread or a subprocess, and a
raw-socket client that reads responses itself (no HTTP library between the test and the bytes).

* ``serve(app=None, limits=None, **config)`` starts a :class:`~axon.server.worker.ThreadServer`
  (a worker on its own event loop in a thread) on a free port; stopped at teardown. Without an
  App, it serves one built as ``axon serve`` builds it (:func:`shared_app`).
* ``spawn(*args, env=...)`` runs ``python -m axon.cli serve ROOT --port 0 ...`` in its own
  process group, reads the port from its log, and waits for ``/api/health``.

``serve``, ``harness`` and the modules' own servers run each test twice: with the compiled
reader of simple heads (``head_reader`` "compiled", skipped where it was not built) and without
it (``AXON_PURE_PYTHON=1``: llhttp alone), so the connection is proven both ways. The fast loop
(``-m "not slow"``) runs a ``head_reader`` test with this machine's own reader alone (the
compiled one where it was built): the other's runs are marked slow, except in the modules marked
``both_head_readers``, which compare the two.
"""

from __future__ import annotations

import importlib.util
import os
import random
import re
import signal
import socket
import ssl
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from axon.app import App
from axon.limits import Limits

HOST = "127.0.0.1"
KiB = 1024
MiB = 1024 * KiB
SMALL_COUNT = 32
BIG_SIZE = 8 * MiB


def _rand(seed: int, size: int) -> bytes:
    return random.Random(seed).randbytes(size)


FILES: dict[str, bytes] = {
    "a.txt": b"hello, axon\n",
    "b.bin": _rand(1, 10 * KiB),
    "mid.bin": _rand(2, 200 * KiB),  # above sendfile_min (64 KiB): goes out with sendfile
    "k64.bin": _rand(3, 64 * KiB),  # one write_chunk: read and written whole, in one writev
    "sub/c.json": b'{"c": 3}\n',
    **{f"small/f{i:02d}.bin": _rand(100 + i, 4 * KiB) for i in range(1, SMALL_COUNT + 1)},
}


@pytest.fixture(scope="session")
def root(tmp_path_factory: pytest.TempPathFactory) -> Path:
    base = tmp_path_factory.mktemp("server-root")
    for name, data in FILES.items():
        path = base / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(data)
    with open(base / "big.bin", "wb") as f:
        f.writelines(_rand(1000 + i, MiB) for i in range(BIG_SIZE // MiB))
    return base


def big_content(root: Path) -> bytes:
    return (root / "big.bin").read_bytes()


def counted(app: App) -> list[str]:
    """Make ``app.handle_on_loop`` record each path it answers (what a fixed answer skips)."""
    called: list[str] = []
    handle = app.handle_on_loop

    def counting(request):
        called.append(request.path)
        return handle(request)

    app.handle_on_loop = counting  # type: ignore[method-assign]
    return called


def shared_app(root: Path, config=None, **kwargs) -> App:
    """An App over ``root`` built as ``axon serve`` builds its own: its open files shared between
    requests as ``config`` (a ServerConfig, default the defaults) says."""
    from axon.app import built_for_offset_reads
    from axon.server.config import ServerConfig

    with built_for_offset_reads((config or ServerConfig(port=0)).serving_store):
        return App(root, **kwargs)


# --------------------------------------------------------------------------- raw HTTP client


@dataclass
class Resp:
    status: int
    reason: str
    headers: list[tuple[str, str]]
    body: bytes
    interim: list[int] = field(default_factory=list)  # 1xx statuses seen before this one

    def header(self, name: str) -> str | None:
        for key, value in self.headers:
            if key.lower() == name.lower():
                return value
        return None

    def json(self):
        import json

        return json.loads(self.body)


class Closed(Exception):
    """The connection ended (EOF or reset) before a complete response."""


class Reader:
    """Reads HTTP/1.1 responses from ``buf``, asking ``_more()`` for bytes when it runs out."""

    buf = b""

    def _more(self) -> bytes:
        raise Closed(f"no more bytes; {len(self.buf)} unread")

    def _line(self) -> bytes:
        while b"\r\n" not in self.buf:
            self._more()
        at = self.buf.index(b"\r\n")
        line = bytes(self.buf[:at])
        self.buf = self.buf[at + 2 :]
        return line

    def _exact(self, n: int) -> bytes:
        if len(self.buf) < n:
            parts = [self.buf]  # gather, then join once: no quadratic copying of large bodies
            have = len(self.buf)
            self.buf = b""
            while have < n:
                have += len(self._more())
                parts.append(self.buf)
                self.buf = b""
            self.buf = b"".join(parts)
        out, self.buf = self.buf[:n], self.buf[n:]
        return out

    def response(self, method: str = "GET") -> Resp:
        interim: list[int] = []
        while True:
            status_line = self._line().decode("latin-1")
            version, status, reason = (status_line.split(" ", 2) + [""])[:3]
            assert version == "HTTP/1.1", status_line
            headers = []
            while True:
                line = self._line()
                if not line:
                    break
                name, _, value = line.decode("latin-1").partition(":")
                headers.append((name, value.strip()))
            if 100 <= int(status) < 200:
                interim.append(int(status))
                continue
            break
        resp = Resp(int(status), reason, headers, b"", interim)
        if method == "HEAD" or resp.status in (204, 304):
            return resp
        length = resp.header("content-length")
        if resp.header("transfer-encoding") == "chunked":
            parts = []
            while True:
                size = int(self._line().split(b";")[0], 16)
                if size == 0:
                    while self._line():
                        pass
                    break
                parts.append(self._exact(size))
                assert self._exact(2) == b"\r\n"
            resp.body = b"".join(parts)
        elif length is not None:
            resp.body = self._exact(int(length))
        else:
            while True:
                try:
                    self._more()
                except Closed:
                    break
            resp.body, self.buf = self.buf, b""
        return resp


def parse_responses(data: bytes, methods: list[str] | None = None) -> list[Resp]:
    """Every complete response in ``data`` (what a fake transport recorded)."""
    reader = Reader()
    reader.buf = data
    out = []
    while reader.buf:
        method = methods[len(out)] if methods and len(out) < len(methods) else "GET"
        out.append(reader.response(method))
    return out


class Client(Reader):
    """One connection; ``send`` raw bytes, ``response()`` reads exactly one response."""

    def __init__(self, port: int, *, timeout: float = 10.0, tls: ssl.SSLContext | None = None, host: str = HOST) -> None:
        sock = socket.create_connection((host, port), timeout=timeout)
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        if tls is not None:
            sock = tls.wrap_socket(sock, server_hostname="localhost")
        self.sock = sock
        self.buf = b""

    def __enter__(self) -> Client:  # noqa: PYI034
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        try:
            self.sock.close()
        except OSError:
            pass

    def send(self, data: bytes) -> None:
        self.sock.sendall(data)

    def _more(self) -> bytes:
        try:
            data = self.sock.recv(256 * KiB)
        except ConnectionResetError:
            data = b""
        except ssl.SSLError:
            data = b""
        if not data:
            raise Closed(f"connection closed; {len(self.buf)} bytes unread")
        self.buf += data
        return data

    def request(self, method: str, target: str, headers: dict[str, str] | None = None, body: bytes = b"") -> Resp:
        lines = [f"{method} {target} HTTP/1.1", "Host: test"]
        lines += [f"{k}: {v}" for k, v in (headers or {}).items()]
        if body and not any(k.lower() in ("content-length", "transfer-encoding") for k in headers or {}):
            lines.append(f"Content-Length: {len(body)}")
        self.send(("\r\n".join(lines) + "\r\n\r\n").encode("latin-1") + body)
        return self.response(method)

    def get(self, target: str, headers: dict[str, str] | None = None) -> Resp:
        return self.request("GET", target, headers)

    def is_closed(self, timeout: float = 5.0) -> bool:
        """True once the server closed (EOF or reset) within ``timeout``; False if data came."""
        self.sock.settimeout(timeout)
        try:
            data = self.sock.recv(65536)
        except (ConnectionResetError, ssl.SSLError, BrokenPipeError):
            return True
        except TimeoutError:
            return False
        if data:
            self.buf += data
            return False
        return True


def get(port: int, target: str, **kw) -> Resp:
    with Client(port, **kw) as c:
        return c.get(target)


def slow_socket(port: int, rcvbuf: int = 16 * KiB) -> socket.socket:
    """A connected socket with a small receive buffer: the server soon meets a full socket."""
    sock = socket.socket()
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, rcvbuf)
    sock.settimeout(10)
    sock.connect((HOST, port))
    return sock


def slow_client(port: int, rcvbuf: int = 16 * KiB) -> Client:
    """A :class:`Client` over :func:`slow_socket`."""
    c = Client.__new__(Client)
    c.sock, c.buf = slow_socket(port, rcvbuf), b""
    return c


def wait_for(predicate, timeout: float = 5.0) -> bool:
    """Poll ``predicate`` every 50 ms until it holds or ``timeout`` seconds pass; its last value."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(0.05)
    return predicate()


def batch_target(paths: list[str]) -> str:
    from urllib.parse import quote

    return "/api/stream-files?" + "&".join(f"f{i}={quote(p)}" for i, p in enumerate(paths))


def parse_multipart(resp: Resp) -> list[tuple[dict[str, str], bytes]]:
    """Split a multipart body using its Content-Length part headers (what a streaming client does)."""
    ctype = resp.header("content-type") or ""
    m = re.search(r"boundary=([^;]+)", ctype)
    assert m, ctype
    delim = b"--" + m.group(1).encode()
    body, pos, parts = resp.body, 0, []
    while True:
        assert body.startswith(delim, pos), body[pos : pos + 80]
        pos += len(delim)
        if body.startswith(b"--\r\n", pos):
            assert pos + 4 == len(body)
            return parts
        assert body.startswith(b"\r\n", pos)
        pos += 2
        end = body.index(b"\r\n\r\n", pos)
        headers = dict(line.split(": ", 1) for line in body[pos:end].decode("latin-1").split("\r\n"))
        pos = end + 4
        size = int(headers["Content-Length"])
        parts.append((headers, body[pos : pos + size]))
        pos += size
        assert body.startswith(b"\r\n", pos)
        pos += 2


# ------------------------------------------------------------------------------------- servers

#: The two ways a connection reads heads (axon/server/simplehead.py).
HEAD_READERS = ["compiled", "pure"]
#: The one a server here reads with unless told otherwise: the compiled reader, where it was built.
OWN_HEAD_READER = "compiled" if importlib.util.find_spec("axon.server._simplehead") else "pure"


@pytest.hookimpl(tryfirst=True)  # before -m deselects
def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """The other reader's run of a ``head_reader`` test is slow: the fast loop proves the
    connection with one reader, and the modules marked ``both_head_readers`` show that the two
    answer alike."""
    for item in items:
        kind = getattr(item, "callspec", None) and item.callspec.params.get("head_reader")
        if kind not in (None, OWN_HEAD_READER) and item.get_closest_marker("both_head_readers") is None:
            item.add_marker(pytest.mark.slow)


@contextmanager
def head_reader_set(kind: str) -> Iterator[None]:
    """``AXON_PURE_PYTHON`` as ``kind`` asks while the block runs (a worker reads it when made)."""
    from axon.server import simplehead

    before = os.environ.pop("AXON_PURE_PYTHON", None)
    if kind == "pure":
        os.environ["AXON_PURE_PYTHON"] = "1"
    try:
        if kind == "compiled" and simplehead.parser() is None:
            pytest.skip("the compiled reader of simple heads is not built here")
        yield
    finally:
        os.environ.pop("AXON_PURE_PYTHON", None)
        if before is not None:
            os.environ["AXON_PURE_PYTHON"] = before


@pytest.fixture(params=HEAD_READERS)
def head_reader(request: pytest.FixtureRequest) -> Iterator[str]:
    with head_reader_set(request.param):
        yield request.param


@pytest.fixture
def serve(root: Path, head_reader: str):
    """Factory: ``serve(app=None, limits=None, **ServerConfig fields)`` -> a running ThreadServer."""
    from axon.server.config import ServerConfig
    from axon.server.worker import ThreadServer

    started: list[ThreadServer] = []

    def start(app: App | None = None, *, limits: Limits | None = None, **config) -> ThreadServer:
        server_config = ServerConfig(port=0, **config)
        if app is None:  # as axon serve builds it
            app = shared_app(root, server_config, limits=limits or Limits())
        server = ThreadServer(app, server_config).start()
        started.append(server)
        return server

    yield start
    for server in started:
        server.stop()


@dataclass
class Spawned:
    proc: subprocess.Popen
    port: int
    log_path: Path

    def log(self) -> str:
        return self.log_path.read_text(errors="replace")

    def workers(self) -> list[int]:
        import psutil

        return [c.pid for c in psutil.Process(self.proc.pid).children()]


def _health_ok(port: int) -> bool:
    try:
        return get(port, "/api/health", timeout=2).status == 200
    except (OSError, Closed, AssertionError, ValueError):
        return False


@pytest.fixture
def spawn(root: Path, tmp_path: Path):
    """Factory: run ``axon serve ROOT --port 0 *args``; the master is killed at teardown (its
    whole process group)."""
    procs: list[subprocess.Popen] = []

    def start(
        *args: str, env: dict[str, str] | None = None, wait_health: bool = True, serve_root: Path | None = None,
        wrap: list[str] = (),
    ) -> Spawned:
        """``serve_root`` serves another directory; ``wrap`` runs the command under another
        (``unshare ...``), which must exec it so that the process group stays the server's."""
        log_path = tmp_path / f"serve-{len(procs)}.log"
        cmd = [*wrap, sys.executable, "-m", "axon.cli", "serve", str(serve_root or root), "--port", "0",
               "--log-level", "info", *args]
        with open(log_path, "wb") as log:
            proc = subprocess.Popen(
                cmd, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                env={**os.environ, "PYTHONUNBUFFERED": "1", **(env or {})}, start_new_session=True,
            )
        procs.append(proc)
        deadline = time.monotonic() + 20
        port = 0
        while time.monotonic() < deadline and proc.poll() is None:
            found = re.search(r"listening on https?://[^\s,]+:(\d+)", log_path.read_text(errors="replace"))
            if found:
                port = int(found.group(1))
                break
            time.sleep(0.05)
        assert port, f"axon serve did not start:\n{log_path.read_text(errors='replace')}"
        spawned = Spawned(proc, port, log_path)
        while wait_health and time.monotonic() < deadline and not _health_ok(port):
            time.sleep(0.05)
        return spawned

    yield start
    for proc in procs:
        if proc.poll() is None:
            _killpg(proc.pid, signal.SIGKILL)
        try:
            proc.wait(5)
        except subprocess.TimeoutExpired:
            pass
        _killpg(proc.pid, signal.SIGKILL)  # any worker that outlived its master


def _killpg(pgid: int, sig: int) -> None:
    try:
        os.killpg(pgid, sig)
    except (ProcessLookupError, PermissionError):
        pass


# ------------------------------------------------------------ the protocol on a fake transport


class FakeTransport:
    """Records what the protocol writes; for pure parsing and framing tests only."""

    def __init__(self) -> None:
        self.out = bytearray()
        self.writes = 0
        self.eof = False
        self.closed = False
        self.aborted = False
        self.reading = True

    def get_extra_info(self, name: str, default=None):
        return default

    def set_write_buffer_limits(self, high=None, low=None) -> None:
        pass

    def get_write_buffer_size(self) -> int:
        return 0

    def write(self, data: bytes) -> None:
        assert not self.closed and not self.eof, "write after close"
        self.out += data
        self.writes += 1

    def writelines(self, parts) -> None:
        self.write(b"".join(parts))

    def can_write_eof(self) -> bool:
        return True

    def write_eof(self) -> None:
        self.eof = True

    def close(self) -> None:
        self.closed = True

    def abort(self) -> None:
        self.aborted = self.closed = True

    def is_closing(self) -> bool:
        return self.closed

    def pause_reading(self) -> None:
        self.reading = False

    def resume_reading(self) -> None:
        self.reading = True


class Harness:
    """One HTTPProtocol on a FakeTransport, with a loop to run whatever had to become a task."""

    def __init__(self, app: App) -> None:
        import asyncio

        from axon.server.config import ServerConfig
        from axon.server.outbox import Outbox
        from axon.pace import pace_of
        from axon.server.protocol import HTTPProtocol
        from axon.server.worker import Worker

        self.loop = asyncio.new_event_loop()
        self.worker = Worker(app, ServerConfig(sendfile=False))
        self.worker.loop = self.loop
        self.worker.outbox = Outbox(self.loop)
        self.worker.pace = pace_of(self.loop)  # as serve() makes it
        self.worker._set_deadlines(self.loop.time())
        self.proto = HTTPProtocol(self.worker)
        self.transport = FakeTransport()
        self.proto.connection_made(self.transport)  # type: ignore[arg-type]

    def receive(self, data: bytes) -> None:
        """``data_received(data)`` as the loop calls it: a plain callback of the running loop."""
        import asyncio

        self.loop.call_soon(self.proto.data_received, data)
        self.loop.run_until_complete(asyncio.sleep(0))

    def feed(self, *chunks: bytes) -> Harness:
        for chunk in chunks:
            if self.transport.closed:
                break
            self.receive(chunk)
        self.pump()
        return self

    def pump(self, rounds: int = 500) -> None:
        import asyncio

        if self.loop.is_closed():  # finished already (a test may finish before the fixture does)
            return
        quiet = 0
        for _ in range(rounds):
            cycle = self.proto.cycle
            # No answer pending in a task or waiting for its turn, and no request queued behind
            # it, at two looks a loop turn apart: what the last turn held is written by then.
            if (cycle is None or cycle.task is None) and not self.proto._pipeline:
                quiet += 1
                if quiet == 2:
                    break
            else:
                quiet = 0
            self.loop.run_until_complete(asyncio.sleep(0.002))

    @property
    def closed(self) -> bool:
        return self.transport.eof or self.transport.closed

    def responses(self, methods: list[str] | None = None) -> list[Resp]:
        return parse_responses(bytes(self.transport.out), methods)

    def finish(self) -> None:
        self.proto.connection_lost(None)
        self.pump()
        self.loop.close()


@pytest.fixture
def harness(root: Path, head_reader: str):
    made: list[Harness] = []

    def make(app: App | None = None, limits: Limits | None = None) -> Harness:
        h = Harness(app or App(root, limits=limits or Limits()))
        made.append(h)
        return h

    yield make
    for h in made:
        h.finish()
