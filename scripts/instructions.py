#!/usr/bin/env python3
"""Instructions per request of ``axon serve`` under callgrind: a measure of the hot path's cost
that repeats on a busy machine, where timings do not.

    scripts/instructions.py                      # the axon on PYTHONPATH, 20,000 requests a kind
    scripts/instructions.py --src /other/src -n 5000
    scripts/instructions.py --kinds T1 --observe both     # with --metrics and a JSON access log

One worker (``--workers 0``) under ``valgrind --tool=callgrind``; one keep-alive connection, one
request at a time, so that each read of the server holds exactly one request. After a warm-up
the counters are zeroed, ``n`` requests of one kind are made, and the counters dumped; the
user-space instructions of the whole process, divided by ``n``, are printed for each kind.
"""

from __future__ import annotations

import argparse
import os
import re
import socket
import subprocess
import sys
import tempfile
import time

KINDS = {
    "health": "/api/health",
    "file8k": "/files/f8k.bin",
    "T1": "/api/stream-files?file1=f8k.bin",
    "file64k": "/files/f64k.bin",
    "T3": "/api/stream-files?file1=f64k.bin",
    "T4": "/api/stream-files?file1=f32k.bin&file2=f32k.bin",
    "file512k": "/files/f512k.bin",
    "B512k": "/api/stream-files?file1=f512k.bin",
    "B32": "/api/stream-files?" + "&".join(f"file{i}=s{i:02d}.bin" for i in range(1, 33)),
    "error404": "/api/stream-files?file1=missing.bin",
}
# The same batch as zip (CRCs known after the warm-up) and as tar, at their own URLs.
KINDS["B32zip"] = KINDS["B32"].replace("stream-files?", "stream-files.zip?")
KINDS["B32tar"] = KINDS["B32"].replace("stream-files?", "stream-files.tar?")
# Requests that never repeat (a data loader's distinct batches): a header that changes with each
# request makes every read new, so the server never answers one from a remembered answer.
for _kind in ("file8k", "T1", "T3", "B32"):
    KINDS[f"{_kind}_new"] = KINDS[_kind]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--src", help="the src directory to measure (default: the axon on PYTHONPATH)")
    parser.add_argument("-n", type=int, default=20000, help="requests of each kind (B32s: a quarter)")
    parser.add_argument("--kinds", default=",".join(KINDS), help=f"comma list of {', '.join(KINDS)} (default: all)")
    parser.add_argument("--observe", choices=tuple(OBSERVE), default="none",
                        help="what observes the requests: none (default), metrics, log (JSON access log), both")
    args = parser.parse_args()
    kinds = {name: KINDS[name] for name in args.kinds.split(",")}
    with tempfile.TemporaryDirectory() as tmp:
        root = os.path.join(tmp, "root")
        os.mkdir(root)
        for name, size in (("f8k.bin", 8192), ("f32k.bin", 32768), ("f64k.bin", 65536), ("f512k.bin", 524288)):
            with open(os.path.join(root, name), "wb") as f:
                f.write(os.urandom(size))
        for i in range(1, 33):
            with open(os.path.join(root, f"s{i:02d}.bin"), "wb") as f:
                f.write(os.urandom(4096))
        for name, per_request in measure(root, tmp, args.src, args.n, kinds, OBSERVE[args.observe]).items():
            print(f"{name:9s} {per_request:10.0f} instructions a request")


#: ``axon serve`` flags for each ``--observe``: the access log goes to the server's stdout, /dev/null.
OBSERVE = {
    "none": ["--no-access-log"],
    "metrics": ["--no-access-log", "--metrics"],
    "log": ["--access-log", "--json-logs"],
    "both": ["--access-log", "--json-logs", "--metrics"],
}


def measure(root: str, out: str, src: str | None, n: int, kinds: dict[str, str] = KINDS,
            observe: list[str] = OBSERVE["none"]) -> dict[str, float]:
    env = dict(os.environ)
    if src:
        env["PYTHONPATH"] = src
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    server = subprocess.Popen(
        ["valgrind", "--tool=callgrind", f"--callgrind-out-file={out}/cg.%p", sys.executable, "-m", "axon.cli",
         "serve", root, "--port", str(port), "--workers", "0", "--log-level", "warning", *observe],
        env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    counts = {name: n // 4 if name.startswith("B32") else n for name in kinds}
    try:
        sock = connect(port)
        buf = bytearray()
        requests = {name: f"GET {target} HTTP/1.1\r\nHost: x\r\n".encode() for name, target in kinds.items()}
        for name, request in requests.items():  # warm: caches filled, code specialised
            for i in range(300):
                exchange(sock, _read(name, request, i), buf)
        for name, request in requests.items():
            control(server.pid, "-z")
            for i in range(counts[name]):
                exchange(sock, _read(name, request, i), buf)
            control(server.pid, "-d", name)
        sock.close()
    finally:
        server.terminate()
        server.wait()
    totals = {}
    for file in os.listdir(out):
        if re.fullmatch(r"cg\.\d+\.\d+", file):
            with open(os.path.join(out, file)) as f:
                text = f.read()
            name = re.search(r"^desc: Trigger: .*?(\w+)$", text, re.M).group(1)  # type: ignore[union-attr]
            totals[name] = int(re.search(r"^(?:summary|totals): (\d+)", text, re.M).group(1))  # type: ignore[union-attr]
    return {name: totals[name] / counts[name] for name in kinds if name in totals}


def _read(name: str, request: bytes, i: int) -> bytes:
    """The bytes of the ``i``-th request of a kind: the same each time, or new (``_new``)."""
    return request + (b"X-Request: %d\r\n\r\n" % i if name.endswith("_new") else b"\r\n")


def connect(port: int) -> socket.socket:
    for _ in range(600):  # Python starts slowly under valgrind
        try:
            return socket.create_connection(("127.0.0.1", port))
        except OSError:
            time.sleep(0.5)
    raise SystemExit("the server did not start")


def exchange(sock: socket.socket, request: bytes, buf: bytearray) -> None:
    """Send ``request`` and read its whole response (by its Content-Length)."""
    sock.sendall(request)
    while b"\r\n\r\n" not in buf:
        buf += receive(sock)
    head, _, rest = bytes(buf).partition(b"\r\n\r\n")
    length = int(re.search(rb"(?i)content-length: *(\d+)", head).group(1))  # type: ignore[union-attr]
    while len(rest) < length:
        rest += receive(sock)
    buf[:] = rest[length:]


def receive(sock: socket.socket) -> bytes:
    data = sock.recv(65536)
    if not data:
        raise SystemExit("the server closed the connection")
    return data


def control(pid: int, *args: str) -> None:
    subprocess.run(["callgrind_control", *args, str(pid)], check=True, capture_output=True)


if __name__ == "__main__":
    main()
