"""One cell of :mod:`axon.bench.engines`: an engine reading one workload one way, in a process
of its own (``python -m axon.bench.engine_cells CELL_JSON``).

The process starts its engine (a local Ray cluster, a Dask ``LocalCluster``; PyTorch's
DataLoader starts its workers per pass), reads a little untimed the same way (a few of the
small files, or a small Parquet file of the same columns: workers up, connections open), prints ``{"ready": true}``, waits for a line on stdin (the harness marks the servers'
logs then), reads the whole workload, and prints ``{"seconds": ..., "check": ...}``: the check
is a digest of what was read (every file's SHA-256, sorted; for the Parquet file its rows and
two exact column sums), which the harness compares with the files'. Everything else the engines
print goes to stderr, so stdout carries those two lines alone.

How each engine reads, the way its users would:

* PyTorch: a map-style dataset under ``DataLoader(batch_size=B, num_workers=W)``:
  :class:`axon.engines.torch_dataset.AxonDataset` (a sampler batch in one request), or one
  ``fs.cat_file(path)`` per item (HTTPFileSystem, s3fs); the Parquet file with pyarrow's
  ``pq.read_table(path, filesystem=fs)``.
* Ray Data: :func:`axon.engines.ray_datasource.read_binary_files`, or
  ``ray.data.read_binary_files`` (HTTP: the URLs through fsspec; S3: the directory, with
  pyarrow's S3 filesystem, Ray's own for ``s3://``); ``ray.data.read_parquet``.
* Dask: :func:`axon.engines.dask_io.read_bytes`, or ``db.from_sequence(paths).map(fs.cat_file)``;
  ``dask.dataframe.read_parquet``.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import math
import os
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import fsspec

from . import seaweed
from .objects import PREFIX
from .pipelines import WARMUP_FILES, FileSet

WARM_PARQUET = "warm.parquet"


@dataclass(frozen=True)
class Cell:
    """What one cell reads, how and from where: plain values, sent as JSON."""

    engine: str  # torch | ray | dask
    workload: str  # small | parquet
    way: str  # axon | http | s3
    files: int
    file_size: int
    parquet: str  # the Parquet file's path under the served root (and under PREFIX in the bucket)
    axon: str  # host:port of each server, through the relay
    nginx: str
    s3: str  # the S3 endpoint URL
    per_batch: int  # files a torch batch, a Ray block, a Dask partition
    workers: int  # DataLoader workers, Ray CPUs, Dask worker processes

    def rels(self, warm: bool = False) -> list[str]:
        rels = FileSet(self.files, self.file_size).paths()
        return rels[:WARMUP_FILES] if warm else rels

    def parquet_path(self, warm: bool = False) -> str:
        """The Parquet file; to warm up, a small one beside it of the same columns."""
        return f"{self.parquet.rsplit('/', 1)[0]}/{WARM_PARQUET}" if warm else self.parquet

    @property
    def units(self) -> int:
        """Batches, blocks or partitions the small files make."""
        return math.ceil(self.files / self.per_batch)

    def fs_spec(self) -> tuple[str, dict[str, Any]]:
        """The fsspec protocol and options of this way: plain values a worker builds its own from."""
        if self.way == "axon":
            return "axon", {}
        if self.way == "http":
            return "http", {}
        return "s3", {"key": seaweed.ACCESS_KEY, "secret": seaweed.SECRET_KEY, "endpoint_url": self.s3,
                      "client_kwargs": {"region_name": seaweed.REGION}}

    def url(self, rel: str) -> str:
        """``rel`` (a path under the served root) as this way's fsspec path."""
        if self.way == "axon":
            return f"axon://{self.axon}/{rel}"
        if self.way == "http":
            return f"http://{self.nginx}/files/{rel}"
        return f"s3://{seaweed.BUCKET}/{PREFIX}/{rel}"

    def fs_path(self, rel: str) -> str:
        """``rel`` as this way's filesystem takes it: without the scheme, but HTTP's URL whole."""
        url = self.url(rel)
        return url if self.way == "http" else url.split("://", 1)[1]


def filesystem(cell: Cell) -> fsspec.AbstractFileSystem:
    protocol, options = cell.fs_spec()
    return fsspec.filesystem(protocol, **options)


def sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def files_check(digests: list[str]) -> str:
    """One digest of many files' digests, in any order (engines need not keep it)."""
    return sha("".join(sorted(digests)).encode())


def table_check(rows: int, id_sum: int, k_sum: int) -> str:
    return f"{rows} rows, sum(id) {id_sum}, sum(k) {k_sum}"


# -- PyTorch -----------------------------------------------------------------------------------


class FileDataset:
    """A map-style dataset reading one file per item, ``fs.cat_file(path)``: the way without Axon.
    Each DataLoader worker builds its own filesystem (fsspec keeps one a process)."""

    def __init__(self, protocol: str, options: dict[str, Any], urls: list[str]) -> None:
        self.protocol, self.options, self.urls = protocol, options, urls

    def __len__(self) -> int:
        return len(self.urls)

    def __getitem__(self, index: int) -> bytes:
        return fsspec.filesystem(self.protocol, **self.options).cat_file(self.urls[index])


def torch_small(cell: Cell, warm: bool) -> str:
    from torch.utils.data import DataLoader

    urls = [cell.url(rel) for rel in cell.rels(warm)]
    if cell.way == "axon":
        from ..engines.torch_dataset import AxonDataset

        dataset = AxonDataset(urls)
    else:
        dataset = FileDataset(*cell.fs_spec(), urls)
    loader = DataLoader(dataset, batch_size=cell.per_batch, num_workers=cell.workers, collate_fn=list)
    return files_check([sha(data) for batch in loader for data in batch])


def torch_parquet(cell: Cell, warm: bool) -> str:
    import pyarrow.parquet as pq

    return arrow_check(pq.read_table(cell.fs_path(cell.parquet_path(warm)), filesystem=filesystem(cell)))


def arrow_check(table: Any) -> str:
    import pyarrow.compute as pc

    for name in table.column_names:  # every column read and decoded, as a consumer would
        pc.sum(table[name])
    return table_check(table.num_rows, pc.sum(table["id"]).as_py(), pc.sum(table["k"]).as_py())


# -- Ray Data ----------------------------------------------------------------------------------


def ray_filesystem(cell: Cell) -> Any:
    """What Ray reads this way with: fsspec's filesystems wrapped for pyarrow; for S3, pyarrow's own."""
    from pyarrow.fs import FSSpecHandler, PyFileSystem, S3FileSystem

    if cell.way == "s3":
        return S3FileSystem(access_key=seaweed.ACCESS_KEY, secret_key=seaweed.SECRET_KEY, region=seaweed.REGION,
                            endpoint_override=cell.s3, scheme="http")
    return PyFileSystem(FSSpecHandler(filesystem(cell)))


def _ray_digests(batch: Any) -> dict[str, list[str]]:
    return {"sha": [sha(data) for data in batch["bytes"].to_pylist()]}


def ray_small(cell: Cell, warm: bool) -> str:
    import ray.data

    rels = cell.rels(warm)
    if cell.way == "axon":
        from ..engines.ray_datasource import read_binary_files

        ds = read_binary_files([cell.url(rel) for rel in rels], files_per_block=cell.per_batch)
    elif cell.way == "s3" and not warm:  # the object-store way: the directory, listed
        directory = f"{seaweed.BUCKET}/{PREFIX}/{rels[0].rsplit('/', 1)[0]}/"
        ds = ray.data.read_binary_files(directory, filesystem=ray_filesystem(cell))
    else:
        ds = ray.data.read_binary_files([cell.fs_path(rel) for rel in rels], filesystem=ray_filesystem(cell))
    rows = ds.map_batches(_ray_digests, batch_format="pyarrow", batch_size=None).take_all()
    return files_check([row["sha"] for row in rows])


def _arrow_summary(batch: Any) -> dict[str, list[int]]:
    import pyarrow.compute as pc

    for name in batch.column_names:
        pc.sum(batch[name])
    return {"rows": [batch.num_rows], "id": [pc.sum(batch["id"]).as_py() or 0], "k": [pc.sum(batch["k"]).as_py() or 0]}


def ray_parquet(cell: Cell, warm: bool) -> str:
    import ray.data

    ds = ray.data.read_parquet(cell.fs_path(cell.parquet_path(warm)), filesystem=ray_filesystem(cell))
    parts = ds.map_batches(_arrow_summary, batch_format="pyarrow", batch_size=None).take_all()
    return table_check(sum(p["rows"] for p in parts), sum(p["id"] for p in parts), sum(p["k"] for p in parts))


# -- Dask --------------------------------------------------------------------------------------


def dask_small(cell: Cell, warm: bool) -> str:
    import dask.bag as db

    urls = [cell.url(rel) for rel in cell.rels(warm)]
    if cell.way == "axon":
        from ..engines.dask_io import read_bytes

        bag = read_bytes(urls, files_per_partition=cell.per_batch)
    else:
        bag = db.from_sequence(urls, npartitions=math.ceil(len(urls) / cell.per_batch)).map(filesystem(cell).cat_file)
    return files_check(bag.map(sha).compute())


def _pandas_summary(df: Any) -> Any:
    import pandas as pd

    df.sum(numeric_only=True)
    return pd.DataFrame({"rows": [len(df)], "id": [int(df["id"].sum())], "k": [int(df["k"].sum())]})


def dask_parquet(cell: Cell, warm: bool) -> str:
    import dask.dataframe as dd
    import pandas as pd

    frame = dd.read_parquet(cell.url(cell.parquet_path(warm)), storage_options=cell.fs_spec()[1])
    meta = pd.DataFrame({name: pd.Series(dtype="int64") for name in ("rows", "id", "k")})
    parts = frame.map_partitions(_pandas_summary, meta=meta).compute()
    return table_check(int(parts["rows"].sum()), int(parts["id"].sum()), int(parts["k"].sum()))


# -- the cell's process ------------------------------------------------------------------------

SMALL = {"torch": torch_small, "ray": ray_small, "dask": dask_small}
PARQUET = {"torch": torch_parquet, "ray": ray_parquet, "dask": dask_parquet}


@contextlib.contextmanager
def engine(name: str, workers: int) -> Iterator[None]:
    """The engine's cluster of ``workers`` processes, for this cell alone."""
    if name == "ray":
        import ray

        ray.init(address="local", num_cpus=workers, include_dashboard=False, log_to_driver=False)
        ray.data.DataContext.get_current().enable_progress_bars = False
        try:
            yield
        finally:
            ray.shutdown()
    elif name == "dask":
        from dask.distributed import Client, LocalCluster

        with LocalCluster(n_workers=workers, threads_per_worker=1, processes=True, dashboard_address=None) as cluster, \
                Client(cluster):
            yield
    else:
        yield


def main(text: str) -> None:
    cell = Cell(**json.loads(text))
    out = os.fdopen(os.dup(1), "w", buffering=1)
    os.dup2(2, 1)  # the engines' own output to stderr: stdout carries our two lines
    read = (SMALL if cell.workload == "small" else PARQUET)[cell.engine]
    with engine(cell.engine, cell.workers):
        read(cell, warm=True)
        print(json.dumps({"ready": True}), file=out)
        sys.stdin.readline()
        started = time.perf_counter()
        check = read(cell, warm=False)
        print(json.dumps({"seconds": time.perf_counter() - started, "check": check}), file=out)


if __name__ == "__main__":
    main(sys.argv[1])
