#!/usr/bin/env python3
"""What the sweep's check ahead of a window (``FileCache.refresh``) costs a file: the bench's pool
of 10,000 files of 4 KiB, each trusted, then every one checked in the server's slices, the cache's
clock moved past the point where each falls due.

    scripts/check_ahead_cost.py            # the axon on PYTHONPATH; makes the pool if missing
    scripts/check_ahead_cost.py --profile  # and cProfile's top functions
"""

from __future__ import annotations

import argparse
import cProfile
import pstats
import time
from pathlib import Path

from axon.bench.scenarios import POOL_FILES, ensure_pool, pool_name
from axon.server.worker import REFRESH_MARGIN, REFRESH_SLICE
from axon.storage import file_cache
from axon.storage.local import FileStore
from axon.storage.shared_files import SharedFiles

VALID = 5.0
AHEAD = 1.0 + REFRESH_MARGIN  # a sweep a second, as a worker with the default timeouts


class Clock:
    now = 1000.0

    def __call__(self) -> float:
        return self.now


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--profile", action="store_true")
    args = parser.parse_args()
    file_cache.SETTLED_NS = -(10**18)  # the pool's files count as settled at once
    root = Path("~/.cache/axon-bench/files").expanduser()  # axon bench --compare's files
    ensure_pool(root)
    names = [pool_name(i) for i in range(POOL_FILES)]
    clock = Clock()
    shared = SharedFiles(FileStore(root), size=2 * POOL_FILES, valid=VALID, inactive=60, clock=clock)
    for _ in range(3):
        for name in names:
            shared.sync()
            shared.open(name).close()
    cache = shared.cache
    print(f"{sum(e.known is not None for e in cache.entries.values()):,} of {len(names):,} files trusted")

    def sweep() -> None:
        clock.now += VALID - AHEAD / 2  # each due, each used in its window
        for entry in cache.entries.values():
            entry.used = clock.now
        keys, start = cache.keys(), 0
        while start is not None:
            start = cache.refresh(keys, start, AHEAD, REFRESH_SLICE)

    for _ in range(2):
        began = time.perf_counter()
        sweep()
        print(f"checked ahead: {(time.perf_counter() - began) / len(names) * 1e6:.1f} us a file")
    if args.profile:
        cProfile.runctx("sweep()", globals(), {"sweep": sweep}, "/tmp/check_ahead.prof")
        pstats.Stats("/tmp/check_ahead.prof").sort_stats("tottime").print_stats(12)
    shared.close()


if __name__ == "__main__":
    main()
