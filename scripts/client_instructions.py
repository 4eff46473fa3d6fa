#!/usr/bin/env python3
"""Instructions per MB of ``axon://``'s reading of a multipart answer, under callgrind: the
client's own cost (the streaming parser, the part checks, ``fs.cat``'s sinks) without the
transport's, repeatable on a busy machine where CPU times are not.

    scripts/client_instructions.py [--sets 1000x4,64x256,1x16384]

For each set ``NxK`` (N files of K KiB), an answer built in memory is fed to ``read_parts`` in
256 KiB ``bytes`` chunks, as a transport's reads come. Each set runs twice under
``valgrind --tool=callgrind`` (``PYTHONHASHSEED=0``): once reading, once only making the
chunks; the difference is the reading's, printed per MB. The ``axon`` on PYTHONPATH is measured.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import re
import subprocess
import sys
from pathlib import Path

TESTS = Path(__file__).resolve().parents[1] / "tests"
CHUNK = 256 * 1024


def read(count: int, kib: int, parse: bool) -> None:
    sys.path[:0] = [str(TESTS), str(TESTS / "http")]
    from multipart_support import CONTENT_TYPE, axon_body

    from axon.fsspec.batches import read_parts
    from axon.fsspec.slices import plan
    from axon.fsspec.transfer import Collect

    files = [(f"f/{i}.bin", bytes([i % 256]) * (kib * 1024)) for i in range(count)]
    body, paths = axon_body(files), [path for path, _ in files]
    out: list = [None] * count

    async def chunks():
        for at in range(0, len(body), CHUNK):
            yield body[at : at + CHUNK]

    async def run() -> None:
        if parse:
            await read_parts(chunks(), CONTENT_TYPE, paths, lambda k, first: Collect(out, k, plan(paths[k], None, None), first))
        else:
            async for _ in chunks():
                pass

    asyncio.run(run())
    if parse and out != [data for _, data in files]:
        raise SystemExit("the reading gave other bytes")


def instructions(count: int, kib: int, mode: str) -> int:
    argv = ["valgrind", "--tool=callgrind", "--callgrind-out-file=/dev/null",
            sys.executable, __file__, "--inner", f"{count}x{kib}", mode]
    done = subprocess.run(argv, capture_output=True, text=True, env={**os.environ, "PYTHONHASHSEED": "0"}, timeout=900)
    found = re.search(r"Collected : (\d+)", done.stderr)
    if done.returncode != 0 or found is None:
        raise SystemExit(f"callgrind failed: {done.stderr[-2000:]}")
    return int(found[1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sets", default="1000x4,64x256,1x16384")
    parser.add_argument("--inner", help=argparse.SUPPRESS)
    parser.add_argument("mode", nargs="?", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.inner:
        count, _, kib = args.inner.partition("x")
        read(int(count), int(kib), args.mode == "read")
        return
    for one in args.sets.split(","):
        count, kib = (int(v) for v in one.split("x"))
        reading = instructions(count, kib, "read") - instructions(count, kib, "chunks")
        print(f"{count} files of {kib} KiB: {reading / (count * kib / 1024) / 1e6:.2f} M instructions/MB", flush=True)


if __name__ == "__main__":
    main()
