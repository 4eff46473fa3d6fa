"""axon.pace: a loop turn runs at most its budget of batch work. On real loops (uvloop and the
standard library's), paced work lets a timer fire on time where the same work unpaced holds it
up. (A real server's batches: tests/server/test_server_loop_lag.py.)"""

from __future__ import annotations

import asyncio
import statistics
import time

import pytest

from axon.server.loops import new_event_loop
from axon.pace import Pace

WORKERS = 30  # connections writing a batch at once, each in chunks
CHUNKS = 10
CHUNK_SECONDS = 0.0005  # one chunk's work: about what gathering and writing 64 KiB costs


def busy(seconds: float) -> None:
    end = time.perf_counter() + seconds
    while time.perf_counter() < end:
        pass


def timer_lateness(loop: asyncio.AbstractEventLoop, paced: bool) -> float:
    """How late, in the median, a 2 ms timer (set again each time it fires) fired while ``WORKERS``
    tasks each did ``CHUNKS`` chunks of work, asking a :class:`Pace` between two when ``paced``.
    The median: a busy machine that takes the CPU away for a moment moves the longest, not it."""
    pace = Pace(loop)
    late: list[float] = []

    async def work() -> None:
        for _ in range(CHUNKS):
            if paced and pace.must_wait():
                await pace.wait()
            busy(CHUNK_SECONDS)
            await asyncio.sleep(0)  # a write that let the loop go round (the socket took it)

    async def main() -> None:
        due = [time.perf_counter() + 0.002]

        def fire() -> None:
            now = time.perf_counter()
            late.append(now - due[0])
            due[0] = now + 0.002
            handle[0] = loop.call_later(0.002, fire)

        handle = [loop.call_later(0.002, fire)]
        await asyncio.gather(*[work() for _ in range(WORKERS)])
        handle[0].cancel()

    loop.run_until_complete(main())
    return statistics.median(late)


@pytest.mark.parametrize("make_loop", [new_event_loop, asyncio.new_event_loop], ids=["uvloop", "asyncio"])
def test_paced_work_lets_the_loop_turn_where_unpaced_work_holds_it(make_loop) -> None:
    loop = make_loop()
    try:
        # Unpaced, a turn runs a chunk of every task: 30 x 0.5 ms. Paced, a turn runs about a
        # millisecond of chunks (and the steps of the tasks that wait), then the timer's turn comes.
        unpaced = timer_lateness(loop, paced=False)
        assert unpaced > 0.010
        assert timer_lateness(loop, paced=True) < unpaced / 5
    finally:
        loop.close()


class Turns:
    """Counts the loop's turns: a callback that queues itself again runs once a turn."""

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self.count = 0
        self._loop = loop
        self._handle = loop.call_soon(self._tick)

    def _tick(self) -> None:
        self.count += 1
        self._handle = self._loop.call_soon(self._tick)

    def stop(self) -> None:
        self._handle.cancel()


def run_and_close(loop: asyncio.AbstractEventLoop, main, turns: Turns | None = None) -> None:
    try:
        loop.run_until_complete(main)
    finally:
        if turns is not None:
            turns.stop()
        loop.close()


LOOPS = pytest.mark.parametrize("make_loop", [new_event_loop, asyncio.new_event_loop], ids=["uvloop", "asyncio"])


@LOOPS
def test_many_waiters_that_need_little_are_released_in_one_turn_in_order(make_loop) -> None:
    loop = make_loop()
    pace = Pace(loop, budget=0.01)  # far more than fifty need: a busy machine cannot spend it
    went: list[tuple[int, int]] = []  # (waiter, turn)

    async def waiter(i: int) -> None:
        assert pace.must_wait()  # the turn is spent: each waits, in the order it asked
        await pace.wait()
        went.append((i, turns.count))

    async def spender() -> None:  # runs first in the turn the waiters first run in
        assert not pace.must_wait()  # the turn's first ask starts its clock
        busy(0.012)  # and this turn's work spends it

    async def main() -> None:
        await asyncio.gather(spender(), *[waiter(i) for i in range(50)])

    turns = Turns(loop)
    run_and_close(loop, main(), turns)
    assert [i for i, _ in went] == list(range(50))
    # All of them in the first turn that releases any (or the next), not one a turn.
    first = went[0][1]
    assert went[-1][1] - first <= 1, went


@LOOPS
def test_a_waiter_is_never_passed_by_later_arrivals_and_waits_for_what_is_ahead_only(make_loop) -> None:
    loop = make_loop()
    budget, chunk = 0.002, 0.0001
    pace = Pace(loop, budget=budget)
    chunks: list[str] = []  # who did a chunk of work, in order
    seen: dict[str, int] = {}

    async def writer(name: str, n: int) -> None:  # as the server's writer: a chunk, then ask again
        for _ in range(n):
            if pace.must_wait():
                await pace.wait()
            busy(chunk)
            chunks.append(name)
            await asyncio.sleep(0)

    async def probe() -> None:
        seen["ahead"] = len(pace.waiting)
        seen["asked"], seen["turn"] = len(chunks), turns.count
        if pace.must_wait():
            await pace.wait()
        seen["went"], seen["turns"] = len(chunks), turns.count - seen["turn"]
        chunks.append("probe")

    async def main() -> None:
        tasks = [asyncio.ensure_future(writer(f"w{i}", 40)) for i in range(30)]
        for _ in range(5):  # a few turns into the load
            await asyncio.sleep(0)
        tasks.append(asyncio.ensure_future(probe()))
        for _ in range(10):  # later arrivals, one a turn from the probe's, while it waits
            await asyncio.sleep(0)
            tasks.append(asyncio.ensure_future(writer("late", 40)))
        await asyncio.gather(*tasks)

    turns = Turns(loop)
    run_and_close(loop, main(), turns)
    ahead = seen["ahead"]
    assert ahead >= 10, seen  # the probe did wait behind the writers
    # Only those waiting when it asked went before it (each for its share of a turn), none of
    # the later arrivals.
    between = chunks[seen["asked"]:seen["went"]]
    assert "late" not in between and len(set(between)) <= ahead, seen
    # Released by the turn's budget, not one waiter a turn: about ahead x chunk / budget turns
    # (twice that and two more, for a busy machine that takes the CPU away for a while).
    assert seen["turns"] <= 2 * (ahead * chunk / budget) + 2 + 2, seen


@LOOPS
def test_a_waiter_the_turn_could_not_hold_waits_again_in_its_place(make_loop) -> None:
    loop = make_loop()
    pace = Pace(loop, budget=0.01)
    order: list[str] = []

    async def spender() -> None:
        assert not pace.must_wait()
        busy(0.012)

    async def waiter(name: str, work: float, late: bool = False) -> None:
        if late:  # asks once the first turn has released those before it
            await asyncio.sleep(0)
        assert pace.must_wait()
        await pace.wait()
        busy(work)
        order.append(name)

    async def main() -> None:
        # The first release frees all four; two heavy ones spend the turn, so the third and the
        # probe find it spent and wait again: still ahead of those that came meanwhile.
        heavy = [waiter(f"h{i}", 0.006) for i in range(3)]
        late = [waiter(f"late{i}", 0.0, late=True) for i in range(3)]
        await asyncio.gather(spender(), *heavy, waiter("probe", 0.0), *late)

    run_and_close(loop, main())
    assert order == ["h0", "h1", "h2", "probe", "late0", "late1", "late2"], order


@LOOPS
def test_what_ran_before_the_released_tasks_counts_against_their_turn(make_loop) -> None:
    # The turn that releases the line began when it released it: work that runs before the
    # released tasks' steps (here a callback, as a socket's read would be) spends its budget. Its
    # clock started again as the first of them went, the turn ran its budget twice.
    loop = make_loop()
    pace = Pace(loop, budget=0.01)
    went: list[tuple[int, int]] = []  # (waiter, turn)

    async def spender() -> None:
        assert not pace.must_wait()  # starts the clock: the turn's end is queued
        loop.call_soon(busy, 0.012)  # runs in the next pass, after the turn's end, before the released
        busy(0.012)

    async def waiter(i: int) -> None:
        assert pace.must_wait()
        await pace.wait()
        went.append((i, turns.count))

    async def main() -> None:
        await asyncio.gather(spender(), *[waiter(i) for i in range(5)])

    turns = Turns(loop)
    run_and_close(loop, main(), turns)
    assert [i for i, _ in went] == list(range(5))
    first = went[0][1]
    assert [i for i, turn in went if turn == first] == [0], went  # the first goes on; the others wait again


@LOOPS
def test_deferred_requests_are_called_in_order_as_the_turns_budget_holds_them(make_loop) -> None:
    loop = make_loop()
    pace = Pace(loop, budget=0.0)  # every turn spent by its first
    called: list[tuple[int, int]] = []  # (request, turn)

    async def main() -> None:
        assert not pace.must_wait()
        for i in range(4):
            assert pace.must_wait()  # the turn is spent: deferred, in order
            pace.defer(lambda i=i: called.append((i, turns.count)))
        pace.drop(pace.waiting[2])  # its connection went away
        while pace.waiting:
            await asyncio.sleep(0)
        # While a request waits for a turn, what asks goes behind it, however much budget is left.
        pace.budget = 1.0
        assert pace.must_wait() is False
        pace.defer(lambda: called.append((9, turns.count)))
        assert pace.must_wait()
        while pace.waiting:
            await asyncio.sleep(0)

    turns = Turns(loop)
    run_and_close(loop, main(), turns)
    assert [i for i, _ in called] == [0, 1, 3, 9]
    assert len({turn for _, turn in called[:3]}) == 3  # one a turn: the first always goes on
