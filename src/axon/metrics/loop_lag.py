"""How late an event loop runs: a timer that measures its own lateness, into a histogram.

A worker of ``axon serve`` does everything on one thread. A callback that runs long (a large
batch planned inline, a user's handler that blocks though declared not to, a garbage collection)
holds up every connection of the worker, and a closed-loop benchmark hides it: its clients simply
wait. So each worker sets a timer every :data:`INTERVAL` seconds and records how late it ran
(``actual - scheduled`` on the monotonic clock) in this process's :data:`LAG`, which
``/metrics`` exposes as ``axon_event_loop_lag_seconds``.

What the timer sees of a stall is what was left of it when the timer fell due: a stall shorter
than the interval is caught when a due moment falls inside it, so under steady traffic stalls
show in proportion to their length, and a one-off short stall may not show at all. uvloop's
timers wake on libuv's millisecond clock, so a timer fires up to a millisecond early or late by
itself: lateness under a millisecond is that clock's grain, not a stall (early counts as none).

What it costs: one ``call_later`` and a bucket lookup per interval and worker, whatever the
traffic; nothing per request.
"""

from __future__ import annotations

import asyncio
import bisect
import os
import threading
import time

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
        self._reset()

    def _reset(self) -> None:
        self.counts = [0] * (len(BUCKETS) + 1)  # the last: over the largest bound
        self.total = 0.0
        #: Whether a loop of this process was ever timed (else there is no lag to show).
        self.timed = False
        self._lock = threading.Lock()  # a lock held by another thread at fork() stays held

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
        self._due = 0.0
        self._handle: asyncio.TimerHandle | None = None

    def start(self) -> LoopLag:
        self.into.timed = True
        self._arm(time.perf_counter())
        return self

    def stop(self) -> None:
        if self._handle is not None:
            self._handle.cancel()
            self._handle = None

    def _arm(self, now: float) -> None:
        self._due = now + self.interval
        self._handle = self.loop.call_later(self.interval, self._fire)

    def _fire(self) -> None:
        now = time.perf_counter()
        lag = now - self._due
        self.into.add(lag if lag > 0.0 else 0.0)
        self._arm(now)
