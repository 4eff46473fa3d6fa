"""One reader of :mod:`axon.bench.loaders` reading one set of files, in a process of its own
(``python -m axon.bench.loader_cells SPEC_JSON``).

The process reads a few files untimed the same way (imports done, connections open), prints
``{"ready": true}``, waits for a line on stdin (the harness marks the servers' logs then), reads
the whole set and prints ``{"seconds", "files", "check", "batches", "cpu"}``: ``cpu`` is the CPU
seconds the reader's processes spent in the timed read (this one's and its children's: the
``DataLoader`` workers, once they ended, and what they started), ``check`` is the digest of
every file's :func:`digest` (:func:`~axon.bench.engine_cells.files_check`), which the harness
compares with the files'. The digest is a CRC-32 and the length, not a SHA-256: it catches
wrong, cut or misplaced bytes all the same at a small part of the CPU, which every reader (the
peers too) spends inside its timed loop, where a SHA-256 of the large files outweighed reading them. Its first line also says how the reader is set up (``settings``), in its own words
(fsspec's gather batch is read from fsspec itself). A floor reader reads the files in order, one
after another, for ``floor_seconds`` at most: ``files`` says how many it read.

The readers, each as an engineer feeding a training loop would write it:

* peers: fsspec ``HTTPFileSystem``'s ``fs.cat(urls)`` on nginx; s3fs's ``fs.cat(paths)`` on
  SeaweedFS; nginx's pre-built tar shards read in a ``DataLoader`` with workers, by
  ``webdataset.WebDataset`` (which opens each shard with ``curl``) or by ``tarfile`` on one
  kept connection a worker;
* floors: ``fs.cat_file`` one file after another (HTTPFileSystem, s3fs);
* bounds: the ``DataLoader`` of Axon's readers' settings over the files' bytes already in memory
  (made by the untimed warm-up, as the files were written): what that ``DataLoader`` costs on
  this machine with nothing to read, which no reader in it can beat;
* Axon: ``fs.cat(urls)`` over ``axon://``; :class:`~axon.engines.torch_dataset.AxonDataset` and
  :class:`~axon.engines.torch_dataset.AxonShards` in a ``DataLoader``.
"""

from __future__ import annotations

import json
import math
import os
import resource
import sys
import time
import zlib
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import fsspec

from . import seaweed
from .engine_cells import files_check
from .objects import PREFIX
from .pipelines import WARMUP_FILES, FileSet

LOADER_BATCH = 64  # the DataLoader batch of the iterable readers (tar shards, AxonShards)
SHARD_WORKERS = 4


def digest(data: bytes) -> str:
    """What the check compares for one file: its length and CRC-32."""
    return f"{len(data)}:{zlib.crc32(data):08x}"


@dataclass(frozen=True)
class Spec:
    """What one cell reads, how and from where: plain values, sent as JSON."""

    reader: str  # a key of READERS
    count: int
    size: int
    per_shard: int
    axon: str  # host:port of each server, through the relay
    nginx: str
    s3: str  # the S3 endpoint URL
    floor_seconds: float

    def rels(self, warm: bool = False) -> list[str]:
        rels = FileSet(self.count, self.size).paths()
        return rels[:WARMUP_FILES] if warm else rels

    def shards(self, warm: bool = False) -> list[str]:
        """The tar shards' paths under the served root; to warm up, one of the first few files."""
        return shard_paths(FileSet(self.count, self.size), self.per_shard, warm)

    def nginx_url(self, rel: str) -> str:
        return f"http://{self.nginx}/files/{rel}"

    def axon_url(self, rel: str) -> str:
        return f"axon://{self.axon}/{rel}"

    def s3_path(self, rel: str) -> str:
        return f"{seaweed.BUCKET}/{PREFIX}/{rel}"


def shard_paths(fileset: FileSet, per_shard: int, warm: bool = False) -> list[str]:
    directory = f"shards/{fileset.count}x{fileset.size}-{per_shard}"
    return [f"{directory}/warm.tar"] if warm else \
        [f"{directory}/{k:06}.tar" for k in range(math.ceil(fileset.count / per_shard))]


@dataclass(frozen=True)
class Result:
    digests: list[str]  # every file read, in any order
    settings: str
    batches: int | None = None  # the requests the reader's settings ask for (None: the reader decides)


# -- the peers and the floors ------------------------------------------------------------------


def _gather() -> str:
    from fsspec.asyn import _get_batch_size

    batch = _get_batch_size()
    return "every request at once" if batch <= 0 else f"up to {batch:,} requests at once (fsspec's gather batch)"


def http_cat(spec: Spec, warm: bool) -> Result:
    fs = fsspec.filesystem("http")
    urls = [spec.nginx_url(rel) for rel in spec.rels(warm)]
    out = fs.cat(urls)
    return Result([digest(out[fs._strip_protocol(url)]) for url in urls],
                  f"one `fs.cat(urls)`: {_gather()} on aiohttp's default pool (100 connections)")


def _s3(spec: Spec) -> Any:
    return fsspec.filesystem("s3", key=seaweed.ACCESS_KEY, secret=seaweed.SECRET_KEY,
                             client_kwargs={"region_name": seaweed.REGION}, endpoint_url=spec.s3)


def s3_cat(spec: Spec, warm: bool) -> Result:
    fs = _s3(spec)
    paths = [spec.s3_path(rel) for rel in spec.rels(warm)]
    out = fs.cat(paths)
    return Result([digest(out[path]) for path in paths],
                  f"one `fs.cat(paths)`: {_gather()} on botocore's default pool (10 connections)")


def _one_by_one(read: Callable[[str], bytes], paths: list[str], seconds: float) -> list[str]:
    digests, deadline = [], time.perf_counter() + seconds
    for path in paths:
        if time.perf_counter() >= deadline:
            break
        digests.append(digest(read(path)))
    return digests


def http_floor(spec: Spec, warm: bool) -> Result:
    fs = fsspec.filesystem("http")
    digests = _one_by_one(fs.cat_file, [spec.nginx_url(rel) for rel in spec.rels(warm)], spec.floor_seconds)
    return Result(digests, f"`fs.cat_file(url)` one after another, for {spec.floor_seconds:g} s at most")


def s3_floor(spec: Spec, warm: bool) -> Result:
    digests = _one_by_one(_s3(spec).cat_file, [spec.s3_path(rel) for rel in spec.rels(warm)], spec.floor_seconds)
    return Result(digests, f"`fs.cat_file(path)` one after another, for {spec.floor_seconds:g} s at most")


def _loader(dataset: Any, batch_size: int | None, workers: int) -> Any:
    from torch.utils.data import DataLoader

    return DataLoader(dataset, batch_size=batch_size, num_workers=workers, collate_fn=list)


def webdataset_shards(spec: Spec, warm: bool) -> Result:
    import webdataset as wds

    # empty_check off: with fewer shards than workers (the warm-up's one) a worker reads none
    dataset = wds.WebDataset([spec.nginx_url(p) for p in spec.shards(warm)], shardshuffle=False, empty_check=False)
    digests = [digest(sample["bin"]) for batch in _loader(dataset, LOADER_BATCH, SHARD_WORKERS) for sample in batch]
    return Result(digests, f"`webdataset.WebDataset(shard_urls)` (each shard through `curl`, a new connection), "
                           f"{spec.per_shard} files a shard, DataLoader batch {LOADER_BATCH}, {SHARD_WORKERS} workers")


def tarfile_shards(spec: Spec, warm: bool) -> Result:
    from .tar_shards import TarShards

    dataset = TarShards(spec.nginx, [f"/files/{path}" for path in spec.shards(warm)])
    digests = [digest(data) for batch in _loader(dataset, LOADER_BATCH, SHARD_WORKERS) for _, data in batch]
    return Result(digests, f"`tarfile` on one kept connection a worker, {spec.per_shard} files a shard, "
                           f"DataLoader batch {LOADER_BATCH}, {SHARD_WORKERS} workers")


# -- the bounds: a DataLoader with nothing to read ---------------------------------------------


_MADE: dict[FileSet, list[bytes]] = {}


class InMemory:
    """A map-style dataset of bytes already in memory."""

    def __init__(self, items: list[bytes]) -> None:
        self.items = items

    def __len__(self) -> int:
        return len(self.items)

    def __getitem__(self, index: int) -> bytes:
        return self.items[index]

    def __getitems__(self, indices: list[int]) -> list[bytes]:
        return [self.items[i] for i in indices]


def loader_alone(batch: int, workers: int) -> Callable[[Spec, bool], Result]:
    """The ``DataLoader`` of ``batch`` and ``workers`` over the set's bytes in memory: all of them
    made by the warm-up (untimed), and the timed read hands them through the workers as a reader
    in that ``DataLoader`` would."""
    def read(spec: Spec, warm: bool) -> Result:
        fileset = FileSet(spec.count, spec.size)
        if fileset not in _MADE:
            _MADE[fileset] = [fileset.content(index) for index in range(spec.count)]
        items = _MADE[fileset][:WARMUP_FILES] if warm else _MADE[fileset]
        digests = [digest(data) for chunk in _loader(InMemory(items), batch, workers) for data in chunk]
        return Result(digests, f"DataLoader batch {batch}, {workers} workers, over the files' bytes in memory")

    return read


# -- Axon --------------------------------------------------------------------------------------


def axon_cat(spec: Spec, warm: bool) -> Result:
    fs = fsspec.filesystem("axon")
    urls = [spec.axon_url(rel) for rel in spec.rels(warm)]
    out = fs.cat(urls)
    return Result([digest(out[fs._strip_protocol(url)]) for url in urls], "one `fs.cat(urls)`, axon://'s defaults")


def axon_dataset(batch: int, workers: int, ahead: bool = False) -> Callable[[Spec, bool], Result]:
    """AxonDataset in a plain ``DataLoader``, or (``ahead``) in its own ``.loader``, which reads
    each process's next batches while one is used."""
    def read(spec: Spec, warm: bool) -> Result:
        from ..engines.torch_dataset import AxonDataset

        rels = spec.rels(warm)
        with AxonDataset([spec.axon_url(rel) for rel in rels]) as dataset:
            if ahead:
                loader = dataset.loader(batch, num_workers=workers, collate_fn=list)
                how = f"`dataset.loader(batch_size={batch}, num_workers={workers})`, reading ahead"
            else:
                loader = _loader(dataset, batch, workers)
                how = f"DataLoader batch {batch}, {workers} workers"
            digests = [digest(data) for items in loader for data in items]
        return Result(digests, how, math.ceil(len(rels) / batch))

    return read


def axon_shards(spec: Spec, warm: bool) -> Result:
    from ..engines.torch_dataset import AxonShards

    rels = spec.rels(warm)
    per_shard = spec.per_shard if not warm else len(rels)
    dataset = AxonShards.from_paths([spec.axon_url(rel) for rel in rels], per_shard)
    digests = [digest(data) for batch in _loader(dataset, LOADER_BATCH, SHARD_WORKERS) for _, data in batch]
    return Result(digests, f"`AxonShards.from_paths(urls, {spec.per_shard})`, DataLoader batch {LOADER_BATCH}, "
                           f"{SHARD_WORKERS} workers", math.ceil(len(rels) / per_shard))


@dataclass(frozen=True)
class Reader:
    label: str
    kind: str  # "peer" | "floor" | "bound" | "axon"
    server: str  # "http" (nginx) | "s3" | "axon": whose records count its requests (a bound's: none)
    read: Callable[[Spec, bool], Result]


READERS = {
    "http-cat": Reader("HTTPFileSystem on nginx, concurrent `cat`", "peer", "http", http_cat),
    "webdataset": Reader("nginx tar shards, webdataset", "peer", "http", webdataset_shards),
    "tarfile": Reader("nginx tar shards, tarfile", "peer", "http", tarfile_shards),
    "s3-cat": Reader("s3fs on SeaweedFS, concurrent `cat`", "peer", "s3", s3_cat),
    "http-floor": Reader("HTTPFileSystem on nginx, one file after another", "floor", "http", http_floor),
    "s3-floor": Reader("s3fs on SeaweedFS, one file after another", "floor", "s3", s3_floor),
    **{f"alone-{b}-{w}": Reader(f"DataLoader alone, batch {b}, {w} workers (no I/O)", "bound", "axon",
                                loader_alone(b, w))
       for b, w in ((64, 0), (64, 4), (256, 4))},
    "axon-cat": Reader("`fs.cat` over axon://", "axon", "axon", axon_cat),
    **{f"dataset-{b}-{w}": Reader(f"AxonDataset, batch {b}, {w} workers", "axon", "axon", axon_dataset(b, w))
       for b in (64, 256) for w in (0, 4)},
    **{f"ahead-{b}-{w}": Reader(f"AxonDataset.loader, batch {b}, {w} workers (reads ahead)", "axon", "axon",
                                axon_dataset(b, w, ahead=True))
       for b in (64, 256) for w in (0, 4)},
    "shards": Reader("AxonShards, 4 workers", "axon", "axon", axon_shards),
}


def main(text: str) -> None:
    spec = Spec(**json.loads(text))
    out = os.fdopen(os.dup(1), "w", buffering=1)
    os.dup2(2, 1)  # the libraries' own output to stderr: stdout carries our two lines
    read = READERS[spec.reader].read
    warm = read(spec, True)
    print(json.dumps({"ready": True, "settings": warm.settings}), file=out)
    sys.stdin.readline()
    cpu, started = cpu_seconds(), time.perf_counter()
    result = read(spec, False)
    seconds = time.perf_counter() - started
    cpu = cpu_seconds() - cpu
    print(json.dumps({"seconds": seconds, "files": len(result.digests), "check": files_check(result.digests),
                      "batches": result.batches, "cpu": cpu}), file=out)


def cpu_seconds() -> float:
    """CPU seconds of this process and of its children that ended (and were waited for)."""
    return sum(usage.ru_utime + usage.ru_stime
               for usage in map(resource.getrusage, (resource.RUSAGE_SELF, resource.RUSAGE_CHILDREN)))


if __name__ == "__main__":
    main(sys.argv[1])
