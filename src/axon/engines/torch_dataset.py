"""PyTorch datasets over an Axon server: a sampler's batch in one request, tar shards per worker.

- :class:`AxonDataset` is map-style over a list of files. ``DataLoader`` calls its
  ``__getitems__`` with a sampler's whole batch, which is read as one ``POST /api/stream-files``
  (several when the batch passes the server's ``max_files``).
- :class:`AxonShards` is iterable over shards, each a list of files the server sends as one tar
  (``POST /api/stream-files.tar``), read as it arrives. Shards are dealt out to the ranks of a
  ``torch.distributed`` job and, within a rank, to the ``DataLoader``'s workers.

Both keep plain values only (paths, options, the decode hook), so they pickle for a ``spawn``
worker, and each process builds its own filesystem (and with it its own connections) the first
time it reads: a forked worker never touches the session of its parent.
"""

from __future__ import annotations

import operator
import os
import random
import tarfile
import time
from collections.abc import Callable, Iterator, Sequence
from typing import Any

from ..errors import needs_extra

with needs_extra("torch", "AxonDataset and AxonShards", "torch"):
    import torch.distributed
    from torch.utils.data import Dataset, IterableDataset, get_worker_info

from ..batchclient.errors import FetchError
from ..batchclient.refusal import error_object
from ..batchclient.request import build_request
from ..batchclient.transport import RoundTrip
from ..fsspec import AxonFileSystem
from ..fsspec.errors import error_for
from ..signing import mint_token
from .file_groups import axon_filesystem

__all__ = ["AxonDataset", "AxonShards"]

#: ``decode(path, data)``: a file's bytes to a sample; ``path`` is ``host:port/dir/file``.
Decode = Callable[[str, bytes], Any]

TOKEN_LIFETIME = 3600  # seconds a bearer token minted for one shard request stays valid


def _strip(path: str) -> str:
    """``axon://host:port/dir/file`` or ``host:port/dir/file`` -> ``host:port/dir/file``."""
    if not isinstance(path, str):
        raise TypeError(f"a path is a string (axon://host:port/dir/file), not {type(path).__name__}")
    stripped = path.removeprefix("axon://")
    netloc, _, rel = stripped.partition("/")
    if not netloc or not rel or "://" in stripped:
        raise ValueError(f"an axon path is axon://host:port/dir/file (or host:port/dir/file), not {path!r}")
    return stripped


class _PerProcess:
    """The filesystem for these options, built once in each process that reads.

    A forked ``DataLoader`` worker inherits the parent's filesystem object, whose event loop and
    aiohttp session belong to the parent (fsspec refuses it: "not fork-safe"); the process id
    tells that the object is not ours, and a new one is built. Pickling drops it altogether.
    """

    def __init__(self, storage_options: dict[str, Any]) -> None:
        self.storage_options = storage_options
        self._fs: AxonFileSystem | None = None
        self._pid: int | None = None

    def get(self) -> AxonFileSystem:
        if self._fs is None or self._pid != os.getpid():
            # fsspec keeps one instance per options and process, shared by every dataset here.
            self._fs = AxonFileSystem(**self.storage_options)
            self._pid = os.getpid()
        return self._fs

    def __getstate__(self) -> dict[str, Any]:
        return {"storage_options": self.storage_options}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__init__(state["storage_options"])


class AxonDataset(Dataset):
    """Map-style: sample ``i`` is ``decode(paths[i], bytes of paths[i])`` (the bytes if no hook).

    ``DataLoader(AxonDataset(paths), batch_size=64)`` reads each batch of 64 files in one request.
    ``storage_options`` go to :class:`~axon.fsspec.AxonFileSystem` (``secret``, ``scheme``, ...).
    A file the server lacks raises ``FileNotFoundError`` (other refusals as ``axon://`` raises them).
    For ``spawn`` workers the hook must pickle (a module-level function, not a lambda).
    """

    def __init__(self, paths: Sequence[str], decode: Decode | None = None, *,
                 storage_options: dict[str, Any] | None = None) -> None:
        if isinstance(paths, str):
            raise TypeError("paths is a list of paths, not one string")
        self.paths = [_strip(p) for p in paths]
        self.decode = decode
        self._fs = _PerProcess(dict(storage_options or {}))

    def __len__(self) -> int:
        return len(self.paths)

    def __getitem__(self, index: int) -> Any:
        path = self.paths[operator.index(index)]  # IndexError past the end, as a list's
        return self._sample(path, self._fs.get().cat_file(path))

    def __getitems__(self, indices: Sequence[int]) -> list[Any]:
        paths = [self.paths[operator.index(i)] for i in indices]
        if not paths:
            return []
        # cat_ranges, not cat: cat reads "[", "*" and "?" in a name as a glob, and would ask the
        # server's listing; whole files (None, None) are sent as one batch all the same.
        contents = self._fs.get().cat_ranges(paths, None, None, on_error="raise")
        return [self._sample(path, data) for path, data in zip(paths, contents)]

    def _sample(self, path: str, data: bytes) -> Any:
        return data if self.decode is None else self.decode(path, data)


class AxonShards(IterableDataset):
    """Iterable over shards: each shard a list of files on one server, read as one tar.

    Yields ``decode(path, data)`` for every file of every shard this process's worker gets, in
    the shard's order (``(path, data)`` with no hook). Shard ``k`` goes to worker slot
    ``k % (world_size * num_workers)``, the slot of worker ``w`` of rank ``r`` being
    ``r * num_workers + w``; ``rank`` and ``world_size`` are ``torch.distributed``'s when it is
    initialised, unless given. With ``shuffle=True`` the shard order is a permutation drawn from
    ``seed`` and the epoch (:meth:`set_epoch`), the same on every rank, so the ranks still split it.
    A shard longer than the server's ``max_files`` is refused by the server (``OSError``, E2BIG).
    Of the ``axon://`` ``storage_options``, the tar requests use ``scheme``, ``secret`` and ``token``.
    """

    def __init__(self, shards: Sequence[Sequence[str]], decode: Decode | None = None, *,
                 rank: int | None = None, world_size: int | None = None, shuffle: bool = False, seed: int = 0,
                 storage_options: dict[str, Any] | None = None, timeout: float = 60.0) -> None:
        shards = [shards] if isinstance(shards, str) else list(shards)
        if any(isinstance(shard, str) for shard in shards):
            raise TypeError("shards is a list of shards, each a list of paths")
        self.shards = [_shard(shard) for shard in shards]
        if (rank is None) != (world_size is None):
            raise ValueError("give both rank and world_size, or neither (then torch.distributed's are used)")
        if world_size is not None and not 0 <= rank < world_size:
            raise ValueError(f"rank is in [0, world_size), not {rank} of {world_size}")
        self.decode = decode
        self.rank, self.world_size = rank, world_size
        self.shuffle, self.seed, self.epoch = shuffle, seed, 0
        self.storage_options = dict(storage_options or {})
        self.timeout = timeout

    @classmethod
    def from_paths(cls, paths: Sequence[str], files_per_shard: int, decode: Decode | None = None,
                   **kwargs: Any) -> AxonShards:
        """Shards of ``files_per_shard`` consecutive files of ``paths`` (the last may be shorter)."""
        if files_per_shard < 1:
            raise ValueError("files_per_shard is at least 1")
        paths = list(paths)
        return cls([paths[i : i + files_per_shard] for i in range(0, len(paths), files_per_shard)], decode, **kwargs)

    def set_epoch(self, epoch: int) -> None:
        """Draw the next epoch's shard order (with ``shuffle=True``); call it on every rank."""
        self.epoch = epoch

    def __iter__(self) -> Iterator[Any]:
        for shard in self.my_shards():
            netloc = shard[0].partition("/")[0]
            for path, data in self._read_tar(netloc, [p.partition("/")[2] for p in shard]):
                yield (path, data) if self.decode is None else self.decode(path, data)

    def my_shards(self) -> list[list[str]]:
        """The shards this rank's worker reads (all of them in a single process)."""
        order = list(self.shards)
        if self.shuffle:
            random.Random(self.seed + self.epoch).shuffle(order)
        info = get_worker_info()
        worker, workers = (info.id, info.num_workers) if info is not None else (0, 1)
        rank, world_size = self._rank_and_world_size()
        return order[rank * workers + worker :: world_size * workers]

    def _rank_and_world_size(self) -> tuple[int, int]:
        if self.world_size is not None:
            return self.rank, self.world_size
        if torch.distributed.is_available() and torch.distributed.is_initialized():
            return torch.distributed.get_rank(), torch.distributed.get_world_size()
        return 0, 1

    def _read_tar(self, netloc: str, rels: list[str]) -> Iterator[tuple[str, bytes]]:
        """Each file of one tar batch as it arrives: ``("host:port/dir/file", bytes)``.

        The request is the batch client's (:mod:`axon.batchclient.request`), sent by its blocking
        transport (:class:`~axon.batchclient.transport.RoundTrip`) on a connection of its own:
        nothing outlives the iteration, so nothing is shared across a fork; no redirect is
        followed (the bearer token goes to this server only) and no proxy of the environment is
        used, as for ``axon://``. The server refuses the whole batch before its first byte if any
        file is missing; a cut answer ends in ``tarfile.ReadError``. A refusal that is not Axon's
        JSON error has the server's ``/api/limits`` asked, as ``axon://`` does: another kind of
        server is :class:`~axon.fsspec.errors.NotAxonServer`, not a missing file.
        """
        scheme = self.storage_options.get("scheme", "http")
        request = build_request(f"{scheme}://{netloc}/", rels, method="POST", fmt="tar", headers=self._auth())
        with RoundTrip(request, self.timeout) as trip:
            try:
                head = trip.start()
            except FetchError as exc:  # as axon:// says it: the server named by host and port
                kind = TimeoutError if isinstance(exc.__cause__, TimeoutError) else ConnectionError
                raise kind(f"{scheme}://{netloc} failed for a shard: {exc}") from exc
            if head.status != 200:
                body = trip.error_body()
                if error_object(body) is None:  # not Axon's JSON error: NotAxonServer if no Axon is there
                    axon_filesystem(self.storage_options).server_limits(netloc)
                raise _refusal(head.status, head.reason, body, netloc, rels)
            with tarfile.open(fileobj=trip, mode="r|") as archive:
                for member in archive:
                    if member.isfile():
                        yield f"{netloc}/{member.name}", archive.extractfile(member).read()

    def _auth(self) -> dict[str, str]:
        secret, token = self.storage_options.get("secret"), self.storage_options.get("token")
        if secret:
            token = mint_token(secret, int(time.time()) + TOKEN_LIFETIME)
        return {"Authorization": f"Bearer {token}"} if token else {}


def _shard(paths: Sequence[str]) -> list[str]:
    shard = [_strip(p) for p in paths]
    if not shard:
        raise ValueError("a shard holds at least one file")
    netlocs = {p.partition("/")[0] for p in shard}
    if len(netlocs) > 1:
        raise ValueError(f"a shard is one request, to one server; this one names {sorted(netlocs)}")
    return shard


def _refusal(status: int, reason: str, body: bytes, netloc: str, rels: list[str]) -> Exception:
    """The exception ``axon://`` raises for the same refusal, naming the paths the server named."""
    error = error_object(body) or {}
    named = error.get("paths") or rels
    where = f"{netloc}/{named[0]}" if len(named) == 1 else f"{netloc}: {', '.join(map(str, named[:5]))}"
    return error_for(status, str(error.get("message") or reason or ""), where)
