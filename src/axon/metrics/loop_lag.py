"""How late an event loop runs: a timer that measures its own lateness, into a histogram.

A worker of ``axon serve`` does everything on one thread. A callback that runs long (a large
batch planned inline, a user's handler that blocks though declared not to, a garbage collection)
holds up every connection of the worker, and a closed-loop benchmark hides it: its clients simply
wait. So each worker sets a timer every :data:`INTERVAL` seconds and records how late it ran
in this process's :data:`LAG`, which ``/metrics`` exposes as ``axon_event_loop_lag_seconds``.

How late is read on the loop's own clock: the moment the timer was due (its handle's ``when()``)
against the loop's time when it runs. The loop fires a timer by that clock, which uvloop reads
once at the start of each turn; timed on another clock, a timer could seem to fire early by as
much of a stall as that turn had run, and the stall would be missed. On uvloop the clock counts
whole milliseconds, so a lag is exact to a millisecond (0 is "under a millisecond").

What the timer sees of a stall is what was left of it when the timer fell due: a stall shorter
than the interval is caught when a due moment falls inside it, so under steady traffic stalls
show in proportion to their length, and a one-off short stall may not show at all. A worker that
is timed publishes its lags from then on, whether or not it has counted a request
(:meth:`LagHistogram.on_timed`).

What it costs: one ``call_later`` and a bucket lookup per interval and worker, whatever the
traffic; nothing per request.
"""

from __future__ import annotations

import asyncio
import bisect
import os
import threading
import weakref
from collections.abc import Callable

__all__ = ["BUCKETS", "INTERVAL", "LAG", "LagHistogram", "LoopLag"]

#: Seconds between two timings of a loop.
INTERVAL = 0.02

#: Upper bounds (seconds) of the lag histogram: the loop's timer grain (a millisecond) at the
#: low end, 5 ms (a stall a client notices on a small file) marked out, and whole seconds of a
#: loop blocked at the top.
BUCKETS = (0.0001, 0.00025, 0.0005, 0.001, 0.002, 0.003, 0.005, 0.0075, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0)

#: The sum of the lags, among a process's sample keys (the buckets are ``"l <index>"``).
LAG_SUM = "l sum"


class LagHistogram:
    """The lags of every loop of one process (a worker has one), counted by :data:`BUCKETS`.
    Thread-safe: a test runs servers on loops of their own threads."""

    def __init__(self) -> None:
        #: Called when a loop of this process begins to be timed (kept across a fork).
        self._on_timed: list[weakref.WeakMethod] = []
        self._reset()

    def _reset(self) -> None:
        self.counts = [0] * (len(BUCKETS) + 1)  # the last: over the largest bound
        self.total = 0.0
        #: Whether a loop of this process was ever timed (else there is no lag to show).
        self.timed = False
        self._lock = threading.Lock()  # a lock held by another thread at fork() stays held

    def on_timed(self, callback: Callable[[], object]) -> None:
        """Call ``callback`` (a bound method, held weakly: the list is as long as the live
        objects that asked) whenever a loop of this process begins to be timed
        (:meth:`LoopLag.start`): the metrics of a worker then publish its lags before it counts
        a request."""
        self._on_timed = [ref for ref in self._on_timed if ref() is not None]
        self._on_timed.append(weakref.WeakMethod(callback))  # type: ignore[arg-type]

    def start_timing(self) -> None:
        self.timed = True
        for ref in list(self._on_timed):
            callback = ref()
            if callback is not None:
                callback()

    def add(self, lag: float) -> None:
        with self._lock:
            self.counts[bisect.bisect_left(BUCKETS, lag)] += 1
            self.total += lag

    def samples(self) -> dict[str, float]:
        """The counts as sample keys (:mod:`.files`): ``"l <bucket>"`` and ``"l sum"``; none
        when no loop of this process was timed."""
        if not self.timed:
            return {}
        with self._lock:
            out: dict[str, float] = {f"l {i}": n for i, n in enumerate(self.counts)}
            out[LAG_SUM] = self.total
        return out


#: This process's lags. A forked child (a worker) counts its own, from nothing.
LAG = LagHistogram()
os.register_at_fork(after_in_child=LAG._reset)  # noqa: SLF001


class LoopLag:
    """Times ``loop`` every ``interval`` seconds into ``into``, from :meth:`start` to :meth:`stop`."""

    def __init__(self, loop: asyncio.AbstractEventLoop, into: LagHistogram = LAG, interval: float = INTERVAL) -> None:
        self.loop = loop
        self.into = into
        self.interval = interval
        self._handle: asyncio.TimerHandle | None = None

    def start(self) -> LoopLag:
        self._arm()
        self.into.start_timing()
        return self

    def stop(self) -> None:
        if self._handle is not None:
            self._handle.cancel()
            self._handle = None

    def _arm(self) -> None:
        self._handle = self.loop.call_later(self.interval, self._fire)

    def _fire(self) -> None:
        # Both on the loop's clock (see the module): when it was due, and now.
        lag = self.loop.time() - self._handle.when()  # type: ignore[union-attr]
        self.into.add(lag if lag > 0.0 else 0.0)
        self._arm()
