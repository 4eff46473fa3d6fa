"""How much work one turn of the event loop may do: :class:`Pace`, a loop's turn budget.

libuv runs a loop turn as: due timers, the callbacks queued by ``call_soon``, then every socket
found ready, back to back. What holds up a waiting client (and the loop's lag timer,
:mod:`axon.metrics.loop_lag`) is the whole turn, not the longest callback: fifty connections that
each plan a batch and write a megabyte of it in their own callback make one turn of all fifty.
So the work that grows with a batch (planning it a slice of files at a time, writing its body a
chunk at a time, and answering a request at all once this turn has worked long) asks the loop's
one :class:`Pace` (:func:`pace_of`) first; once the turn has run its budget (seconds, ``AXON_TURN_BUDGET``) of such
work, what asks waits for a later turn, in the order it asked.

The turn's clock starts at the first ask of a turn and stops with a ``call_soon`` (which runs
once the loop has been around: its timers and its sockets had their turn). What waits is served
oldest first, so a batch that has just had a turn goes behind those that waited meanwhile, and
a new request waits behind them too rather than start while they wait. Requests that never ask
(a light answer written at once, while no batch is being planned or written) pay one attribute
test.
"""

from __future__ import annotations

import asyncio
import weakref
from collections import deque
from time import perf_counter

from .config import environment



class Pace:
    """The work of the current loop turn, measured from its first ask (:meth:`spent`), and the
    tasks waiting for a turn with budget left (:meth:`wait`), oldest first."""

    __slots__ = ("_loop", "budget", "since", "waiting", "_new_turn")

    def __init__(self, loop: asyncio.AbstractEventLoop, budget: float | None = None) -> None:
        self._loop = loop
        # Read when a loop first asks, not at import: a bad variable is then the CLI's clear
        # error (exit 2), not a traceback from importing this module.
        self.budget = environment().turn_budget if budget is None else budget
        #: When this turn's asked-for work began (``perf_counter``), or None: none yet.
        self.since: float | None = None
        #: The tasks waiting (:meth:`wait`), each by a future, in the order they began to wait.
        self.waiting: deque[asyncio.Future] = deque()
        self._new_turn = self._next_turn  # one bound method, not one a turn

    def spent(self) -> bool:
        """Whether this turn has run its budget; the first ask of a turn starts its clock."""
        since = self.since
        if since is None:
            self.since = perf_counter()
            self._loop.call_soon(self._new_turn)
            return False
        return perf_counter() - since > self.budget

    def _next_turn(self) -> None:
        self.since = None

    async def wait(self) -> None:
        """Until this task's turn: a loop turn with budget left, once every task that began to
        wait before it had its own. Only the first in line goes round the loop (one trip a
        turn, its timers and sockets between two) and asks the clock; the next is woken when
        it leaves."""
        waiting = self.waiting
        me = self._loop.create_future()
        waiting.append(me)
        try:
            if waiting[0] is not me:
                await me
            while self.spent():
                await asyncio.sleep(0)
        finally:
            waiting.remove(me)  # the first, unless the task was cancelled while it waited
            if waiting and not waiting[0].done():
                waiting[0].set_result(None)


_PACES: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, Pace] = weakref.WeakKeyDictionary()


def pace_of(loop: asyncio.AbstractEventLoop) -> Pace:
    """``loop``'s one :class:`Pace`: the App's planning and the server's writing share its budget."""
    pace = _PACES.get(loop)
    if pace is None:
        pace = _PACES[loop] = Pace(loop)
    return pace
