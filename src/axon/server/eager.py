"""Running a coroutine without a task until it first has to wait.

Most responses are written before their coroutine ever waits; a task for each (its creation, a
trip around the loop) would cost more than the writing. So the connection steps the coroutine
once by hand, and only if it is suspended then does it become a task, resumed from where it is.
"""

from __future__ import annotations

from typing import Any


class _Resume:
    """Await a coroutine that was already stepped by hand and is suspended on ``first``."""

    __slots__ = ("coro", "first")

    def __init__(self, coro: Any, first: Any) -> None:
        self.coro = coro
        self.first = first

    def __await__(self) -> Any:
        coro, value = self.coro, self.first
        while True:
            try:
                yield value
            except BaseException as exc:  # noqa: BLE001 - thrown in by the task: cancellation
                try:
                    value = coro.throw(exc)
                except StopIteration as stop:
                    return stop.value
            else:
                try:
                    value = coro.send(None)
                except StopIteration as stop:
                    return stop.value


async def resume(coro: Any, first: Any) -> Any:
    """The rest of ``coro``, which was stepped by hand and yielded ``first``: for a task."""
    return await _Resume(coro, first)
