"""Feeding a training loop over a long link: Axon's readers side by side with what an engineer
would pick instead (issue 37). ``python -m axon.bench.engines`` runs it (``--matrix`` runs the
engines' matrix of :mod:`axon.bench.engines` instead).

    python -m axon.bench.engines                    # 10,000 x 4 KiB and 1,000 x 256 KiB, 20 ms round trip
    python -m axon.bench.engines --sets 40x4096,8x262144 --per-shard 8 --delay-ms 1 --connect-ms 2

Each set of files is read by every reader (``--readers``; :data:`~axon.bench.loader_cells.READERS`),
each in a process of its own (:mod:`.loader_cells`):

* the peers: fsspec ``HTTPFileSystem``'s concurrent ``fs.cat`` on nginx; nginx serving tar shards
  (``--per-shard`` files each, built here into nginx's root) read in a ``DataLoader`` with 4
  workers by ``webdataset`` and by ``tarfile`` on one kept connection; s3fs's concurrent ``fs.cat``
  on SeaweedFS;
* the floors: ``fs.cat_file`` one file after another (``--floor-seconds`` at most, its rate from
  what it read by then);
* the bounds: the ``DataLoader`` of Axon's readers' settings (batch 64 and 256, 0 and 4 workers)
  over the files' bytes already in memory: no reader in that ``DataLoader`` can be faster, so
  its ratio to the best peer is the most a goal of that ``DataLoader`` can ask on this machine;
* Axon: ``fs.cat`` over ``axon://``, ``AxonDataset`` (batch 64 and 256, 0 and 4 workers),
  ``AxonShards`` (4 workers).

The servers run on loopback, each behind the delay relay (:mod:`.relay`: ``--delay-ms`` each way
and ``--connect-ms`` more for a new connection). What each reader read is checked against the
files (every file's length and CRC-32, :func:`~.loader_cells.digest`). The requests each server saw during the timed read are counted from
its own records (axon serve's and nginx's access logs, SeaweedFS's metrics); for the readers that
ask for a known number of batches (``AxonDataset``, ``AxonShards``) the table shows the batch
requests the server logged per batch, and for every reader the CPU its processes (the reader's
and its ``DataLoader`` workers') spent a file: on a machine whose cores the servers and the
relay share, that is what a reader costs the others. Each Axon reader's files/s is divided by
the best peer's in the same run, for the same set.
"""

from __future__ import annotations

import argparse
import io
import json
import sys
import tarfile
import time
from dataclasses import asdict, dataclass
from pathlib import Path

from . import pipelines
from .cells import requests_text, run_process, seconds_text, servers
from .engine_cells import files_check
from .loader_cells import READERS, Spec, digest, shard_paths
from .pipelines import WARMUP_FILES, FileSet

DEFAULT_SETS = "10000x4096,1000x262144"
DEFAULT_FILES = Path("~/.cache/axon-bench/loaders")
PER_SHARD = 256
BATCH_KINDS = ("POST /api/stream-files", "POST /api/stream-files.tar", "GET /api/stream-files",
               "GET /api/stream-files.tar")


@dataclass(frozen=True)
class Row:
    files: str  # the set: "10,000 x 4 KiB"
    reader: str
    kind: str  # "peer" | "floor" | "bound" | "axon"
    settings: str
    seconds: float | None  # None: it failed, or was stopped after budget seconds
    budget: float
    count: int  # files in the set
    read: int  # files read in the timed run, each checked
    requests: int
    kinds: str  # "157 POST /api/stream-files + 4 GET /api/limits"
    batches: int | None  # the batch requests its settings ask for (None: the reader decides)
    per_batch: float | None  # batch requests the server logged / batches
    error: str = ""
    cpu: float | None = None  # CPU seconds of the reader's processes in the timed read

    @property
    def cpu_per_file(self) -> float | None:
        """Microseconds of the reader's CPU a file read."""
        return None if self.cpu is None or not self.read else 1e6 * self.cpu / self.read

    @property
    def rate(self) -> float | None:
        return None if self.seconds is None or self.error else self.read / self.seconds


def best_peers(rows: list[Row]) -> dict[str, Row]:
    """For each set, the peer that read the most files a second in this run."""
    best: dict[str, Row] = {}
    for row in rows:
        if row.kind == "peer" and row.rate is not None and (row.files not in best or row.rate > best[row.files].rate):
            best[row.files] = row
    return best


def ratio(row: Row, best: dict[str, Row]) -> float | None:
    """The row's files/s over the best peer's for its set (None: either has no rate)."""
    peer = best.get(row.files)
    return None if peer is None or row.rate is None else row.rate / peer.rate


# -- the files and the shards ------------------------------------------------------------------


def file_digests(root: Path, fileset: FileSet) -> list[str]:
    """The set's files under ``root`` (written if missing), and each one's :func:`digest` in order."""
    pipelines.write_files(root, fileset)
    return [digest((root / rel).read_bytes()) for rel in fileset.paths()]


def write_shards(root: Path, fileset: FileSet, per_shard: int) -> None:
    """The set as tar shards of ``per_shard`` files under ``root`` (each member named by its path
    under the root), and a warm-up shard of the first few; kept between runs."""
    rels = fileset.paths()
    groups = [rels[i : i + per_shard] for i in range(0, len(rels), per_shard)]
    for path, group in zip([*shard_paths(fileset, per_shard), *shard_paths(fileset, per_shard, warm=True)],
                           [*groups, rels[:WARMUP_FILES]]):
        target = root / path
        if target.exists():
            continue
        target.parent.mkdir(parents=True, exist_ok=True)
        partial = target.with_suffix(".partial")
        with tarfile.open(partial, "w", format=tarfile.USTAR_FORMAT) as archive:
            for rel in group:
                data = (root / rel).read_bytes()
                info = tarfile.TarInfo(rel)
                info.size, info.mode = len(data), 0o644
                archive.addfile(info, io.BytesIO(data))
        partial.rename(target)


# -- the run -----------------------------------------------------------------------------------


def read_set(spec: Spec, digests: list[str], counter, budget: float, log: Path) -> Row:
    reader = READERS[spec.reader]
    label = FileSet(spec.count, spec.size).label
    ready, done, seen, error = run_process("axon.bench.loader_cells", asdict(spec), f"{label} {spec.reader}",
                                           counter, budget, log)
    error = error or (verdict(reader.kind, done, digests) if done else "")
    done = done or {}
    batches = done.get("batches")
    logged = sum(seen[kind] for kind in BATCH_KINDS)
    return Row(label, reader.label, reader.kind, ready.get("settings", ""),
               done["seconds"] if done and not error else None, budget, len(digests), done.get("files", 0),
               sum(seen.values()), requests_text(seen), batches, logged / batches if batches else None, error,
               done.get("cpu"))


def verdict(kind: str, done: dict, digests: list[str]) -> str:
    """Why a reader's answer is wrong ("" if it is right): every file of the set read (a floor:
    the first ones, in order), each with the bytes the file holds."""
    read = done["files"]
    if read != len(digests) and kind != "floor":
        return f"read {read} of {len(digests)} files"
    if done["check"] != files_check(digests[:read]):
        return f"read other bytes than the files hold ({done['check']})"
    return ""


def run(args: argparse.Namespace) -> list[Row]:
    root = args.files_dir.expanduser().resolve()
    workdir = (args.workdir or root.parent / "loaders-run").expanduser().resolve()
    digests = {}
    for fileset in args.sets:
        digests[fileset] = file_digests(root, fileset)
        write_shards(root, fileset, args.per_shard)
    uses_s3 = any(READERS[key].server == "s3" for key in args.readers)
    rels = [rel for fileset in args.sets for rel in fileset.paths()]
    rows = []
    with servers(root, workdir, args.delay_ms, rels, uses_s3, args.connect_ms) as (links, counters):
        for fileset in args.sets:
            for key in args.readers:
                spec = Spec(key, fileset.count, fileset.size, args.per_shard, links["axon"], links["http"],
                            f"http://{links['s3']}" if uses_s3 else "", args.floor_seconds)
                rows.append(read_set(spec, digests[fileset], counters[READERS[key].server], args.budget,
                                     workdir / "cells.log"))
                row = rows[-1]
                print(f"{row.files:18} {row.reader:50} {_seconds(row):>8} s  {row.kinds}", file=sys.stderr, flush=True)
    return rows


def _seconds(row: Row) -> str:
    return seconds_text(row.error, row.seconds, row.budget)


def table(rows: list[Row]) -> str:
    best = best_peers(rows)
    lines = ["| files | reader | settings | seconds | files/s | reader's CPU a file (us) | requests the server saw "
             "| batch requests a batch | bytes checked | x best peer |",
             "|---|---|---|---:|---:|---:|---|---:|---|---:|"]
    for r in rows:
        times = ratio(r, best)
        if r is best.get(r.files):
            versus = "best peer"
        else:
            versus = "" if times is None or r.kind == "peer" else f"{times:.2f}x"
        if r.error:
            rate = "-"
        else:
            rate = f"< {r.count / r.budget:,.0f}" if r.rate is None else f"{r.rate:,.0f}"
        name = f"**{r.reader}**" if r.kind == "axon" else r.reader if r.kind == "peer" else f"{r.kind}: {r.reader}"
        per_batch = "" if r.per_batch is None else f"{r.per_batch:g}"
        if r.error or r.seconds is None:
            checked = r.error or f"stopped after {r.budget:g} s"
        else:
            checked = f"{r.read:,} files, CRC-32" if r.kind != "floor" else f"first {r.read:,}, CRC-32"
        cpu = "" if r.error or r.cpu_per_file is None else f"{r.cpu_per_file:,.0f}"
        requests = f"{r.requests:,}: {r.kinds}" if r.requests else "none"
        lines.append(f"| {r.files} | {name} | {r.settings} | {_seconds(r)} | {rate} | {cpu} | {requests} "
                     f"| {per_batch} | {checked} | {versus} |")
    return "\n".join(lines)


def _readers(text: str) -> list[str]:
    chosen = text.split(",")
    if not set(chosen) <= set(READERS):
        raise argparse.ArgumentTypeError(f"a comma list of {', '.join(READERS)}, not {text!r}")
    return chosen


def configure(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--sets", default=DEFAULT_SETS,
                        type=lambda text: [FileSet.parse(part) for part in text.split(",")],
                        help=f"comma list of COUNTxBYTES (default {DEFAULT_SETS})")
    parser.add_argument("--readers", default=",".join(READERS), type=_readers,
                        help=f"comma list of {', '.join(READERS)} (default: all)")
    parser.add_argument("--per-shard", type=int, default=PER_SHARD, help=f"files a tar shard (default {PER_SHARD})")
    parser.add_argument("--delay-ms", type=float, default=10.0, help="held each way by the relay (default 10)")
    parser.add_argument("--connect-ms", type=float, default=20.0,
                        help="held more on a new connection, its handshake (default 20)")
    parser.add_argument("--floor-seconds", type=float, default=10.0,
                        help="seconds a floor reader reads one file after another (default 10)")
    parser.add_argument("--budget", type=float, default=120.0,
                        help="seconds a timed read may take before it is stopped (default 120)")
    parser.add_argument("--files-dir", type=Path, default=DEFAULT_FILES, help=f"the served root (default {DEFAULT_FILES})")
    parser.add_argument("--workdir", type=Path, help="servers' and cells' logs (default: FILES_DIR/../loaders-run)")
    parser.add_argument("--json", type=Path, help="also write the rows here")


def main(args: argparse.Namespace, argv: list[str] | None) -> int:
    rows = run(args)
    setting = (f"{time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}; {2 * args.delay_ms:g} ms round trip and "
               f"{args.connect_ms:g} ms a new connection (relay), nothing pinned")
    pipelines.report("axon.bench.engines", argv, setting, table(rows), rows, None)
    if args.json:
        best = best_peers(rows)
        args.json.write_text(json.dumps([{**asdict(r), "rate": r.rate, "ratio": ratio(r, best),
                                          "best_peer": r is best.get(r.files)} for r in rows], indent=1))
    for row in rows:
        if row.error:
            print(f"{row.files} {row.reader}: {row.error}", file=sys.stderr)
    return 1 if any(row.error for row in rows) else 0

