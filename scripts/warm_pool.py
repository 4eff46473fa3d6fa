#!/usr/bin/env python3
"""What warming a pool of files costs a worker: how many requests the Python path answers before
the compiled answer takes a file's, and what a warm file leaves for the cycle collector.

    scripts/warm_pool.py                       # 300 files of axon bench's pool, each asked 6 times
    scripts/warm_pool.py --files 5000 --times 3 --src /other/src

A real server on loopback (``ThreadServer``, the worker ``axon serve`` runs, the compiled module
if it is built), the bench's pool (``~/.cache/axon-bench/files/pool``, made by ``axon bench``).
Each file is asked ``--times`` times by ``/files/`` (F1), then again as a batch of one (R1), one
request at a time; the Python path's answers are counted where the connection hands a request to
it (``RequestReading._complete``). Then the collector: tracked objects a warm file leaves, and
the CPU time of a full collection of this process.
"""

from __future__ import annotations

import argparse
import collections
import gc
import os
import socket
import sys
import time
from pathlib import Path


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--files", type=int, default=300)
    parser.add_argument("--times", type=int, default=6)
    parser.add_argument("--root", default=str(Path.home() / ".cache/axon-bench/files"))
    parser.add_argument("--src", help="the src directory to measure (default: the axon on PYTHONPATH)")
    args = parser.parse_args()
    if args.src:
        sys.path.insert(0, os.path.abspath(args.src))
    from axon.app import App, built_for_offset_reads
    from axon.bench.scenarios import pool_name
    from axon.server import reading
    from axon.server.config import ServerConfig
    from axon.server.worker import ThreadServer

    python_path = [0]
    complete = reading.RequestReading._complete

    def counted(self, ex, method):  # noqa: ANN001, ANN202
        python_path[0] += 1
        return complete(self, ex, method)

    reading.RequestReading._complete = counted  # type: ignore[method-assign]
    config = ServerConfig(port=0)
    with built_for_offset_reads(config.serving_store):
        app = App(args.root)
    server = ThreadServer(app, config).start()
    try:
        conn = socket.create_connection(("127.0.0.1", server.port))
        answers = conn.makefile("rb")
        names = [pool_name(i) for i in range(args.files)]
        gc.collect()
        before = collections.Counter(type(o).__name__ for o in gc.get_objects())
        for kind, target in (("F1", "/files/{}"), ("R1", "/api/stream-files?file1={}")):
            python_path[0] = 0
            for _ in range(args.times):
                for name in names:
                    _get(conn, answers, target.format(name))
            print(f"{kind}: {args.files} files x {args.times}: {python_path[0]} answered by the Python path "
                  f"({python_path[0] / args.files:.1f} a file)")
        gc.collect()
        gc.collect()  # a tuple of tuples is untracked in two
        left = collections.Counter(type(o).__name__ for o in gc.get_objects()) - before
        print(f"tracked objects a warm file: {sum(left.values()) / args.files:.1f} "
              f"({', '.join(f'{n} {c / args.files:.1f}' for n, c in left.most_common(8))})")
        started = time.thread_time()
        gc.collect()
        print(f"a full collection: {1000 * (time.thread_time() - started):.1f} ms of CPU, {len(gc.get_objects())} tracked")
    finally:
        server.stop()


def _get(conn: socket.socket, answers, target: str) -> None:
    conn.sendall(b"GET " + target.encode() + b" HTTP/1.1\r\nHost: x\r\n\r\n")
    status = answers.readline()
    length = 0
    while (line := answers.readline()) not in (b"\r\n", b""):
        if line.lower().startswith(b"content-length:"):
            length = int(line.split(b":")[1])
    answers.read(length)
    if b" 200 " not in status:
        raise SystemExit(f"{target}: {status!r}")


if __name__ == "__main__":
    main()
