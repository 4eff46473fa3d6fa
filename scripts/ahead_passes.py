#!/usr/bin/env python3
"""Seconds a pass of ``AxonDataset`` in a plain ``DataLoader`` takes over a long link, for a given
``ahead``: the measurement behind ``engines/ahead.py``'s default (BENCHMARKS.md).

    scripts/ahead_passes.py ROOT --ahead 8,16,32 --rounds 3

ROOT is a directory with ``axon bench``'s pool (``pool/NN/NNNNN.bin``, 10,000 files of 4 KiB:
``~/.cache/axon-bench/files`` once ``axon bench`` ran). One ``axon serve`` (one worker) serves it
behind ``axon.bench.relay`` (``--delay-ms`` each way, twice that for a new connection). For each
round and each ``ahead`` in turn, a new process reads every file ``--passes`` times (batch
``--batch``, no workers) and prints the seconds of each pass: the settings alternate, so a busy
machine weighs on all of them alike.
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import time

PASS = """
import sys, time
from torch.utils.data import DataLoader
from axon.engines.torch_dataset import AxonDataset
port, ahead, batch, passes, count = (int(a) for a in sys.argv[1:6])
urls = [f"axon://127.0.0.1:{port}/pool/{i // 1000:02d}/{i:05d}.bin" for i in range(count)]
for _ in range(passes):
    with AxonDataset(urls, ahead=ahead) as dataset:
        started = time.perf_counter()
        read = sum(len(b) for b in DataLoader(dataset, batch_size=batch, num_workers=0, collate_fn=list))
        assert read == count
        print(round(time.perf_counter() - started, 3), end=" ", flush=True)
"""


def main() -> None:
    from axon.bench import procs, relay

    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("root")
    parser.add_argument("--ahead", default="8,16,32", help="comma list of AxonDataset's ahead")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--passes", type=int, default=3)
    parser.add_argument("--batch", type=int, default=64)
    parser.add_argument("--count", type=int, default=10000, help="files of the pool read (default 10000)")
    parser.add_argument("--delay-ms", type=float, default=10.0)
    args = parser.parse_args()
    port = procs.free_port()
    server = subprocess.Popen([sys.executable, "-m", "axon.cli", "serve", args.root, "--host", "127.0.0.1",
                               "--port", str(port), "--workers", "1", "--log-level", "warning"])
    try:
        procs.wait_ready(f"http://127.0.0.1:{port}/api/health")
        with relay.start("127.0.0.1:0", ("127.0.0.1", port), args.delay_ms, connect_ms=2 * args.delay_ms) as link:
            for _ in range(args.rounds):
                for ahead in args.ahead.split(","):
                    print(f"ahead {ahead}:", end=" ", flush=True)
                    subprocess.run([sys.executable, "-c", PASS, str(link.port), ahead, str(args.batch),
                                    str(args.passes), str(args.count)], check=True)
                    print(flush=True)
    finally:
        server.terminate()
        server.wait(10)
        time.sleep(0.1)


if __name__ == "__main__":
    main()
