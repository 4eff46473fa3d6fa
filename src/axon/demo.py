"""``axon demo``: make the sample files the README's examples read and serve them, so its
commands run as written.

    axon demo                 # files in ./axon-demo, served on http://127.0.0.1:8000 by one worker
    axon demo --browse        # listing on, as the README's data-pipeline examples need

The files: the article's T1-T8 payloads (8 KB to 512 KB) plus 32 files of 4 KB for B32, with
fixed pseudo-random content so two runs make identical files (:func:`make_samples`); and what
"Reading from data pipelines" reads, a sales table (CSV, and Parquet where pyarrow is
installed) and labelled text samples (:func:`make_pipeline_files`).
"""

from __future__ import annotations

import argparse
import csv
import io
import random
from pathlib import Path

KB = 1024
# name -> size: the article's scenarios T1-T8 use one or two of these per request.
SAMPLES = {"8kb.bin": 8 * KB, "4kb.bin": 4 * KB, "64kb.bin": 64 * KB, "32kb.bin": 32 * KB,
           "256kb.bin": 256 * KB, "128kb.bin": 128 * KB, "512kb.bin": 512 * KB}
SMALL_FILES = 32  # B32: 32 files of 4 KB in one request
PIPELINE_SAMPLES = 8  # samples/000.txt (and .cls) to samples/007.txt
SALES_ROWS = 200
REGIONS = ("north", "south", "east", "west")


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


def sales_columns() -> dict[str, list]:
    """The sales table: ``region`` cycling through :data:`REGIONS`, ``amount`` 0 to 199."""
    return {"region": [REGIONS[i % len(REGIONS)] for i in range(SALES_ROWS)], "amount": list(range(SALES_ROWS))}


def make_pipeline_files(root: Path) -> tuple[list[Path], str | None]:
    """Write what the README's data-pipeline examples read under ``root``: ``tables/sales.csv``,
    ``tables/sales.parquet``, and ``samples/NNN.txt`` ("sample N") with ``samples/NNN.cls`` (its
    label, N mod 3). The files written, and why one was not (Parquet needs pyarrow) or None."""
    columns = sales_columns()
    text = io.StringIO(newline="")
    writer = csv.writer(text, lineterminator="\n")
    writer.writerow(columns)
    writer.writerows(zip(*columns.values()))
    wanted: dict[str, bytes] = {"tables/sales.csv": text.getvalue().encode()}
    for i in range(PIPELINE_SAMPLES):
        wanted[f"samples/{i:03}.txt"] = f"sample {i}\n".encode()
        wanted[f"samples/{i:03}.cls"] = str(i % 3).encode()
    made = [path for name, data in wanted.items() if (path := _write(root / name, data))]
    parquet = root / "tables" / "sales.parquet"
    try:
        import pyarrow
        import pyarrow.parquet
    except ImportError:  # the tool runs without the engines; only this table needs one
        return made, "tables/sales.parquet not written: Parquet needs pyarrow, pip install 'axon-stream[arrow]'"
    if not parquet.is_file() or pyarrow.parquet.read_table(parquet).to_pydict() != columns:
        pyarrow.parquet.write_table(pyarrow.table(columns), parquet)
        made.append(parquet)
    return made, None


def make_demo_files(root: Path) -> tuple[list[Path], str | None]:
    """Every file the README's examples read, under ``root`` (what ``axon demo`` serves): the
    files written, and why one was not (or None)."""
    pipeline, skipped = make_pipeline_files(root)
    return make_samples(root) + pipeline, skipped


def _write(path: Path, data: bytes) -> Path | None:
    """``data`` into ``path`` unless it holds them already: the path if written."""
    if path.is_file() and path.read_bytes() == data:
        return None
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(data)
    return path


def add_parser(sub: argparse._SubParsersAction) -> None:
    parser = sub.add_parser("demo", help="make sample files and serve them (the article's demo)")
    parser.add_argument("dir", nargs="?", default="axon-demo", help="where to put the files (default: ./axon-demo)")
    parser.add_argument("--host", default="127.0.0.1", help="address to listen on (default: 127.0.0.1)")
    parser.add_argument("--port", type=int, default=8000, help="port (default: 8000)")
    # One worker, where axon serve starts one per CPU: a demo on a laptop need not take them all.
    parser.add_argument("--workers", type=int, default=1,
                        help="worker processes (default: 1; axon serve's default is one per CPU)")
    parser.add_argument("--browse", action="store_true",
                        help="list directories, as axon serve --browse (the README's data-pipeline examples glob)")
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    root = Path(args.dir).resolve()
    made, skipped = make_demo_files(root)
    base = f"http://{args.host}:{args.port}"
    print(f"Sample files in {root}: examples/, tables/, samples/ ({len(made)} written). Try:")
    if skipped:
        print(f"  ({skipped})")
    print(f"  curl {base}/api/health")
    print(f'  curl -o batch.multipart "{base}/api/stream-files?file1=examples/8kb.bin&file2=examples/4kb.bin"')
    print(f"  curl -r 0-99 {base}/files/examples/512kb.bin | wc -c")
    print(f'  axon fetch {base} examples/64kb.bin examples/32kb.bin -o downloaded/')
    print(f'  wrk -t1 -c50 -d10s --latency "{base}/api/stream-files?file1=examples/512kb.bin"')
    from .cli import main  # imported here: the dispatcher imports this module

    serve = ["serve", str(root), "--host", args.host, "--port", str(args.port), "--workers", str(args.workers)]
    return main(serve + (["--browse"] if args.browse else []))
