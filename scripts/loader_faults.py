"""What a DataLoader's workers cost the reader: CPU and page faults of one pass over an Axon server.

    python scripts/loader_faults.py http://127.0.0.1:8000 DIR [--workers 4] [--batch 64] [--files N]

DIR is the directory the server serves (``axon serve DIR``); its files, in name order, are read
once by ``DataLoader(AxonDataset(urls), batch_size, num_workers, collate_fn=list)``, and each
file's CRC-32 is computed in the main process, as the engines bench checks it. Printed: the wall
time, the main process's user and system seconds and minor page faults over the loop, and the
workers' CPU a file (``RUSAGE_CHILDREN``). Run it under ``perf stat -e page-faults`` for the
whole process tree. BENCHMARKS.md, "Runs of record on a quiet host", has the figures it gave.
"""

from __future__ import annotations

import argparse
import os
import resource
import sys
import time
import zlib
from urllib.parse import urlsplit


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("server", help="the server's URL, e.g. http://127.0.0.1:8000")
    parser.add_argument("root", help="the directory it serves")
    parser.add_argument("--workers", type=int, default=4)
    parser.add_argument("--batch", type=int, default=64)
    parser.add_argument("--files", type=int, default=1000, help="read the first N files (default 1000)")
    args = parser.parse_args(argv)

    from torch.utils.data import DataLoader

    from axon.engines.torch_dataset import AxonDataset

    netloc = urlsplit(args.server).netloc
    names = sorted(n for n in os.listdir(args.root) if os.path.isfile(os.path.join(args.root, n)))[: args.files]
    urls = [f"{netloc}/{name}" for name in names]
    before = resource.getrusage(resource.RUSAGE_SELF)
    started = time.perf_counter()
    read = 0
    with AxonDataset(urls) as dataset:
        for items in DataLoader(dataset, batch_size=args.batch, num_workers=args.workers, collate_fn=list):
            for data in items:
                zlib.crc32(data)
                read += 1
    wall = time.perf_counter() - started
    after = resource.getrusage(resource.RUSAGE_SELF)
    workers = resource.getrusage(resource.RUSAGE_CHILDREN)
    print(f"{read} files, {args.workers} workers, batch {args.batch}: {wall:.2f} s")
    print(f"main process over the loop: user {after.ru_utime - before.ru_utime:.3f} s, "
          f"system {after.ru_stime - before.ru_stime:.3f} s, minor faults {after.ru_minflt - before.ru_minflt}")
    if args.workers:
        print(f"workers: {(workers.ru_utime + workers.ru_stime) / max(read, 1) * 1e6:.0f} us a file "
              f"(user {workers.ru_utime / max(read, 1) * 1e6:.0f})")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
