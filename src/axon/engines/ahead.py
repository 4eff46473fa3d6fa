"""Batches read before they are asked for: a bounded set of reads in flight, each known by its
batch's place in the sampler's order, so the round trip of the next batch overlaps the work on
this one.

A sampler that knows its order (:class:`~.torch_ahead.AheadBatchSampler`) hands each batch
out as a :class:`PlannedBatch`: its indices, its :data:`Key` (which pass over the data, which
batch of it), and the batches the same process will be asked for next. A plain ``DataLoader``
over a ``SequentialSampler`` says nothing, but its batches are runs of consecutive indices, dealt
to the workers in turn: :func:`in_order` plans the runs that come next from the run at hand, and
:meth:`Ahead.in_order` trusts that plan for the first run of an ordered pass and for a run that
the run before it foretold (a sampler of shuffled runs seldom gives either, and has no read ahead
wasted otherwise).
The dataset then keeps an :class:`Ahead`: the reads of those next batches started now, at most
``limit`` of them and, once a batch was read, as many as fit ``max_bytes`` at the size of the
largest batch read so far (small files: many batches overlap their round trips; large ones: the
memory they hold stays bounded), each taken by the batch it was started for (the same indices). A read ahead
that no batch takes (the caller stopped early, a worker got another batch than planned, the
order was not the one guessed) is cancelled as soon as a later batch plans without it, or on
:meth:`Ahead.cancel`; nothing reads beyond the bound, and a failed read raises on the batch that
asked for it, not before.

Torch-free: the futures are ``concurrent.futures``' (the reads run on fsspec's IO loop).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from concurrent.futures import Future
from typing import Any

__all__ = ["AHEAD", "AHEAD_BYTES", "Ahead", "Key", "PlannedBatch", "in_order"]

AHEAD = 16  # batches a process reads beyond the one asked for, by default, at most
AHEAD_BYTES = 64 << 20  # the bytes those batches may hold, by default, estimated (see Ahead)
#: Batches read ahead before any batch's size is known: the start of a pass cannot tell 4 KiB
#: files from 64 MiB ones, so it reads no further ahead than it did before the bytes counted.
UNMEASURED = 4

#: ``(pass, position)``: a pass over the data (a random token drawn as the sampler starts one)
#: and the batch's position in it.
Key = tuple[str, int]

IN_ORDER = "in order"  # the pass of the runs :func:`in_order` plans


class PlannedBatch(list):
    """A batch's indices (a list, as ``DataLoader`` expects), with its :data:`Key` and
    ``ahead``: ``(key, indices)`` of the batches this process reads next, in order. It pickles
    as it is into a worker's queue."""

    def __init__(self, indices: Sequence[int], key: Key, ahead: Sequence[tuple[Key, list[int]]] = ()) -> None:
        super().__init__(indices)
        self.key = key
        self.ahead = list(ahead)


def in_order(indices: Sequence[int], count: int, workers: int, limit: int) -> tuple[Key | None, list[tuple[Key, range]]]:
    """A batch that is a run of consecutive indices, as a ``DataLoader`` over a
    ``SequentialSampler`` makes them: its key, and the runs of the same length that this process
    is asked for next, ``workers`` runs apart (the loader deals batches to its workers in turn),
    the last one cut at ``count``; at most ``limit``. Any other batch: ``(None, [])``."""
    size = len(indices)
    first = indices[0] if size else None
    if first is None or not 0 <= first <= count - size or list(indices) != list(range(first, first + size)):
        return None, []
    stride = size * max(workers, 1)
    starts = range(first + stride, count, stride)[:limit]
    return (IN_ORDER, first), [((IN_ORDER, start), range(start, min(start + size, count))) for start in starts]


class Ahead:
    """The reads in flight for batches not asked for yet, by key: at most ``limit``, and at most
    as many as ``max_bytes`` holds at the size of the largest batch :meth:`measured` (at least
    one; :data:`UNMEASURED` before any was)."""

    def __init__(self, limit: int, max_bytes: int = AHEAD_BYTES) -> None:
        if isinstance(limit, bool) or not isinstance(limit, int) or limit < 0:
            raise ValueError(f"the batches read ahead are a count >= 0, not {limit!r}")
        if isinstance(max_bytes, bool) or not isinstance(max_bytes, int) or max_bytes < 1:
            raise ValueError(f"the bytes read ahead are a count >= 1, not {max_bytes!r}")
        self.limit = limit
        self.max_bytes = max_bytes
        self._largest = 0  # bytes of the largest batch read so far
        self._reads: dict[Key, tuple[list[int], Future]] = {}
        self._foretold: Key | None = None  # the run the last run in order said comes next

    def in_order(self, indices: Sequence[int], count: int, worker: int, workers: int,
                 ) -> tuple[Key | None, list[tuple[Key, range]]]:
        """:func:`in_order`'s key and plan for this batch (``worker`` of ``workers``, 0 of 1
        without workers); the plan is empty unless the run is the one the run before it foretold,
        or the first an ordered pass gives this worker, where no run foretold another (the order
        is then the one guessed, not a chance run)."""
        key, following = in_order(indices, count, workers, max(self.limit, 1))
        foretold, self._foretold = self._foretold, following[0][0] if following else None
        first_of_pass = foretold is None and key is not None and key[1] == worker * len(indices)
        trusted = key is not None and (key == foretold or first_of_pass)
        return key, following[: self.limit] if trusted else []

    def __len__(self) -> int:
        return len(self._reads)

    def measured(self, size: int) -> None:
        """A batch was read and held ``size`` bytes."""
        self._largest = max(self._largest, size)

    @property
    def room(self) -> int:
        """How many reads may be in flight now."""
        if not self._largest:
            return min(self.limit, UNMEASURED)
        return min(self.limit, max(1, self.max_bytes // self._largest))

    def take(self, key: Key, indices: Sequence[int]) -> Future | None:
        """The read started for ``key``, if one was for these very indices; reads planned before
        ``key`` (older passes, earlier positions) will never be asked for now, and are cancelled."""
        started = self._reads.pop(key, None)
        for stale in [k for k in self._reads if k[0] != key[0] or k[1] < key[1]]:
            self._reads.pop(stale)[1].cancel()
        if started is None:
            return None
        planned, read = started
        if planned != list(indices):  # the same place, another batch (another batch size)
            read.cancel()
            return None
        return read

    def plan(self, batches: Sequence[tuple[Key, Sequence[int]]], start: Callable[[Any], Future]) -> None:
        """Cancel the reads that ``batches`` no longer names; then start ``start(indices)`` for
        the first of ``batches`` not already under way, while fewer than :attr:`room` reads are
        in flight."""
        named = {key for key, _ in batches}
        for gone in [key for key in self._reads if key not in named]:
            self._reads.pop(gone)[1].cancel()
        room = self.room
        for key, indices in batches:
            if len(self._reads) >= room:
                return
            if key not in self._reads:
                self._reads[key] = (list(indices), start(indices))

    def cancel(self) -> None:
        """Cancel every read still in flight (their connections close with them)."""
        reads, self._reads = self._reads, {}
        for _, read in reads.values():
            read.cancel()
