"""axon.streams: one way to read a response's stream from async code."""

from __future__ import annotations

import asyncio
import threading
from concurrent.futures import ThreadPoolExecutor

from axon.streams import aiter_stream


def collect(stream, executor) -> list:
    async def run() -> list:
        return [chunk async for chunk in aiter_stream(stream, executor)]

    return asyncio.run(run())


def test_a_plain_generator_is_stepped_in_the_pool() -> None:
    seen: list[str] = []

    def chunks():
        for chunk in (b"a", b"b", b"c"):
            seen.append(threading.current_thread().name)
            yield chunk

    with ThreadPoolExecutor(2, thread_name_prefix="pool") as executor:
        assert collect(chunks(), executor) == [b"a", b"b", b"c"]
    assert seen and all(name.startswith("pool") for name in seen)  # never on the loop's thread
    with ThreadPoolExecutor(1) as executor:
        assert collect([b"x", b"y"], executor) == [b"x", b"y"]  # any iterable


def test_an_async_stream_is_iterated_as_it_is() -> None:
    loop_threads: list[str] = []

    async def chunks():
        for chunk in (b"a", b"b"):
            loop_threads.append(threading.current_thread().name)
            await asyncio.sleep(0)
            yield chunk

    with ThreadPoolExecutor(1, thread_name_prefix="pool") as executor:
        assert collect(chunks(), executor) == [b"a", b"b"]
    assert loop_threads == [threading.current_thread().name] * 2  # on the loop, not in the pool
