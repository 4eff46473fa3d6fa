"""Files that change under the server, and descriptors that must all come back.

Axon's server caches no open file, no stat and no part header that depends on a file's content:
every request opens and ``fstat``s what it sends. So a file modified or replaced between two
requests is seen by the second one; a file *replaced* (renamed over) while it streams is sent
whole as it was (the response holds the old inode open); a file *truncated* while it streams
aborts the connection, so the client sees a body shorter than its Content-Length and never a
short part passed off as complete.
"""

from __future__ import annotations

import os
import random
import socket
import time
from pathlib import Path

import pytest
from conftest import Client, Closed, batch_target, parse_multipart, slow_client, wait_for, shared_app

from axon.server.config import ServerConfig

SIZE = 16 * 1024 * 1024


@pytest.fixture
def live_root(tmp_path: Path) -> Path:
    base = tmp_path / "live"
    base.mkdir()
    (base / "grow.bin").write_bytes(random.Random(7).randbytes(SIZE))
    (base / "small.txt").write_bytes(b"version 1\n")
    return base


@pytest.fixture(params=["sendfile", "copy"])
def sendfile(request) -> bool:
    return request.param == "sendfile"


def read_head(c: Client) -> int:
    assert c._line().startswith(b"HTTP/1.1 200")
    length = None
    while line := c._line():
        name, _, value = line.decode().partition(":")
        if name.lower() == "content-length":
            length = int(value)
    assert length is not None
    return length


def read_until_closed(c: Client) -> int:
    got = len(c.buf)
    c.buf = b""
    while True:
        try:
            data = c.sock.recv(1 << 20)
        except (TimeoutError, ConnectionResetError):
            return got
        if not data:
            return got
        got += len(data)


@pytest.mark.parametrize("target", ["/files/grow.bin", batch_target(["small.txt", "grow.bin"])])
def test_a_file_truncated_while_streaming_aborts_the_connection(serve, live_root, sendfile, target) -> None:
    server = serve(shared_app(live_root), sendfile=sendfile)
    c = slow_client(server.port)
    try:
        c.send(f"GET {target} HTTP/1.1\r\n\r\n".encode())
        length = read_head(c)
        c._exact(256 * 1024)
        os.truncate(live_root / "grow.bin", 300 * 1024)
        got = 256 * 1024 + read_until_closed(c)
    finally:
        c.close()
    assert got < length  # cut short, and the connection ended: the client can tell


def test_a_file_replaced_while_streaming_is_sent_whole_as_it_was(serve, live_root, sendfile) -> None:
    server = serve(shared_app(live_root), sendfile=sendfile)
    old = (live_root / "grow.bin").read_bytes()
    c = slow_client(server.port)
    try:
        c.send(b"GET /files/grow.bin HTTP/1.1\r\n\r\n")
        length = read_head(c)
        c._exact(256 * 1024)
        new = live_root / "new.bin"
        new.write_bytes(b"replaced\n")
        os.replace(new, live_root / "grow.bin")
        body = old[: 256 * 1024] + c._exact(length - 256 * 1024)
        assert body == old
        # the next request on the same connection sees the new file
        assert c.get("/files/grow.bin").body == b"replaced\n"
    finally:
        c.close()


def test_a_file_modified_between_requests_is_seen_by_the_next_one(serve, live_root) -> None:
    server = serve(shared_app(live_root))
    with Client(server.port) as c:
        assert c.get("/files/small.txt").body == b"version 1\n"
        (live_root / "small.txt").write_bytes(b"version two, longer\n")
        assert c.get("/files/small.txt").body == b"version two, longer\n"
        resp = c.get(batch_target(["small.txt"]))
        assert parse_multipart(resp)[0][1] == b"version two, longer\n"
        os.remove(live_root / "small.txt")
        assert c.get("/files/small.txt").status == 404


def fd_count() -> int:
    return len(os.listdir("/proc/self/fd"))


def test_descriptors_come_back_after_clients_leave_mid_stream(serve, root, sendfile) -> None:
    server = serve(sendfile=sendfile)
    targets = ["/files/big.bin", batch_target(["big.bin", "mid.bin", "a.txt"]), batch_target(["mid.bin"] * 40)]
    with Client(server.port) as c:
        for target in targets:  # the open-file cache keeps these three open from now on
            c.get(target)
    time.sleep(0.2)
    baseline = fd_count()
    for i in range(30):
        c = slow_client(server.port)
        c.send(f"GET {targets[i % 3]} HTTP/1.1\r\n\r\n".encode())
        try:
            c._exact(100 * 1024)
        except Closed:
            pass
        if i % 2:  # half of them reset the connection
            c.sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, b"\x01\x00\x00\x00\x00\x00\x00\x00")
        c.close()
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline and (fd_count() > baseline or server.call(lambda: len(server.worker.connections))):
        time.sleep(0.05)
    assert fd_count() <= baseline, sorted(os.listdir("/proc/self/fd"))


def test_the_open_file_cache_shares_descriptors_and_can_be_turned_off(serve, live_root) -> None:
    def files_open() -> int:
        return sum(1 for n in os.listdir("/proc/self/fd") if os.path.realpath(f"/proc/self/fd/{n}").startswith(f"{os.path.realpath(live_root)}/"))

    cached = serve(shared_app(live_root))
    with Client(cached.port) as c:
        for _ in range(3):
            assert c.get(batch_target(["small.txt", "small.txt", "grow.bin"])).status == 200
    assert files_open() == 2  # kept for the next request: one per distinct file
    cached.stop()
    assert files_open() == 0  # a stopped worker gives them back
    uncached = serve(shared_app(live_root, ServerConfig(file_cache=0)), file_cache=0)
    with Client(uncached.port) as c:
        assert c.get(batch_target(["small.txt", "grow.bin"])).status == 200
    assert files_open() == 0


def test_a_repointed_symlink_is_seen_within_the_validity_window(serve, live_root) -> None:
    (live_root / "v1.txt").write_bytes(b"one")
    (live_root / "v2.txt").write_bytes(b"two")
    os.symlink("v1.txt", live_root / "current.txt")
    server = serve(shared_app(live_root, ServerConfig(file_cache_valid=0.2)), file_cache_valid=0.2)
    with Client(server.port) as c:
        assert c.get("/files/current.txt").body == b"one"
        os.remove(live_root / "current.txt")
        os.symlink("v2.txt", live_root / "current.txt")
        assert wait_for(lambda: c.get("/files/current.txt").body == b"two", timeout=2)
