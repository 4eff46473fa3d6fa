#!/usr/bin/env python3
"""Instructions per request of ``axon serve`` under callgrind: a measure of the hot path's cost
that repeats on a busy machine, where timings do not.

    scripts/instructions.py                      # the axon on PYTHONPATH, 20,000 requests a kind
    scripts/instructions.py --src /other/src -n 5000
    scripts/instructions.py --kinds T1 --observe both     # with --metrics and a JSON access log
    scripts/instructions.py --kinds T1_new,health_new,F1,R32   # real traffic: nothing repeats
    scripts/instructions.py --kinds R64,R256 --file-cache-valid 0   # every draw a revalidation
    scripts/instructions.py --kinds R64_first,R256_first            # every draw a first open

One worker (``--workers 0``) under ``valgrind --tool=callgrind``; one keep-alive connection, one
request at a time, so that each read of the server holds exactly one request. After a warm-up
the counters are zeroed, ``n`` requests of one kind are made, and the counters dumped; the
user-space instructions of the whole process, divided by ``n``, are printed for each kind.
F1, R1, R32, R64 and R256 ask for one file (``/files/``), a batch of one, of 32, 64 or 256 drawn at
random, for every request, from a pool of 10,000 files of 4 KiB made in the temporary root (as
``axon bench``'s F1, R1 and R32 do); ``R64_first`` and ``R256_first`` draw theirs from a pool of
10,000 of their own that no request named before, each file once (a data loader's first epoch);
with ``--file-cache-valid 0`` every draw of R64 and R256 resolves its path again (a long epoch,
where a file comes back more than ``valid`` seconds after its last draw); the ``_new`` kinds
send their request with a header that changes every time. Before them, the warm-up reads the
whole pool four times over, in batches (and, for F1 and R1, each file's URL three times): a ``wrk``
run of seconds draws each file many times, so what it measures is the steady state of a pool the
server has seen, not first opens. The draws
are the same in every run (a fixed seed), so that two runs compare.
"""

from __future__ import annotations

import argparse
import os
import random
import re
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable

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
for _kind in ("health", "file8k", "T1", "T3", "B32"):
    KINDS[f"{_kind}_new"] = KINDS[_kind]
# Files drawn at random from the pool for every request (axon bench's names and layout).
POOL_FILES, POOL_PER_DIR, POOL_FILE_SIZE = 10_000, 1_000, 4096
RANDOM_FILES = {"F1": 1, "R1": 1, "R32": 32, "R64": 64, "R256": 256}
KINDS["F1"] = "/files/<a random pool file>"
KINDS["R1"] = "/api/stream-files?file1=<a random pool file>"
# The first sight of a file: each request names a file of a pool of its own that no request named
# before (open, stat, plan, frame: what a draw costs the first time, or once it left the caches).
FIRST_SIGHT = {"F1_first": "F1", "R1_first": "R1"}
KINDS["F1_first"] = "/files/<a file not asked before>"
KINDS["R1_first"] = "/api/stream-files?file1=<a file not asked before>"
for _count in (32, 64, 256):
    KINDS[f"R{_count}"] = f"/api/stream-files?file1=<a random pool file>&... ({_count} distinct)"
# Batches of files no request named before: a pool of the kind's own, each file drawn once.
FIRST_BATCH = {"R64_first": 64, "R256_first": 256}
for _name, _count in FIRST_BATCH.items():
    KINDS[_name] = f"/api/stream-files?file1=<a file not asked before>&... ({_count})"
#: Requests of a FIRST_BATCH kind before its counted ones (its pool holds POOL_FILES files).
WARM_FIRST_BATCH = 4


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--src", help="the src directory to measure (default: the axon on PYTHONPATH)")
    parser.add_argument("-n", type=int, default=20000, help="requests of each kind (B32s: a quarter)")
    parser.add_argument("--kinds", default=",".join(KINDS), help=f"comma list of {', '.join(KINDS)} (default: all)")
    parser.add_argument("--observe", choices=tuple(OBSERVE), default="none",
                        help="what observes the requests: none (default), metrics, log (JSON access log), both")
    parser.add_argument("--file-cache-valid", type=float, default=None, metavar="SECONDS",
                        help="the server's --file-cache-valid (default: VALID_UNDER_CALLGRIND; 0: every "
                             "use of a cached file resolves its path again)")
    parser.add_argument("--callgrind-out", metavar="DIR",
                        help="keep callgrind's dumps here (one a kind) for callgrind_annotate; default: deleted")
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
        if any(name in RANDOM_FILES for name in kinds):
            make_pool(root)
        for name in kinds:
            if name in FIRST_SIGHT:
                make_pool(root, f"{name}/%05d.bin", args.n + WARM)
            if name in FIRST_BATCH:
                make_pool(root, f"{name}/%s.bin", split=True)
        valid = VALID_UNDER_CALLGRIND if args.file_cache_valid is None else args.file_cache_valid
        out = args.callgrind_out or tmp
        for name, per_request in measure(root, out, args.src, args.n, kinds, OBSERVE[args.observe], valid).items():
            files = RANDOM_FILES.get(name) or FIRST_BATCH.get(name) or 0
            per_file = f" ({per_request / files:8.0f} a file)" if files > 1 else ""
            print(f"{name:10s} {per_request:10.0f} instructions a request{per_file}")


#: ``axon serve`` flags for each ``--observe``: the access log goes to the server's stdout, /dev/null.
OBSERVE = {
    "none": ["--no-access-log"],
    "metrics": ["--no-access-log", "--metrics"],
    "log": ["--access-log", "--json-logs"],
    "both": ["--access-log", "--json-logs", "--metrics"],
}


#: The open-file cache's ``--file-cache-valid`` here. Under callgrind the server runs some fifty
#: times slower: a file drawn once a second at full speed is drawn once a minute here, and with
#: the default 5 s every draw would resolve its path again (the 1-in-17 of a wrk run at 35k
#: requests a second would become every one). Scaled up, a draw resolves its path about as often
#: per request as at full speed.
VALID_UNDER_CALLGRIND = 250.0
#: ``--file-cache-inactive`` here, scaled as ``valid`` is: at the default 60 s, files warmed minutes
#: before (the pool's warm-up takes that long under callgrind) would be closed as idle, and every
#: draw would open its file anew.
INACTIVE_UNDER_CALLGRIND = 3000.0


def measure(root: str, out: str, src: str | None, n: int, kinds: dict[str, str] = KINDS,
            observe: list[str] = OBSERVE["none"], valid: float = VALID_UNDER_CALLGRIND) -> dict[str, float]:
    env = dict(os.environ)
    if src:
        env["PYTHONPATH"] = src
    # The loop-lag timer fires 50 times a wall-clock second, whatever the traffic: under
    # callgrind's slowdown (and a busy machine's) its fires would be counted as the requests'.
    env["AXON_NO_LOOP_LAG"] = "1"
    # A loop turn's budget of batch work is wall-clock time too: callgrind's slowdown would
    # make a request yield turns it does not yield outside it (axon.pace).
    env["AXON_TURN_BUDGET"] = "0.1"
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    # Room for every file asked, as nginx's open_file_cache has in a bench (POOL_FILES + 1024), as
    # far as half the open-files limit allows (the rest: see the warm-up's order).
    files_cached = POOL_FILES + 1024 + sum(n + WARM for name in kinds if name in FIRST_SIGHT)
    server = subprocess.Popen(
        ["valgrind", "--tool=callgrind", f"--callgrind-out-file={out}/cg.%p", sys.executable, "-m", "axon.cli",
         "serve", root, "--port", str(port), "--workers", "0", "--log-level", "warning",
         "--file-cache-valid", str(valid), "--file-cache-inactive", str(INACTIVE_UNDER_CALLGRIND),
         "--file-cache", str(files_cached), *observe],
        env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    counts = {name: request_count(name, n) for name in kinds}
    try:
        sock = connect(port)
        buf = bytearray()
        requests = {name: request_maker(name, target, seed=1) for name, target in kinds.items()}
        # The pool's files in a new order drawn for each pass: the open-file cache holds at most
        # half the open-files limit (10,000 here, as many as the pool; a few less under valgrind,
        # which keeps some descriptors), and passes in one order over more files than it holds
        # would evict each file just before it is asked again.
        rng = random.Random(2)
        order = [k for _ in range(4) for k in rng.sample(range(POOL_FILES), POOL_FILES)]
        if any(name in RANDOM_FILES for name in kinds):
            for i in range(4 * POOL_FILES // 32):  # every pool file four times: seen, read, watched, trusted
                names = "&".join(f"file{k}={pool_name(order[i * 32 + k])}" for k in range(32))
                exchange(sock, f"GET /api/stream-files?{names} HTTP/1.1\r\nHost: x\r\n\r\n".encode(), buf)
        for name, make in requests.items():
            if name in ("F1", "R1"):
                # Each file's URL three times, right before (as a bench's burst warms its scenario,
                # drawing each file some ten times): seen, its head remembered, recalled. The heads
                # of F1 and R1 together (20,000) are more than a worker remembers (shortcuts.HEADS),
                # as they are when a bench runs one after the other.
                for i in range(3 * POOL_FILES):
                    exchange(sock, single_request(name, pool_name(order[i])), buf)
            for i in range(WARM_FIRST_BATCH if name in FIRST_BATCH else WARM):  # warm: caches filled, code specialised (a first sight's own files)
                exchange(sock, make(i), buf)
            control(server.pid, "-z")
            warm = WARM_FIRST_BATCH if name in FIRST_BATCH else WARM
            for i in range(warm, warm + counts[name]):
                exchange(sock, make(i), buf)
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


#: Requests of each kind before its counted ones.
WARM = 300


def request_count(name: str, n: int) -> int:
    """How many requests of kind ``name`` are counted for ``-n``: a batch of 32 files a quarter of
    ``n``, larger batches fewer in proportion; a FIRST_BATCH kind as many as its pool holds."""
    batch = 32 if name.startswith("B32") else RANDOM_FILES.get(name) or FIRST_BATCH.get(name) or 1
    count = max(1, n * 8 // batch) if batch >= 32 else n
    if name in FIRST_BATCH:
        count = min(count, POOL_FILES // batch - WARM_FIRST_BATCH)
    return count


def request_maker(name: str, target: str, seed: int | None = None) -> Callable[[int], bytes]:
    """The bytes of the ``i``-th request of a kind: the same each time, new (``_new``: a header
    that changes), naming files drawn at random from the pool (F1, R32), or the ``i``-th file of
    a pool of the kind's own (``_first``)."""
    if name in FIRST_SIGHT:
        return lambda i: single_request(FIRST_SIGHT[name], f"{name}/{i:05d}.bin")
    if name in FIRST_BATCH:
        count = FIRST_BATCH[name]
        order = random.Random(seed).sample(range(POOL_FILES), POOL_FILES)
        return lambda i: single_request(name, *(pool_name(k, name) for k in order[i * count:(i + 1) * count]))
    if name in RANDOM_FILES:
        rng, count = random.Random(seed), RANDOM_FILES[name]

        def drawn(i: int) -> bytes:
            return single_request(name, *(pool_name(k) for k in rng.sample(range(POOL_FILES), count)))

        return drawn
    head = f"GET {target} HTTP/1.1\r\nHost: x\r\n".encode()
    if name.endswith("_new"):
        return lambda i: head + b"X-Request: %d\r\n\r\n" % i
    return lambda i: head + b"\r\n"


def single_request(name: str, *names: str) -> bytes:
    """The request of kind ``name`` for pool files ``names``: F1 the first's ``/files/`` URL, the
    others a batch of them."""
    path = "/files/" + names[0] if name == "F1" else "/api/stream-files?" + "&".join(
        f"file{k}={n}" for k, n in enumerate(names, 1))
    return f"GET {path} HTTP/1.1\r\nHost: x\r\n\r\n".encode()


def pool_name(index: int, top: str = "pool") -> str:
    return f"{top}/{index // POOL_PER_DIR:02d}/{index:05d}.bin"


def make_pool(root: str, names: str | None = None, count: int | None = None, split: bool = False) -> None:
    """``count`` files (POOL_FILES unless given) of POOL_FILE_SIZE random bytes: the pool (at most
    POOL_PER_DIR to a directory), or named ``names % index`` (``split``: ``names % "DD/NNNNN"``,
    in directories as the pool's)."""
    for index in range(POOL_FILES if count is None else count):
        if names is None:
            name = pool_name(index)
        else:
            name = names % (f"{index // POOL_PER_DIR:02d}/{index:05d}" if split else index)
        path = os.path.join(root, name)
        os.makedirs(os.path.dirname(path), exist_ok=True)
        with open(path, "wb") as f:
            f.write(os.urandom(POOL_FILE_SIZE))


def connect(port: int) -> socket.socket:
    for _ in range(1800):  # Python starts slowly under valgrind, more so on a busy machine
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
