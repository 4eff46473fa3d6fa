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
            if paced and pace.spent():
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
