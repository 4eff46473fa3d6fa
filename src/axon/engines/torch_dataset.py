"""PyTorch datasets over an Axon server: a sampler's batch in one request, tar shards per worker.

- :class:`AxonDataset` is map-style over a list of files. ``DataLoader`` calls its
  ``__getitems__`` with a sampler's whole batch, which is read as one ``POST /api/stream-files``
  (several when the batch passes the server's ``max_files``). Its :meth:`~AxonDataset.loader`
  (or a ``DataLoader`` given an :class:`AheadBatchSampler`) tells each process which batches it
  reads next, and the dataset reads them while the current one is used (:mod:`.ahead`).
- :class:`AxonShards` is iterable over shards, each a list of files the server sends as one tar
  (``POST /api/stream-files.tar``), read as it arrives. Shards are dealt out to the ranks of a
  ``torch.distributed`` job and, within a rank, to the ``DataLoader``'s workers.

Both keep plain values only (paths, options, the decode hook), so they pickle for a ``spawn``
worker, and each process builds its own filesystem (and with it its own connections) the first
time it reads: a forked worker never touches the session of its parent.
"""

from __future__ import annotations

import asyncio
import collections
import functools
import operator
import os
import random
import tarfile
import time
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import Future
from typing import Any

from ..errors import needs_extra

with needs_extra("torch", "AxonDataset and AxonShards", "torch"):
    import torch.distributed
    from torch.utils.data import DataLoader, Dataset, IterableDataset, RandomSampler, SequentialSampler, get_worker_info

from ..batchclient.errors import FetchError
from ..batchclient.refusal import error_object
from ..batchclient.request import BatchRequest, build_request
from ..batchclient.tar_reader import tar_files
from ..batchclient.transport import Connections, RoundTrip
from ..fsspec import AxonFileSystem
from ..fsspec.errors import error_for
from ..fsspec.servers import ServerLimits
from ..signing import mint_token
from .ahead import AHEAD, AHEAD_BYTES, Ahead
from .file_groups import axon_filesystem
from .torch_ahead import AheadBatchSampler, AheadLoader

__all__ = ["AheadBatchSampler", "AxonDataset", "AxonShards"]

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
    """The filesystem for these options, and the reads ahead on it, built once in each process
    that reads.

    A forked ``DataLoader`` worker inherits the parent's filesystem object, whose event loop and
    aiohttp session belong to the parent (fsspec refuses it: "not fork-safe"); the process id
    tells that the object is not ours, and a new one is built. Pickling drops it altogether.
    The filesystem is this dataset's own (not fsspec's cached instance), so closing it closes
    this dataset's connections and no one else's. What the parent learnt of the servers' limits
    is handed on (through the fork, or the pickle of a ``spawn`` worker): a worker does not ask
    ``/api/limits`` again before its first batch.
    """

    def __init__(self, storage_options: dict[str, Any], ahead: int, ahead_bytes: int,
                 limits: dict[str, ServerLimits] | None = None) -> None:
        self.storage_options = storage_options
        self.limit, self.max_bytes = ahead, ahead_bytes
        self._fs: AxonFileSystem | None = None
        self._ahead = Ahead(ahead, ahead_bytes)  # a bad bound is refused here, not in a worker
        self._pid: int | None = None
        self._limits = dict(limits or {})  # learnt in the process this object came from

    def get(self) -> tuple[AxonFileSystem, Ahead]:
        if self._fs is None or self._pid != os.getpid():
            known = self.known_limits()  # the parent's, before its filesystem is replaced
            self._fs = AxonFileSystem(skip_instance_cache=True, **self.storage_options)
            self._fs.learn_limits(known)
            self._ahead = Ahead(self.limit, self.max_bytes)
            self._pid = os.getpid()
        return self._fs, self._ahead

    def known_limits(self) -> dict[str, ServerLimits]:
        return {**self._limits, **(self._fs.known_limits() if self._fs is not None else {})}

    def cancel_ahead(self) -> None:
        """Cancel this process's reads ahead, if it read at all (nothing is built to say so)."""
        if self._fs is not None and self._pid == os.getpid():
            self._ahead.cancel()

    def close(self) -> None:
        """Cancel this process's reads ahead and close its connections (a later read opens new ones)."""
        self.cancel_ahead()
        if self._fs is not None and self._pid == os.getpid():
            self._fs.close()

    def __getstate__(self) -> dict[str, Any]:
        return {"storage_options": self.storage_options, "ahead": self.limit, "ahead_bytes": self.max_bytes,
                "limits": self.known_limits()}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__init__(state["storage_options"], state["ahead"], state["ahead_bytes"], state.get("limits"))


class AxonDataset(Dataset):
    """Map-style: sample ``i`` is ``decode(paths[i], bytes of paths[i])`` (the bytes if no hook).

    ``DataLoader(AxonDataset(paths), batch_size=64)`` reads each batch of 64 files in one request;
    in order (no shuffle) it reads each process's next batches while the current one is used: at
    most ``ahead`` batches (default 16) beyond the one asked for, per process, each still one
    request, and no more than ``ahead_bytes`` (default 64 MiB) hold at the size of the largest
    batch read so far (4 before the first batch was read). ``dataset.loader(batch_size=64, shuffle=True, num_workers=...)`` reads ahead in any
    order (its sampler names the next batches). ``close()`` (or leaving ``with dataset:``)
    cancels the reads ahead and closes the connections; a later read opens new ones.
    ``storage_options`` go to :class:`~axon.fsspec.AxonFileSystem` (``secret``, ``scheme``, ...).
    A file the server lacks raises ``FileNotFoundError`` (other refusals as ``axon://`` raises
    them), on the batch that names it. For ``spawn`` workers the hook must pickle (a
    module-level function, not a lambda).
    """

    def __init__(self, paths: Sequence[str], decode: Decode | None = None, *,
                 storage_options: dict[str, Any] | None = None, ahead: int = AHEAD,
                 ahead_bytes: int = AHEAD_BYTES) -> None:
        if isinstance(paths, str):
            raise TypeError("paths is a list of paths, not one string")
        self.paths = [_strip(p) for p in paths]
        self.decode = decode
        self._fs = _PerProcess(dict(storage_options or {}), ahead, ahead_bytes)

    def __len__(self) -> int:
        return len(self.paths)

    def __getitem__(self, index: int) -> Any:
        path = self.paths[operator.index(index)]  # IndexError past the end, as a list's
        return self._sample(path, self._fs.get()[0].cat_file(path))

    def __getitems__(self, indices: Sequence[int]) -> list[Any]:
        """The samples of a sampler's batch. The reads of the batches this process gets next
        start (up to the bound) before this one is waited for: those a
        :class:`~.ahead.PlannedBatch` names, or, for a run of consecutive indices (a plain
        ``DataLoader`` in order), the runs that follow it, once the order is seen
        (:meth:`~.ahead.Ahead.in_order`)."""
        fs, ahead = self._fs.get()
        key = getattr(indices, "key", None)
        if key is not None:
            following = indices.ahead
        else:
            info = get_worker_info()
            worker, workers = (0, 1) if info is None else (info.id, info.num_workers)
            key, following = ahead.in_order(indices, len(self.paths), worker, workers)
        read = None if key is None else ahead.take(key, indices)
        if read is None:
            read = self._start(fs, indices)
        ahead.plan(following, functools.partial(self._start, fs))
        contents = read.result()
        ahead.measured(sum(map(len, contents)))
        return [self._sample(self.paths[i], data) for i, data in zip(indices, contents)]

    def _start(self, fs: AxonFileSystem, indices: Sequence[int]) -> Future:
        """The read of these files, started on the filesystem's loop; an index past the end is
        the future's IndexError, raised on the batch that holds it."""
        try:
            paths = [self.paths[operator.index(i)] for i in indices]
        except (IndexError, TypeError) as exc:
            failed: Future = Future()
            failed.set_exception(exc)
            return failed
        # cat_ranges, not cat: cat reads "[", "*" and "?" in a name as a glob, and would ask the
        # server's listing; whole files (None, None) are sent as one batch all the same.
        read = fs._cat_ranges(paths, None, None, on_error="raise", one_batch=True)
        return asyncio.run_coroutine_threadsafe(read, fs.loop)

    def _sample(self, path: str, data: bytes) -> Any:
        return data if self.decode is None else self.decode(path, data)

    def loader(self, batch_size: int = 1, *, shuffle: bool = False, drop_last: bool = False, num_workers: int = 0,
               generator: torch.Generator | None = None, **kwargs: Any) -> DataLoader:
        """A ``DataLoader`` over this dataset whose batches are read ahead (see the class). The
        arguments are ``DataLoader``'s; leaving the loop, or closing its iterator, cancels the
        reads ahead of this process (workers end with their iterator)."""
        if kwargs.get("in_order") is False:
            raise ValueError("reading ahead plans which worker gets which batch: in_order=False would undo it")
        sampler = RandomSampler(self, generator=generator) if shuffle else SequentialSampler(self)
        batches = AheadBatchSampler(sampler, batch_size, drop_last, num_workers=num_workers, ahead=self._fs.limit)
        return AheadLoader(self, batch_sampler=batches, num_workers=num_workers, **kwargs)

    def ask_limits(self) -> None:
        """Ask the servers of ``paths`` their limits now, in this process (each once in its life):
        workers started after this take them from it and go straight to their first batch. The
        loader asks before its workers start. A server that does not answer is left for the
        workers, which raise what a read raises."""
        fs, _ = self._fs.get()
        for netloc in dict.fromkeys(path.partition("/")[0] for path in self.paths):
            try:
                fs.server_limits(netloc)
            except OSError:
                return

    def stop_reading_ahead(self) -> None:
        """Cancel the reads ahead this process has in flight (the loader does, as it is left)."""
        self._fs.cancel_ahead()

    def close(self) -> None:
        self._fs.close()

    def __enter__(self) -> AxonDataset:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()


class AxonShards(IterableDataset):
    """Iterable over shards: each shard a list of files on one server, read as one tar.

    Yields ``decode(path, data)`` for every file of every shard this process's worker gets, in
    the shard's order (``(path, data)`` with no hook); each file's ``bytes`` are read from the
    socket into one object, never joined from chunks. While one shard is read the next ``ahead`` (default 1, at
    most that many) are asked for, each on a connection kept from shard to shard; leaving the
    loop (or closing its iterator) closes them. Shard ``k`` goes to worker slot
    ``k % (world_size * num_workers)``, the slot of worker ``w`` of rank ``r`` being
    ``r * num_workers + w``; ``rank`` and ``world_size`` are ``torch.distributed``'s when it is
    initialised, unless given. With ``shuffle=True`` the shard order is a permutation drawn from
    ``seed`` and the epoch (:meth:`set_epoch`), the same on every rank, so the ranks still split it.
    A shard longer than the server's ``max_files`` is refused by the server (``OSError``, E2BIG).
    Of the ``axon://`` ``storage_options``, the tar requests use ``scheme``, ``secret`` and ``token``.
    """

    def __init__(self, shards: Sequence[Sequence[str]], decode: Decode | None = None, *,
                 rank: int | None = None, world_size: int | None = None, shuffle: bool = False, seed: int = 0,
                 storage_options: dict[str, Any] | None = None, timeout: float = 60.0, ahead: int = 1) -> None:
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
        Ahead(ahead)  # the same bound's check
        self.ahead = ahead

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
        """The files of this worker's shards, the next ``ahead`` shards asked for while one is
        read, each on a connection kept from shard to shard; leaving the loop closes them all."""
        pool = Connections(self.timeout)
        trips: collections.deque[tuple[str, list[str], RoundTrip]] = collections.deque()
        following = iter(self.my_shards())

        def ask_next() -> None:
            shard = next(following, None)
            if shard is not None:
                netloc = shard[0].partition("/")[0]
                rels = [p.partition("/")[2] for p in shard]
                trip = RoundTrip(self._request(netloc, rels), self.timeout, pool=pool)
                trip.send()  # a failure is raised when this shard's turn comes
                trips.append((netloc, rels, trip))

        try:
            for _ in range(1 + self.ahead):
                ask_next()
            while trips:
                netloc, rels, trip = trips[0]
                for path, data in self._read_tar(netloc, rels, trip):
                    yield (path, data) if self.decode is None else self.decode(path, data)
                trips.popleft()
                trip.close()  # its connection, read to the end, carries a later shard
                ask_next()
        finally:
            pool.close()

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

    def _request(self, netloc: str, rels: list[str]) -> BatchRequest:
        """The batch client's tar request for one shard (:mod:`axon.batchclient.request`), on a
        kept connection. No redirect is followed (the bearer token goes to this server only) and
        no proxy of the environment is used, as for ``axon://``."""
        scheme = self.storage_options.get("scheme", "http")
        headers = {"Connection": "keep-alive", **self._auth()}
        return build_request(f"{scheme}://{netloc}/", rels, method="POST", fmt="tar", headers=headers)

    def _read_tar(self, netloc: str, rels: list[str], trip: RoundTrip) -> Iterator[tuple[str, bytes]]:
        """Each file of one tar batch as it arrives: ``("host:port/dir/file", bytes)``, each
        file's bytes read from the socket into one object (:mod:`axon.batchclient.tar_reader`).

        The server refuses the whole batch before its first byte if any file is missing; a cut
        answer ends in ``tarfile.ReadError``. A refusal that is not Axon's JSON error has the
        server's ``/api/limits`` asked, as ``axon://`` does: another kind of server is
        :class:`~axon.fsspec.errors.NotAxonServer`, not a missing file.
        """
        scheme = self.storage_options.get("scheme", "http")
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
        try:
            for name, data in tar_files(trip.read_exactly):
                yield f"{netloc}/{name}", data
        except FetchError as exc:
            raise tarfile.ReadError(f"{scheme}://{netloc}: the shard's tar was cut short: {exc}") from exc

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
