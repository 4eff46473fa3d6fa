"""``axon serve`` as a process tree: graceful shutdown, a crashed worker replaced, memory flat
under hundreds of slow readers, descriptors returned. Each test runs the real command."""

from __future__ import annotations

import os
import signal
import socket
import threading
import time

import psutil
import pytest
from conftest import (
    Client,
    Closed,
    batch_target,
    big_content,
    get,
    slow_socket,
    wait_for,
)

pytestmark = pytest.mark.slow  # pre-forked worker processes: signals, slow readers, restarts

MiB = 1024 * 1024


def wait_workers(spawned, n: int) -> list[int]:
    assert wait_for(lambda: len(spawned.workers()) == n, timeout=10), spawned.log()
    return spawned.workers()


def test_sigterm_lets_a_large_download_finish(spawn, root) -> None:
    server = spawn("--workers", "1", "--graceful-timeout", "20")
    big = big_content(root)
    with Client(server.port) as idle:  # an idle keep-alive connection: closed at once
        assert idle.get("/api/health").status == 200
        sock = slow_socket(server.port)
        c = Client.__new__(Client)
        c.sock, c.buf = sock, b""
        c.send(b"GET /files/big.bin HTTP/1.1\r\n\r\n")
        first = c._exact(256 * 1024)
        os.kill(server.proc.pid, signal.SIGTERM)
        assert idle.is_closed(timeout=5)
        # new connections are refused while the download carries on
        assert wait_for(lambda: _refused(server.port), timeout=5)
        rest = c.buf
        while len(first) + len(rest) < len(big) + 1000:
            try:
                data = sock.recv(64 * 1024)
            except (TimeoutError, ConnectionResetError):
                break
            if not data:
                break
            rest += data
            time.sleep(0.001)  # a slow reader: the response is in flight for a while
        sock.close()
    head, _, body = (first + rest).partition(b"\r\n\r\n")
    assert head.startswith(b"HTTP/1.1 200")
    assert body == big
    assert server.proc.wait(10) == 0
    assert "stopping: SIGTERM" in server.log()


def _refused(port: int) -> bool:
    try:
        socket.create_connection(("127.0.0.1", port), timeout=1).close()
    except ConnectionRefusedError:
        return True
    return False


def test_graceful_timeout_cuts_what_does_not_finish(spawn) -> None:
    server = spawn("--workers", "1", "--graceful-timeout", "1")
    sock = slow_socket(server.port, rcvbuf=4096)
    try:
        sock.sendall(b"GET /files/big.bin HTTP/1.1\r\n\r\n")
        sock.recv(1000)
        started = time.monotonic()
        os.kill(server.proc.pid, signal.SIGTERM)
        assert server.proc.wait(10) == 0  # never read: cut after the graceful timeout
        assert 0.8 < time.monotonic() - started < 6
    finally:
        sock.close()


def test_a_killed_worker_is_replaced_and_the_port_keeps_answering(spawn) -> None:
    server = spawn("--workers", "2")
    before = wait_workers(server, 2)
    failures = []
    stop = threading.Event()

    def hammer() -> None:
        while not stop.is_set():
            try:
                assert get(server.port, "/api/health", timeout=3).status == 200
            except (OSError, Closed, AssertionError) as exc:
                failures.append(exc)
            time.sleep(0.01)

    thread = threading.Thread(target=hammer)
    thread.start()
    try:
        time.sleep(0.2)
        os.kill(before[0], signal.SIGKILL)
        assert wait_for(lambda: len(set(server.workers()) - set(before)) == 1, timeout=10), server.log()
        time.sleep(0.3)
    finally:
        stop.set()
        thread.join()
    assert not failures, failures[:3]
    assert before[1] in server.workers()
    assert "killed by SIGKILL" in server.log()
    assert get(server.port, "/api/health").status == 200


@pytest.mark.parametrize("copy", [False, True], ids=["sendfile", "copy"])
def test_memory_stays_flat_with_hundreds_of_slow_readers(spawn, copy) -> None:
    server = spawn("--workers", "1", env={"AXON_NO_SENDFILE": "1"} if copy else None)
    (pid,) = wait_workers(server, 1)
    worker = psutil.Process(pid)
    for target in ("/files/big.bin", batch_target(["mid.bin", "big.bin"])):
        with Client(server.port) as c:
            c.get(target)
    baseline = worker.memory_info().rss
    n = 300
    socks = []
    try:
        for i in range(n):
            s = slow_socket(server.port, rcvbuf=8 * 1024)
            target = "/files/big.bin" if i % 2 else batch_target(["mid.bin", "big.bin"])
            s.sendall(f"GET {target} HTTP/1.1\r\n\r\n".encode())
            s.setblocking(False)
            socks.append(s)
        peak = 0
        received = 0
        deadline = time.monotonic() + 3.0
        while time.monotonic() < deadline:
            for s in socks:  # each reads a little, slowly
                try:
                    received += len(s.recv(2048))
                except BlockingIOError:
                    pass
            peak = max(peak, worker.memory_info().rss)
            time.sleep(0.02)
        assert get(server.port, "/api/health", timeout=5).status == 200
    finally:
        for s in socks:
            s.close()
    growth = peak - baseline
    assert received > n * 8 * 1024  # they all got data
    print(f"RSS growth with {n} slow readers ({'copy' if copy else 'sendfile'}): {growth / MiB:.1f} MiB")
    assert growth < 32 * MiB, f"RSS grew {growth / MiB:.1f} MiB with {n} slow readers"


def test_descriptors_return_to_baseline_in_the_worker(spawn) -> None:
    server = spawn("--workers", "1")
    (pid,) = wait_workers(server, 1)

    def fds() -> int:
        return len(os.listdir(f"/proc/{pid}/fd"))

    with Client(server.port) as c:
        c.get(batch_target(["big.bin", "mid.bin", "a.txt", "b.bin"]))  # now in the open-file cache
    time.sleep(0.2)
    baseline = fds()
    for i in range(40):
        s = slow_socket(server.port)
        s.sendall(f"GET {batch_target(['big.bin', 'mid.bin', 'a.txt', 'b.bin'])} HTTP/1.1\r\n\r\n".encode())
        s.recv(4096)
        if i % 2:
            s.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, b"\x01\x00\x00\x00\x00\x00\x00\x00")
        s.close()
    assert wait_for(lambda: fds() <= baseline, timeout=10), (fds(), baseline, os.listdir(f"/proc/{pid}/fd"))


def test_ctrl_c_stops_the_whole_tree(spawn) -> None:
    server = spawn("--workers", "2")
    workers = wait_workers(server, 2)
    os.killpg(server.proc.pid, signal.SIGINT)  # what a terminal sends to the foreground group
    assert server.proc.wait(10) == 0
    assert wait_for(lambda: not any(psutil.pid_exists(p) and psutil.Process(p).status() != psutil.STATUS_ZOMBIE
                                    for p in workers), timeout=5)


def _listening(pid: int, port: int) -> bool:
    try:
        conns = psutil.Process(pid).net_connections(kind="tcp")
    except psutil.Error:
        return False
    return any(c.status == psutil.CONN_LISTEN and c.laddr.port == port for c in conns)


def accepted_per_worker(server, workers: list[int]) -> dict[int, int]:
    """How many of the port's established connections each worker holds."""
    counts = {}
    for pid in workers:
        conns = psutil.Process(pid).net_connections(kind="tcp")
        counts[pid] = sum(c.status == psutil.CONN_ESTABLISHED and c.laddr.port == server.port for c in conns)
    return counts


def test_reuse_port_gives_every_worker_connections(spawn) -> None:
    server = spawn("--workers", "2", "--reuse-port")
    workers = wait_workers(server, 2)
    # Each worker listens on a socket of its own; the supervisor only holds the port.
    assert wait_for(lambda: all(_listening(pid, server.port) for pid in workers), timeout=10), server.log()
    assert not _listening(server.proc.pid, server.port)
    clients = [Client(server.port) for _ in range(32)]
    try:
        for c in clients:
            assert c.get("/api/health").status == 200
        counts = accepted_per_worker(server, workers)
    finally:
        for c in clients:
            c.close()
    # The kernel hashes each connection to one queue: all 32 on one worker is a 2**-31 chance.
    assert sum(counts.values()) == 32 and min(counts.values()) > 0, counts


def test_reuse_port_a_killed_worker_is_replaced_on_the_same_port(spawn) -> None:
    server = spawn("--workers", "2", "--reuse-port")
    before = wait_workers(server, 2)
    os.kill(before[0], signal.SIGKILL)
    assert wait_for(lambda: len(set(server.workers()) - set(before)) == 1, timeout=10), server.log()
    (new,) = set(server.workers()) - set(before)
    assert wait_for(lambda: _listening(new, server.port), timeout=10), server.log()
    for _ in range(8):
        assert get(server.port, "/api/health").status == 200


def test_each_worker_sees_a_change_through_a_watch_of_its_own(spawn, tmp_path) -> None:
    """The App is built once, before the fork; each worker's open-file cache is its own, with
    the kernel's watch of its own: after a file is edited in place, every worker (every one of
    many connections, spread by --reuse-port) sends the new bytes, none a copy it kept."""
    (tmp_path / "f.txt").write_bytes(b"old!")
    server = spawn("--workers", "2", "--reuse-port", serve_root=tmp_path)
    wait_workers(server, 2)
    time.sleep(2.5)  # the file settles: its bytes may then be kept in memory and trusted
    clients = [Client(server.port) for _ in range(16)]
    try:
        for _ in range(3):  # seen, kept, trusted: on both workers
            assert all(c.get("/files/f.txt").body == b"old!" for c in clients)
        with open(tmp_path / "f.txt", "r+b") as f:
            f.write(b"new!")  # in place: the same size, the same inode
        assert [c.get("/files/f.txt").body for c in clients] == [b"new!"] * len(clients)
    finally:
        for c in clients:
            c.close()
