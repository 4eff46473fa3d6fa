"""``axon demo``: make the article's sample files and serve them, so its commands run as written.

    axon demo                 # files in ./axon-demo, served on http://127.0.0.1:8000 by one worker

The files are the article's T1-T8 payloads (8 KB to 512 KB) plus 32 files of 4 KB for B32,
with fixed pseudo-random content so two runs make identical files.
"""

from __future__ import annotations

import argparse
import random
from pathlib import Path

KB = 1024
# name -> size: the article's scenarios T1-T8 use one or two of these per request.
SAMPLES = {"8kb.bin": 8 * KB, "4kb.bin": 4 * KB, "64kb.bin": 64 * KB, "32kb.bin": 32 * KB,
           "256kb.bin": 256 * KB, "128kb.bin": 128 * KB, "512kb.bin": 512 * KB}
SMALL_FILES = 32  # B32: 32 files of 4 KB in one request


def make_samples(root: Path) -> list[Path]:
    """Write the sample files under ``root/examples`` (only those missing or of the wrong size)."""
    examples = root / "examples"
    examples.mkdir(parents=True, exist_ok=True)
    wanted = dict(SAMPLES)
    wanted.update({f"small/{i:02d}.bin": 4 * KB for i in range(SMALL_FILES)})
    made = []
    for name, size in wanted.items():
        path = examples / name
        if path.is_file() and path.stat().st_size == size:
            continue
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(random.Random(name).randbytes(size))
        made.append(path)
    return made


def add_parser(sub: argparse._SubParsersAction) -> None:
    parser = sub.add_parser("demo", help="make sample files and serve them (the article's demo)")
    parser.add_argument("dir", nargs="?", default="axon-demo", help="where to put the files (default: ./axon-demo)")
    parser.add_argument("--host", default="127.0.0.1", help="address to listen on (default: 127.0.0.1)")
    parser.add_argument("--port", type=int, default=8000, help="port (default: 8000)")
    # One worker, where axon serve starts one per CPU: a demo on a laptop need not take them all.
    parser.add_argument("--workers", type=int, default=1,
                        help="worker processes (default: 1; axon serve's default is one per CPU)")
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    root = Path(args.dir).resolve()
    made = make_samples(root)
    base = f"http://{args.host}:{args.port}"
    print(f"Sample files in {root}/examples ({len(made)} written). Try:")
    print(f"  curl {base}/api/health")
    print(f'  curl -o batch.multipart "{base}/api/stream-files?file1=examples/8kb.bin&file2=examples/4kb.bin"')
    print(f"  curl -r 0-99 {base}/files/examples/512kb.bin | wc -c")
    print(f'  axon fetch {base} examples/64kb.bin examples/32kb.bin -o downloaded/')
    print(f'  wrk -t1 -c50 -d10s --latency "{base}/api/stream-files?file1=examples/512kb.bin"')
    from .cli import main  # imported here: the dispatcher imports this module

    return main(["serve", str(root), "--host", args.host, "--port", str(args.port), "--workers", str(args.workers)])
