#!/usr/bin/env python3
"""System calls per request of ``axon serve`` and of nginx, counted by ``strace -c``: what each
server asks of the kernel for the same request, beside ``scripts/instructions.py``'s count.

    scripts/syscalls.py                                   # F1,R1,T1_new,T3_new,health_new; axon and nginx
    scripts/syscalls.py --kinds F1_first,R1_first         # files asked for the first time
    scripts/syscalls.py --kinds F1 -n 4000 --servers axon --src /other/src

Each server runs one worker (axon ``--workers 0``, nginx as ``axon bench`` configures it, with
``open_file_cache``) on the same root as instructions.py's (the pool of 10,000 files of 4 KiB
and the example files). After the same warm-up as there, ``strace -c -f`` attaches to the worker
for ``n`` requests of one kind, sent on ``-c`` keep-alive connections at once (each asks again
when its answer is in, as wrk does), and the counts are divided by ``n``. The open-file caches'
revalidation windows are both 60 s (nginx's ``open_file_cache_valid`` of the bench; axon's
``--file-cache-valid``), so that the counts are a steady state's: at its default of 5 s axon
also resolves a drawn file's path again once per window (instructions.py's docstring).
nginx answers F1, R1 and T1/T3 with ``/files/`` of the same file, as ``axon bench`` asks it.
"""

from __future__ import annotations

import argparse
import os
import re
import selectors
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from instructions import (  # noqa: E402
    FIRST_SIGHT, KINDS, POOL_FILES, RANDOM_FILES, WARM, make_pool, pool_name, request_maker, single_request,
)

#: What nginx is asked instead of a batch of one file: the file itself (as axon bench asks it).
NGINX_TARGETS = {"T1": "/files/f8k.bin", "T3": "/files/f64k.bin", "health": "/api/health"}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--src", help="the src directory to measure (default: the axon on PYTHONPATH)")
    parser.add_argument("-n", type=int, default=5000, help="requests of each kind")
    parser.add_argument("-c", type=int, default=50, help="connections at once")
    parser.add_argument("--kinds", default="F1,R1,T1_new,T3_new,health_new")
    parser.add_argument("--servers", default="axon,nginx")
    args = parser.parse_args()
    kinds = args.kinds.split(",")
    with tempfile.TemporaryDirectory() as tmp:
        root = os.path.join(tmp, "root")
        os.mkdir(root)
        for name, size in (("f8k.bin", 8192), ("f64k.bin", 65536)):
            with open(os.path.join(root, name), "wb") as f:
                f.write(os.urandom(size))
        make_pool(root)
        for kind in kinds:
            if kind in FIRST_SIGHT:
                make_pool(root, f"{kind}/%05d.bin", args.n + WARM)
        time.sleep(2.1)  # settled: a file changed within 2 s is not kept in memory (file_cache.SETTLED_NS)
        for server in args.servers.split(","):
            for kind in kinds:
                counts = measure(server, root, tmp, args.src, kind, args.n, args.c)
                total = sum(counts.values())
                calls = ", ".join(f"{name} {n / args.n:.2f}" for name, n in sorted(counts.items(), key=lambda x: -x[1]))
                print(f"{server:5s} {kind:10s} {total / args.n:6.2f} system calls a request: {calls}", flush=True)


def measure(server: str, root: str, tmp: str, src: str | None, kind: str, n: int, conns: int) -> dict[str, int]:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    procs: list[subprocess.Popen] = []
    try:
        worker = start(server, root, tmp, src, port, procs)
        make = maker(server, kind)
        warm(port, server, kind, make)
        out = os.path.join(tmp, f"strace.{server}.{kind}")
        tracer = subprocess.Popen(["strace", "-c", "-f", "-o", out, "-p", str(worker)],
                                  stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        procs.append(tracer)
        time.sleep(1.0)  # attached to every thread
        drive(port, lambda i: make(WARM + i), n, conns)
        tracer.send_signal(signal.SIGINT)
        tracer.wait(timeout=30)
        return parse(Path(out).read_text())
    finally:
        for proc in procs:
            proc.terminate()
            proc.wait(timeout=30)


def start(server: str, root: str, tmp: str, src: str | None, port: int, procs: list[subprocess.Popen]) -> int:
    """The server on ``port`` (added to ``procs`` at once, to be stopped), and the pid of the
    process that answers (nginx's one worker)."""
    if server == "axon":
        env = dict(os.environ, AXON_NO_LOOP_LAG="1")
        if src:
            env["PYTHONPATH"] = src
        proc = subprocess.Popen(
            [sys.executable, "-m", "axon.cli", "serve", root, "--port", str(port), "--workers", "0",
             "--log-level", "warning", "--no-access-log", "--file-cache-valid", "60"],
            env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        procs.append(proc)
        wait_for(port)
        return proc.pid
    from axon.bench.nginx import static_command
    command = static_command(Path(tmp) / f"nginx.{port}", port, Path(root))
    proc = subprocess.Popen(command.argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    procs.append(proc)
    wait_for(port)
    for _ in range(100):  # the master listens before it forks its worker
        children = Path(f"/proc/{proc.pid}/task/{proc.pid}/children").read_text().split()
        if children:
            return int(children[0])
        time.sleep(0.1)
    raise SystemExit("nginx started no worker")


def maker(server: str, kind: str):
    base = kind.removesuffix("_new")
    if server == "nginx" and kind in FIRST_SIGHT:
        return lambda i: single_request("F1", f"{kind}/{i:05d}.bin")
    if server == "nginx" and kind not in RANDOM_FILES:
        head = f"GET {NGINX_TARGETS[base]} HTTP/1.1\r\nHost: x\r\n".encode()
        return lambda i: head + b"X-Request: %d\r\n\r\n" % i
    if server == "nginx":  # a random pool file, one per request
        import random

        rng = random.Random(1)
        return lambda i: single_request("F1", pool_name(rng.randrange(POOL_FILES)))
    return request_maker(kind, KINDS[kind], seed=1)


def warm(port: int, server: str, kind: str, make) -> None:
    """As instructions.py warms: the pool read four times over in batches, each file's URL twice
    (nginx: each file's URL four times)."""
    reqs: list[bytes] = []
    if kind in RANDOM_FILES and server == "nginx":
        reqs += [single_request("F1", pool_name(i % POOL_FILES)) for i in range(4 * POOL_FILES)]
    elif kind in RANDOM_FILES:
        for i in range(4 * POOL_FILES // 32):
            names = "&".join(f"file{k}={pool_name((i * 32 + k) % POOL_FILES)}" for k in range(32))
            reqs.append(f"GET /api/stream-files?{names} HTTP/1.1\r\nHost: x\r\n\r\n".encode())
        reqs += [single_request(kind, pool_name(i % POOL_FILES)) for i in range(2 * POOL_FILES)]
    reqs += [make(i) for i in range(WARM)]
    drive(port, reqs.__getitem__, len(reqs), 8)


def drive(port: int, make, n: int, conns: int) -> None:
    """``n`` requests (``make(i)``), on ``conns`` keep-alive connections each asking again as soon
    as its answer (read by its Content-Length) is in."""
    sel = selectors.DefaultSelector()
    sent = done = 0
    for _ in range(min(conns, n)):
        sock = socket.create_connection(("127.0.0.1", port))
        sock.setblocking(False)
        sock.send(make(sent))
        sent += 1
        sel.register(sock, selectors.EVENT_READ, bytearray())
    deadline = time.monotonic() + 600
    while done < n:
        if time.monotonic() > deadline:
            raise SystemExit("the server stopped answering")
        for key, _ in sel.select(5):
            sock, buf = key.fileobj, key.data
            data = sock.recv(1 << 20)
            if not data:
                raise SystemExit("the server closed a connection")
            buf += data
            while True:
                end = buf.find(b"\r\n\r\n")
                if end < 0:
                    break
                length = int(re.search(rb"(?i)content-length: *(\d+)", buf[:end]).group(1))
                if len(buf) < end + 4 + length:
                    break
                del buf[: end + 4 + length]
                done += 1
                if sent < n:
                    sock.send(make(sent))
                    sent += 1
    for key in list(sel.get_map().values()):
        key.fileobj.close()
    sel.close()


def wait_for(port: int) -> None:
    for _ in range(200):
        try:
            socket.create_connection(("127.0.0.1", port)).close()
            return
        except OSError:
            time.sleep(0.1)
    raise SystemExit("the server did not start")


def parse(text: str) -> dict[str, int]:
    """``strace -c``'s table as {system call: calls}."""
    counts = {}
    for line in text.splitlines():
        fields = line.split()
        if len(fields) >= 5 and fields[0][0].isdigit() and fields[-1] != "total":
            counts[fields[-1]] = int(fields[3])
    return counts


if __name__ == "__main__":
    main()
