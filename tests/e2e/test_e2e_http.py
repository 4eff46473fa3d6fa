"""Routing, methods, connection reuse and client disconnects, on every runtime."""

from __future__ import annotations

import collections
import time

import pytest

from e2e_wire import (
    JSON_HEADERS,
    MiB,
    batch_target,
    build_request,
    check_batch,
    files_body,
    tree_read_bytes,
)

pytestmark = [pytest.mark.slow, pytest.mark.timeout(60)]  # every runtime over real sockets

AB = ["examples/a.bin", "examples/b.bin"]
BIG_BATCH = batch_target(["examples/big.bin"] * 4)  # 1 GiB


@pytest.mark.parametrize("target", ["/nope", "/api/nope", "/api/health/extra", "/API/HEALTH", "/api"])
def test_unknown_route_is_404_json(server, target):
    server.get(target).error(404)


@pytest.mark.parametrize(
    "method, target, allowed",
    [
        ("DELETE", "/api/stream-files", {"GET", "HEAD", "POST"}),
        ("PUT", "/api/stream-files", {"GET", "HEAD", "POST"}),
        ("POST", "/api/health", {"GET", "HEAD"}),
        ("PUT", "/files/examples/a.bin", {"GET", "HEAD"}),
        ("DELETE", "/files/examples/a.bin", {"GET", "HEAD"}),
    ],
)
def test_wrong_method_is_405_with_allow(server, method, target, allowed):
    resp = server.request(method, target, body=b"" if method in ("POST", "PUT") else None)
    err = resp.error(405)
    assert err["code"] == "method_not_allowed"
    allow = resp.header("allow")
    assert allow, resp.describe()
    assert {m.strip() for m in allow.split(",")} == allowed, f"Allow: {allow!r}"


def test_keep_alive(server, served_root):
    """Several requests, including errors and a POST, on one connection."""
    a = (served_root / "examples/a.bin").read_bytes()
    steps = [
        ("GET", "/api/health", (), None, lambda r: r.json() == {"status": "available"}),
        ("GET", batch_target(AB), (), None, lambda r: check_batch(r, AB, served_root) is not None),
        ("GET", "/files/examples/a.bin", [("Range", "bytes=0-9")], None, lambda r: r.body == a[:10]),
        ("GET", "/api/nope", (), None, lambda r: r.error(404) is not None),
        ("HEAD", "/files/examples/a.bin", (), None, lambda r: r.body == b""),
        ("POST", "/api/stream-files", JSON_HEADERS, files_body(AB), lambda r: check_batch(r, AB, served_root) is not None),
        ("POST", "/api/stream-files", JSON_HEADERS, b"{", lambda r: r.error(400) is not None),
        ("DELETE", "/api/stream-files", (), None, lambda r: r.error(405) is not None),
        ("GET", "/files/examples/a.bin", (), None, lambda r: r.body == a),
        ("GET", "/api/health", (), None, lambda r: r.status == 200),
    ]
    conn = server.connect()
    closed = 0
    try:
        for i, (method, target, headers, body, check) in enumerate(steps):
            resp = conn.request(method, target, headers, body)
            assert check(resp), f"step {i}: {resp.describe()}"
            said_close = (resp.header("connection") or "").lower() == "close"
            if not server.runtime.closes_connections:
                assert not said_close, f"{server.name} closed the connection after step {i}: {method} {target}"
                continue
            if not said_close:
                # HTTP/1.1 lets a server close at any time; uWSGI's --http-socket does after every
                # response without announcing it. The connection must then really be at EOF.
                assert conn.reader.more() is False and conn.reader.buf == b"", (
                    f"{server.name}: more bytes after step {i}'s response"
                )
                server.quirk("closes the connection after every response without Connection: close")
            closed += 1
            conn.close()
            conn = server.connect()
    finally:
        conn.close()
    if server.runtime.closes_connections:
        server.quirk(f"no keep-alive: closed the connection after {closed} of {len(steps)} responses")


def _disconnect_mid_stream(server, keep: int = 64 * 1024) -> None:
    with server.connect() as conn:
        conn.send_raw(build_request("GET", BIG_BATCH, conn.host, close=False))
        got = 0
        while got < keep:
            chunk = conn.sock.recv(16 * 1024)
            assert chunk, f"server closed after {got} bytes"
            got += len(chunk)
        assert conn.reader.buf == b""
    # leaving the with block closes the socket with ~1 GiB unread


def _fd_total(fds: dict[int, list[str]]) -> int:
    return sum(len(v) for v in fds.values())


def _settled_fds(server, quiet: float = 0.5, timeout: float = 15.0) -> dict[int, list[str]]:
    """The tree's descriptors once their count has not changed for ``quiet`` seconds."""
    deadline = time.monotonic() + timeout
    last = server.fds()
    since = time.monotonic()
    while time.monotonic() < deadline:
        time.sleep(0.05)
        now = server.fds()
        if _fd_total(now) != _fd_total(last):
            last, since = now, time.monotonic()
        elif time.monotonic() - since >= quiet:
            return now
    return last


@pytest.mark.timeout(120)
def test_client_disconnect_mid_stream_leaks_nothing(server):
    """Read 64 KiB of a 1 GiB batch, close; the server serves on and its descriptors return
    to their baseline (checked over /proc/<pid>/fd of the server's whole process tree)."""
    _disconnect_mid_stream(server)  # warm-up: first use of big.bin, lazy imports, caches
    server.assert_alive()
    baseline = _settled_fds(server)
    for _ in range(3):
        _disconnect_mid_stream(server)
        server.assert_alive()
    started = time.monotonic()
    deadline = started + 15.0
    while True:
        now = server.fds()
        if _fd_total(now) <= _fd_total(baseline):
            print(f"{server.name}: descriptors back to {_fd_total(baseline)} {time.monotonic() - started:.2f}s after")
            break
        if time.monotonic() > deadline:
            before = collections.Counter(t for v in baseline.values() for t in v)
            after = collections.Counter(t for v in now.values() for t in v)
            pytest.fail(
                f"{server.name}: {_fd_total(now)} descriptors open 15 s after 3 disconnects, "
                f"baseline {_fd_total(baseline)}; new: {dict(after - before)}"
            )
        time.sleep(0.1)
    server.assert_alive()


def _settled_reads(server, quiet: float = 0.3, timeout: float = 20.0) -> int:
    """The tree's read-byte counter once it has not moved for ``quiet`` seconds."""
    deadline = time.monotonic() + timeout
    last, since = tree_read_bytes(server.pid), time.monotonic()
    while time.monotonic() < deadline:
        time.sleep(0.05)
        now = tree_read_bytes(server.pid)
        if now != last:
            last, since = now, time.monotonic()
        elif time.monotonic() - since >= quiet:
            break
    return last


@pytest.mark.timeout(60)
def test_client_disconnect_stops_the_stream(server):
    """After the client leaves, the server stops reading the batch's files: it does not stream
    the rest of a 1 GiB batch into the void (measured as the process tree's read bytes)."""
    _disconnect_mid_stream(server)  # warm-up
    before = _settled_reads(server)
    _disconnect_mid_stream(server)
    read = _settled_reads(server) - before
    print(f"{server.name}: read {read / MiB:.1f} MiB for a 1 GiB batch abandoned after 64 KiB")
    assert read < 256 * MiB, (
        f"{server.name}: the server read {read / MiB:.0f} MiB after the client had gone: "
        "it kept streaming the batch to a closed connection"
    )
    server.assert_alive()
