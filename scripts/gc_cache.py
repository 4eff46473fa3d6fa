#!/usr/bin/env python3
"""What a warm open-file cache costs the cycle collector: tracked objects and references a
cached file, and the CPU time of a full collection, in a fresh process.

    scripts/gc_cache.py                      # 10,000 files of 4 KiB, as axon bench's pool
    scripts/gc_cache.py --src /other/src     # another tree's axon

Each file is opened as a server's requests would (``SharedFiles``, the kernel watching) until the
cache trusts it, its part's piece is kept as a batch of it would keep it (the plain signature
first, as a cold file's, then the kept one), and then the collector is timed. Thread CPU time:
a busy machine does not lengthen it.
"""

from __future__ import annotations

import argparse
import gc
import os
import subprocess
import sys
import tempfile
import time


def measure(files: int) -> None:
    from axon.http.batch_identity import Signature
    from axon.plan import formats
    from axon.plan.batch import file_signature
    from axon.storage import file_cache
    from axon.storage.local import FileStore
    from axon.storage.shared_files import SharedFiles

    file_cache.SETTLED_NS = -(10**18)  # the files were just written: keep their bytes at once
    with tempfile.TemporaryDirectory() as root:
        paths = [f"f{i:05d}.bin" for i in range(files)]
        for path in paths:
            with open(os.path.join(root, path), "wb") as f:
                f.write(os.urandom(4096))
        store = SharedFiles(FileStore(root), size=files)
        gc.collect()
        gc.freeze()  # what the imports made, as a worker freezes it
        for use in range(4):
            for path in paths:
                store.sync()
                f = store.open(path)
                if use == 0:
                    formats._piece(tuple.__new__(Signature, file_signature(f)))
                f.close()
        for path in paths:
            trusted = store.cached(path)
            if trusted is not None:
                formats._piece(trusted.signature)
        gc.collect()
        gc.collect()  # a tuple is let go once its items are
        tracked = gc.get_objects()
        refs = sum(len(gc.get_referents(o)) for o in tracked)
        print(f"{len(tracked) / files:.2f} tracked objects and {refs / files:.1f} references a cached file")
        del tracked
        times = []
        for _ in range(5):
            start = time.thread_time()
            gc.collect()
            times.append((time.thread_time() - start) * 1e3)
        print(f"full collection: {min(times):.1f}-{max(times):.1f} ms of CPU for {files} cached files")
        store.close()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--src", help="the src directory of the axon to measure (default: the one importable here)")
    parser.add_argument("--files", type=int, default=10_000)
    args = parser.parse_args()
    if args.src:
        env = {**os.environ, "PYTHONPATH": args.src}
        return subprocess.run([sys.executable, __file__, "--files", str(args.files)], env=env, check=False).returncode
    measure(args.files)
    return 0


if __name__ == "__main__":
    sys.exit(main())
