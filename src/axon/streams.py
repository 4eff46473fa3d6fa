"""Reading a response's stream from async code: the one way every async runtime does it.

A stream (:func:`axon.response.stream_response`) is an async iterable of bytes or a plain one. An
async one is iterated as it is. A plain generator may block (a disk, a database), so each of its
steps runs in the App's thread pool, never on the event loop.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterable, AsyncIterator, Iterable, Iterator
from concurrent.futures import Executor

_DONE = object()


def aiter_stream(stream: Iterable[bytes] | AsyncIterable[bytes], executor: Executor) -> AsyncIterator[bytes]:
    """The chunks of ``stream``, for ``async for``; a plain iterable is stepped in ``executor``."""
    if isinstance(stream, AsyncIterable):
        return stream.__aiter__()
    return _step(iter(stream), executor)


async def _step(iterator: Iterator[bytes], executor: Executor) -> AsyncIterator[bytes]:
    loop = asyncio.get_running_loop()
    while (data := await loop.run_in_executor(executor, next, iterator, _DONE)) is not _DONE:
        yield data  # type: ignore[misc]
