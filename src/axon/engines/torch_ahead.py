"""The torch side of reading ahead (:mod:`.ahead`): a batch sampler that tells each batch which
batches its process gets next, and a ``DataLoader`` that stops the reads ahead when its loop is left.
"""

from __future__ import annotations

import collections
import secrets
from collections.abc import Iterator, Sequence
from typing import Any

from ..errors import needs_extra

with needs_extra("torch", "AxonDataset and AxonShards", "torch"):
    from torch.utils.data import BatchSampler, DataLoader, Sampler

from .ahead import AHEAD, Ahead, PlannedBatch

__all__ = ["AheadBatchSampler", "AheadLoader"]


class AheadBatchSampler(BatchSampler):
    """``BatchSampler``'s batches, each a :class:`~.ahead.PlannedBatch` naming the ``ahead``
    batches the same process gets next: ``DataLoader`` deals batches to its ``num_workers``
    workers in turn (batch ``k`` to worker ``k % num_workers``), so those are ``k + num_workers``,
    ``k + 2 * num_workers``... (``k + 1``, ``k + 2``... without workers). Give it the
    ``DataLoader``'s ``num_workers``; a plan that turns out wrong costs a cancelled read, never
    a wrong sample. Each pass over the sampler is a new plan."""

    def __init__(self, sampler: Sampler[int] | Sequence[int], batch_size: int, drop_last: bool = False, *,
                 num_workers: int = 0, ahead: int = AHEAD) -> None:
        super().__init__(sampler, batch_size, drop_last)
        if isinstance(num_workers, bool) or not isinstance(num_workers, int) or num_workers < 0:
            raise ValueError(f"num_workers is a count >= 0, not {num_workers!r}")
        Ahead(ahead)
        self.num_workers, self.ahead = num_workers, ahead

    def __iter__(self) -> Iterator[list[int]]:
        token = secrets.token_hex(8)
        stride = max(self.num_workers, 1)
        window: collections.deque[tuple[int, list[int]]] = collections.deque()

        def planned() -> PlannedBatch:
            k, indices = window.popleft()
            next_here = list(window)[stride - 1 :: stride]
            return PlannedBatch(indices, (token, k), [((token, j), batch) for j, batch in next_here])

        for item in enumerate(super().__iter__()):
            window.append(item)
            if len(window) > stride * self.ahead:
                yield planned()
        while window:
            yield planned()


class AheadLoader(DataLoader):
    """A ``DataLoader`` whose iterator, once left or closed, cancels the reads ahead of this
    process; with workers, the servers' limits are asked here first, once, not by each worker."""

    def __iter__(self) -> Iterator[Any]:
        if self.num_workers:
            self.dataset.ask_limits()
        try:
            yield from super().__iter__()
        finally:
            self.dataset.stop_reading_ahead()
