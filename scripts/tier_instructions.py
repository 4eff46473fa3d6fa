#!/usr/bin/env python3
"""Instructions per request of ``axon serve`` from the objects' disk tier beside the same files
from a local directory, under callgrind (as :mod:`instructions`): where a warm tier hit costs
more than a local file.

    scripts/tier_instructions.py                      # 2,000 requests a kind
    scripts/tier_instructions.py -n 500 --kinds B32,F512
    scripts/tier_instructions.py --profile 20         # no callgrind: py-spy of each server for 20 s

A SeaweedFS on loopback holds 1,000 objects of 4 KiB and 64 of 512 KiB under a prefix; the same
bytes are written to a local directory. Two ``axon serve`` (``--workers 0``): the directory, and
the bucket with its disk tier (``--object-cache 0 --object-disk-cache``, the listing valid for
the whole run). Both are warmed the same way (every object, in batches and singly, until the
tier holds each and both caches trust them), then each kind is counted on each:
``B32`` a batch of 32 drawn at random for every request, ``B32_same`` one batch of 32 again and
again, ``F512`` ``/files/`` of a random 512 KiB object.
"""

from __future__ import annotations

import argparse
import os
import random
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from instructions import INACTIVE_UNDER_CALLGRIND, VALID_UNDER_CALLGRIND, connect, control, exchange

from axon.bench import seaweed
from axon.bench.objects import PREFIX, payload, upload
from axon.bench.procs import free_port

SMALL, MID = 1000, 64
KINDS = ("B32", "B32_same", "F512")


def request(kind: str, rng: random.Random) -> bytes:
    if kind == "B32":
        names = [f"s/{rng.randrange(SMALL):05d}.bin" for _ in range(32)]
    elif kind == "B32_same":
        names = [f"s/{i:05d}.bin" for i in range(32)]
    else:
        return f"GET /files/m/{rng.randrange(MID):05d}.bin HTTP/1.1\r\nHost: x\r\n\r\n".encode()
    query = "&".join(f"f{i}={n}" for i, n in enumerate(names))
    return f"GET /api/stream-files?{query} HTTP/1.1\r\nHost: x\r\n\r\n".encode()


def start(argv: list[str], env: dict[str, str], out: str, callgrind: bool) -> subprocess.Popen:
    tool = ["valgrind", "--tool=callgrind", f"--callgrind-out-file={out}/cg.%p"] if callgrind else []
    return subprocess.Popen([*tool, sys.executable, "-m", "axon.cli", "serve", *argv], env=env,
                            stdout=subprocess.DEVNULL, stderr=open(f"{out}/server.err", "ab"))


def warm(port: int) -> None:
    """Every object in batches, then singly, four times over: kept, seen, trusted."""
    sock = connect(port)
    buf = bytearray()
    for _ in range(4):
        for start_at in range(0, SMALL, 32):
            names = "&".join(f"f{i}=s/{k:05d}.bin" for i, k in enumerate(range(start_at, min(start_at + 32, SMALL))))
            exchange(sock, f"GET /api/stream-files?{names} HTTP/1.1\r\nHost: x\r\n\r\n".encode(), buf)
        for k in range(MID):
            exchange(sock, f"GET /files/m/{k:05d}.bin HTTP/1.1\r\nHost: x\r\n\r\n".encode(), buf)
        time.sleep(1)  # the tier's keep threads write what the first pass brought
    sock.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("-n", type=int, default=2000, help="requests of each kind (default 2000)")
    parser.add_argument("--kinds", default=",".join(KINDS))
    parser.add_argument("--profile", type=float, default=0, metavar="SECONDS",
                        help="no callgrind: record each server with py-spy for SECONDS of B32 (raw output kept)")
    parser.add_argument("--out", default=None, help="keep callgrind dumps / py-spy profiles here")
    args = parser.parse_args()
    kinds = args.kinds.split(",")
    with tempfile.TemporaryDirectory(prefix="axon-tier-cg-") as tmp_name, \
            seaweed.running(Path(tmp_name) / "weed") as store:
        tmp = Path(tmp_name)
        out = args.out or tmp_name
        os.makedirs(out, exist_ok=True)
        local = tmp / "local"
        data = {f"s/{i:05d}.bin": payload("s", i, 4096) for i in range(SMALL)}
        data.update({f"m/{i:05d}.bin": payload("m", i, 512 << 10) for i in range(MID)})
        import asyncio

        asyncio.run(upload(store, data))
        for key, body in data.items():
            (local / key).parent.mkdir(parents=True, exist_ok=True)
            (local / key).write_bytes(body)
        env = dict(os.environ, **store.env(), AXON_NO_LOOP_LAG="1", AXON_TURN_BUDGET="0.1")
        common = ["--host", "127.0.0.1", "--workers", "0", "--log-level", "warning", "--no-access-log",
                  "--file-cache-valid", str(VALID_UNDER_CALLGRIND),
                  "--file-cache-inactive", str(INACTIVE_UNDER_CALLGRIND)]
        servers = {
            "local": [str(local)],
            "tier": [store.url(PREFIX), "--object-cache", "0", "--object-disk-cache", str(tmp / "tier"),
                     "--object-listing-valid", "100000"],
        }
        results: dict[str, dict[str, float]] = {}
        for name, first in servers.items():
            port = free_port()
            server = start([*first, "--port", str(port), *common], env, out, not args.profile)
            try:
                warm(port)
                sock = connect(port)
                buf = bytearray()
                if args.profile:
                    spy = subprocess.Popen(["/usr/local/bin/py-spy", "record", "--threads", "-r", "200", "-f", "raw",
                                            "-d", str(int(args.profile)), "-o", f"{out}/{name}.txt",
                                            "-p", str(server.pid)], stdout=subprocess.DEVNULL)
                    rng = random.Random(1)
                    count, started = 0, time.monotonic()
                    while spy.poll() is None:
                        exchange(sock, request("B32", rng), buf)
                        count += 1
                    print(f"{name}: {count} B32 in {time.monotonic() - started:.1f} s; profile {out}/{name}.txt")
                    continue
                for kind in kinds:
                    rng = random.Random(1)
                    for _ in range(200):
                        exchange(sock, request(kind, rng), buf)
                    control(server.pid, "-z")
                    for _ in range(args.n):
                        exchange(sock, request(kind, rng), buf)
                    control(server.pid, "-d", f"{name}_{kind}")
                sock.close()
            finally:
                server.terminate()
                server.wait(60)
        if args.profile:
            return
        for file in os.listdir(out):
            if re.fullmatch(r"cg\.\d+\.\d+", file):
                text = (Path(out) / file).read_text()
                label = re.search(r"^desc: Trigger: .*?(\w+)$", text, re.M).group(1)  # type: ignore[union-attr]
                server_name, kind = label.split("_", 1)
                total = int(re.search(r"^(?:summary|totals): (\d+)", text, re.M).group(1))  # type: ignore[union-attr]
                results.setdefault(kind, {})[server_name] = total / args.n
        for kind in kinds:
            row = results.get(kind, {})
            local_i, tier_i = row.get("local", 0), row.get("tier", 0)
            print(f"{kind:10s} local {local_i:10.0f}  tier {tier_i:10.0f}  tier - local {tier_i - local_i:10.0f}")


if __name__ == "__main__":
    main()
