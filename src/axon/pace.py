"""How much work one turn of the event loop may do: :class:`Pace`, a loop's turn budget.

libuv runs a loop turn as: due timers, the callbacks queued by ``call_soon``, then every socket
found ready, back to back. What holds up a waiting client (and the loop's lag timer,
:mod:`axon.metrics.loop_lag`) is the whole turn, not the longest callback: fifty connections that
each plan a batch and write a megabyte of it in their own callback make one turn of all fifty,
and so do fifty batches of 32 files answered at once. So every request about to be answered,
and the work that grows with a batch (planning it a slice of files at a time, writing its body a
chunk at a time), asks the loop's one :class:`Pace` (:func:`pace_of`) first, by one rule
(:meth:`Pace.must_wait`); once the turn has run its budget (seconds, ``AXON_TURN_BUDGET``), or
while others wait for a turn, what asks waits for a later turn, in the order it asked: a task
by :meth:`Pace.wait`, a request not yet begun by :meth:`Pace.defer` (a callback, no task).

The turn's clock starts at the first ask of a turn and stops with a ``call_soon`` (which runs
once the loop has been around: its timers and its sockets had their turn). Each new turn
takes what waits, oldest first, while its budget lasts: a deferred request is answered there
and then; a task is released, counted at the pace the last turn's released tasks went (nothing
the first time), and its step runs in the next pass over the loop's callbacks, charged to the
turn that released it (its clock is not started again for them). The first task of a turn
always goes on, and so does the first that waits, so no one waits for ever; a later task that
finds the turn spent waits again in its place, ahead of those that came after it. A task
released goes on with its work for a share of the turn (``SHARE``), then goes behind those that
waited meanwhile. A request deferred costs a place in the line, not a task: while a line lasts,
every new request joins it, and each turn's end answers them as its budget holds.
"""

from __future__ import annotations

import asyncio
import logging
import sys
import weakref
from asyncio import current_task
from collections import deque
from collections.abc import Callable
from time import perf_counter

from .config import environment

#: The share of a turn's budget that a task released from the line may spend on its work before
#: it goes behind those waiting: a turn serves several, and none waits again after every chunk.
SHARE = 0.25

log = logging.getLogger("axon")


class Pace:
    """The work of the current loop turn, measured from its first ask, and the tasks waiting
    for a turn with budget left (:meth:`wait`), oldest first."""

    __slots__ = (
        "_loop", "budget", "since", "waiting", "_new_turn", "_wave", "_went", "_first",
        "_going", "_went_at",
    )

    def __init__(self, loop: asyncio.AbstractEventLoop, budget: float | None = None) -> None:
        self._loop = loop
        # Read when a loop first asks, not at import: a bad variable is then the CLI's clear
        # error (exit 2), not a traceback from importing this module.
        self.budget = environment().turn_budget if budget is None else budget
        #: When this turn's asked-for work began (``perf_counter``), or None: none yet, and
        #: nobody waits (while anyone waits, a turn's end is queued and its clock runs).
        self.since: float | None = None
        #: What waits, in the order it began to wait: tasks (:meth:`wait`), each by a future (a
        #: released one stays until its step has run), and requests deferred (:meth:`defer`),
        #: each by the callback that answers it.
        self.waiting: deque[asyncio.Future | Callable[[], object]] = deque()
        self._new_turn = self._next_turn  # one bound method, not one a turn
        #: How many waiting tasks a new turn releases: what the last turn's budget held.
        self._wave = sys.maxsize
        self._went = 0  # released tasks that went on in this turn
        self._first = 0.0  # when the first of them went on
        self._going: asyncio.Task | None = None  # the last of them, while its turn lasts
        self._went_at = 0.0  # when it went on

    def must_wait(self) -> bool:
        """Whether work must wait for a later turn (:meth:`wait`, :meth:`defer`): others wait,
        or this turn has run its budget. The one rule for every asker; the turn's first ask
        starts its clock."""
        since = self.since
        if since is None:  # nobody waits, and nothing asked this turn
            self._start()
            return False
        now = perf_counter()
        if now - since > self.budget:
            return True
        if not self.waiting:
            return False
        # Others wait: what asks goes behind them, unless it is the work of the task last
        # released, which goes on while its share of the turn lasts.
        going = self._going
        return going is None or current_task(self._loop) is not going or now - self._went_at > self.budget * SHARE

    def defer(self, callback: Callable[[], object]) -> None:
        """Call ``callback`` once a turn has budget for it, after all that waited before it: a
        request not yet begun, asked for when :meth:`must_wait` said so (the turn's end is then
        queued), waits so without a task."""
        self.waiting.append(callback)

    def drop(self, callback: Callable[[], object]) -> None:
        """``callback`` is not to be called (its connection went away), if it waits still."""
        try:
            self.waiting.remove(callback)
        except ValueError:
            pass

    def _start(self) -> None:
        self.since = perf_counter()
        self._loop.call_soon(self._new_turn)

    def _next_turn(self) -> None:
        """The turn's end: the next one begins with what waits, oldest first, as much as its
        budget may hold: deferred requests answered now, tasks released (their steps run in the
        next pass, each counted at the pace the last turn's went)."""
        now = perf_counter()
        went = self._went
        if went:  # as many as would have filled the budget at the pace these went
            self._wave = max(1, round(went * self.budget / max(now - self._first, 1e-9)))
            self._went = 0
            self._going = None
        waiting = self.waiting
        if not waiting:
            self.since = None
            return
        self.since = now
        budget = self.budget
        each = budget / self._wave  # what a released task is expected to take
        released = 0.0
        i = 0
        while i < len(waiting):  # the first always goes on
            entry = waiting[i]
            if isinstance(entry, asyncio.Future):
                if not entry.done():  # else cancelled, or released and not yet run
                    entry.set_result(None)
                    released += each
                i += 1
            else:
                del waiting[i]
                try:
                    entry()
                except Exception:  # a bug of ours: that request's connection only (cycle.py answers errors)
                    log.exception("a deferred request failed")
            if perf_counter() - now + released > budget:
                break
        self._loop.call_soon(self._new_turn)  # after the steps just released

    async def wait(self) -> None:
        """Until a new turn releases this task, once every task that began to wait before it
        went on; a task released behind others that spent the turn waits again in its place."""
        waiting = self.waiting
        me = self._loop.create_future()
        waiting.append(me)
        if self.since is None:
            self._start()  # the turn's end releases it
        try:
            while True:
                await me
                now = perf_counter()
                if not self._went:
                    # The turn's first goes on whatever the clock says; the clock runs on from
                    # the turn's start, so what the turn did before counts.
                    self._first = now
                    break
                if now - self.since <= self.budget:  # type: ignore[operator]
                    break
                again = self._loop.create_future()
                waiting[waiting.index(me)] = again
                me = again
            self._went += 1
            self._going, self._went_at = current_task(self._loop), now
        finally:
            waiting.remove(me)  # the first, unless the task was cancelled while it waited


_PACES: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, Pace] = weakref.WeakKeyDictionary()


def pace_of(loop: asyncio.AbstractEventLoop) -> Pace:
    """``loop``'s one :class:`Pace`: the App's planning and the server's writing share its budget."""
    pace = _PACES.get(loop)
    if pace is None:
        pace = _PACES[loop] = Pace(loop)
    return pace
