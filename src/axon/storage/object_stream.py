"""A response body that holds object slices, sent as a stream: objects fetched ahead, in order.

The planners frame objects as they frame files (each an :class:`~axon.http.segments.ObjectSlice`
between the format's blocks), so the length, the ETag, Range and the formats are the same code
as for local files. The App hands such a body to :class:`ObjectBody`, which the runtimes send as
a stream with its ``Content-Length`` declared: WSGI iterates it, the async runtimes await it.

Axon's own server takes the bytes that lie in a file on disk (an object the disk tier keeps, or
has written while it fills it) as file slices, which it sends by ``sendfile``
(:meth:`ObjectBody.with_file_slices`); the other runtimes get them read.

Fetching: the bytes opening brought (an object's first bytes, ``ObjectFile.head``) are sent
from memory, and so is a small object whose bytes the source keeps for the ETag it was opened
or listed with (:mod:`.object_cache`); the rest of each slice is cut into pieces of at most :data:`PIECE` bytes, each a
ranged ``GET`` with ``If-Match`` on the ETag the object was opened with. Pieces are requested ahead of the
one being sent, in request order, as long as the bytes requested but not yet sent stay within
``prefetch_bytes`` (:data:`PREFETCH_BYTES` unless the source says otherwise) and at most
:data:`MAX_REQUESTS` are in flight: many small objects travel concurrently, a large one as
several ranges at once, and a response holds at most ``prefetch_bytes`` + one piece + one
chunk of memory, whatever it serves.

A piece that fails (the object replaced since it was opened: the store refuses the
``If-Match``; deleted; the store gone or silent past the source's timeout; a length other than
asked) raises :class:`ObjectStreamBroken` out of the stream: the runtimes then cut the
connection, so a client sees a body shorter than its ``Content-Length`` (an error), never
another version's bytes nor a short body that looks complete. It is an ``OSError``, as a file
that fails to read midway: Axon's server logs it as one warning line (the store's own words,
without the debug dump obstore appends), not a traceback, and cuts the connection; the ASGI
adapter returns with the body incomplete, which makes its server close the connection
(uvicorn does, with a line of its own); a WSGI server cuts it as it does for any error.
"""

from __future__ import annotations

import asyncio
import os
from collections import deque
from typing import TYPE_CHECKING, Any, AsyncIterator, Awaitable, Coroutine, Iterator, Protocol

import obstore
from obstore.exceptions import NotFoundError, PreconditionError

from ..http.segments import FileSlice, ObjectSlice, Segment
from .object_store import silent

if TYPE_CHECKING:
    from .object_cache import ObjectCache
    from .object_health import StoreHealth

#: The most bytes one ranged GET asks for: large objects arrive as several ranges at once.
PIECE = 1 << 20
#: Bytes requested ahead of what is sent, per response.
PREFETCH_BYTES = 8 << 20
#: Requests in flight per response (small objects: this many at once).
MAX_REQUESTS = 32


class StreamSource(Protocol):
    """What a stream uses of its source (:class:`~.objects.ObjectSource`, which imports this
    module: named here by what it offers, so that no import goes back)."""

    store: Any  # obstore's
    cache: ObjectCache | None
    prefetch_bytes: int
    timeout: float
    store_health: StoreHealth  # a store that fails a piece is noted as failing

    def run(self, coro: Coroutine[Any, Any, Any]) -> Any: ...

    def submit(self, coro: Coroutine[Any, Any, Any]) -> Awaitable[Any]: ...


class StreamObject(Protocol):
    """What a stream uses of an object it sends (:class:`~.object_file.ObjectFile`)."""

    key: str
    etag: str | None
    size: int
    head: bytes | None
    fill: Any  # object_fill.Fill, while the disk tier fills it; else None


class ObjectStreamBroken(OSError):
    """An object could not be sent as planned: the connection must be cut."""


class ObjectBody:
    """The chunks of a body of bytes and object slices, fetched on the source's loop."""

    def __init__(self, source: StreamSource, segments: list[Segment], chunk_size: int) -> None:
        self._source = source
        self._segments = segments
        self._chunk_size = chunk_size
        self._gen: AsyncIterator[bytes] | None = None

    def _start(self, send_from_files: int = -1) -> AsyncIterator[Any]:
        if self._gen is None:
            self._gen = _chunks(self._source, self._segments, self._chunk_size, send_from_files)
        return self._gen

    def __iter__(self) -> Iterator[bytes]:
        """For WSGI: each chunk waited for in the caller's thread."""
        gen = self._start()
        while True:
            try:
                yield bytes(self._source.run(gen.__anext__()))  # WSGI wants bytes, not a view
            except StopAsyncIteration:
                return

    def __aiter__(self) -> AsyncIterator[bytes | memoryview]:
        """For the async runtimes: each chunk awaited without blocking their loop; a chunk may
        be a read-only memoryview of the store's buffer (the runtimes that need bytes copy it)."""
        return self._async_iter()

    def with_file_slices(self, smallest: int) -> AsyncIterator[bytes | memoryview | FileSlice]:
        """As :meth:`__aiter__`, for a runtime that sends from files itself (Axon's server, by
        ``sendfile``): bytes that lie in a file on disk (an object the disk tier keeps, or has
        written while it fills it), ``smallest`` of them or more, come as a :class:`FileSlice`
        instead of being read, its descriptor open until :meth:`close`."""
        return self._async_iter(smallest)

    async def _async_iter(self, send_from_files: int = -1) -> AsyncIterator[Any]:
        gen = self._start(send_from_files)
        while True:
            try:
                yield await self._source.submit(gen.__anext__())
            except StopAsyncIteration:
                return

    def close(self) -> None:
        """Stop fetching (the client went away, or the body was sent): requests in flight are
        cancelled."""
        gen, self._gen = self._gen, None
        if gen is not None:
            try:
                self._source.run(gen.aclose())  # type: ignore[attr-defined]
            except Exception:  # noqa: BLE001 - closing after a failure has nothing left to say
                pass


def _pieces(segments: list[Segment]) -> Iterator[bytes | FileSlice | tuple[StreamObject, int, int]]:
    for seg in segments:
        if type(seg) is FileSlice:  # an object kept on disk (object_disk), in a batch that also fetches
            fd, offset, count = seg
            while count:
                take = min(count, PIECE)
                yield FileSlice(fd, offset, take)
                offset += take
                count -= take
            continue
        if type(seg) is not ObjectSlice:
            yield seg  # type: ignore[misc]
            continue
        obj, offset, count = seg
        head = obj.head  # the first bytes, as opening brought them: no request for those
        if head is not None and offset < len(head):
            take = min(count, len(head) - offset)
            yield head[offset : offset + take]
            offset += take
            count -= take
        while count:
            take = min(count, PIECE)
            yield (obj, offset, take)
            offset += take
            count -= take


async def _chunks(source: StreamSource, segments: list[Segment], chunk_size: int,
                  send_from_files: int = -1) -> AsyncIterator[bytes | memoryview | FileSlice]:
    """The body's chunks; a slice of a file of at least ``send_from_files`` bytes (-1: none) as
    it is, for the runtime to send (:meth:`ObjectBody.with_file_slices`)."""
    budget = source.prefetch_bytes
    todo = deque(_pieces(segments))
    window: deque[tuple[Any, int]] = deque()  # (bytes or a fetch task, bytes it holds ahead)
    ahead = 0
    pending = bytearray()
    try:
        while todo or window:
            while todo and len(window) < MAX_REQUESTS:
                item = todo[0]
                if type(item) is bytes or type(item) is FileSlice:
                    window.append((todo.popleft(), 0))  # a file slice is read when its turn comes
                    continue
                count = item[2]
                if window and ahead + count > budget:
                    break
                todo.popleft()
                window.append((asyncio.ensure_future(_fetch(source, *item, send_from_files)), count))
                ahead += count
            first, count = window.popleft()
            data = first if count == 0 else await first
            ahead -= count
            if type(data) is FileSlice:
                if _sent_from_file(data.count, send_from_files):
                    if pending:
                        yield bytes(pending)
                        pending = bytearray()
                    yield data
                    continue
                data = _read(data)
            if not pending and len(data) >= chunk_size:
                # A whole piece goes out as the store gave it: a read-only view of obstore's
                # buffer, not a copy (a copy of each piece cost ~15 ms of CPU per 32 MiB).
                yield memoryview(data)
                continue
            pending += data
            if len(pending) >= chunk_size:
                yield bytes(pending)
                pending = bytearray()
        if pending:
            yield bytes(pending)
    finally:
        for task, _ in window:
            if isinstance(task, asyncio.Future):
                task.cancel()


def _sent_from_file(count: int, send_from_files: int) -> bool:
    """Whether ``count`` bytes in a file go to the runtime as a slice it sends itself."""
    return 0 <= send_from_files <= count


def _read(piece: FileSlice) -> bytes:
    """A piece of a file on disk, whole: a file that came up short is a body that cannot be sent."""
    data = os.pread(piece.fd, piece.count, piece.offset)
    if len(data) != piece.count:
        raise ObjectStreamBroken(f"a kept object's file came up short ({len(data)} of {piece.count} bytes)")
    return data


async def _fetch(source: StreamSource, obj: StreamObject, offset: int, count: int, send_from_files: int = -1) -> Any:
    if obj.fill is not None:  # read behind the disk tier's fill (object_fill), unless it was not kept
        data = await (obj.fill.ready if _sent_from_file(count, send_from_files) else obj.fill.read)(offset, count)
        if data is not None:
            return data
    # A small object whole: from the bytes kept for its ETag if there are (the listing that
    # named it is the freshness check), else fetched and kept for the next batch.
    cache = source.cache
    if cache is not None and not (offset == 0 and count == obj.size <= cache.largest and obj.etag is not None):
        cache = None  # a slice, or an object too large to keep
    if cache is not None:
        kept = cache.get(obj.key, obj.etag)
        if kept is not None and len(kept) == count:
            return kept
    options: dict[str, Any] = {"range": (offset, offset + count)}
    if obj.etag is not None:
        options["if_match"] = obj.etag
    try:
        result = await asyncio.wait_for(_get(source.store, obj.key, options), source.timeout)
    except PreconditionError:
        raise ObjectStreamBroken(f"{obj.key} changed since it was opened (ETag no longer {obj.etag})") from None
    except (NotFoundError, FileNotFoundError):
        raise ObjectStreamBroken(f"{obj.key} was deleted since it was opened") from None
    except asyncio.TimeoutError:
        source.store_health.outcome(silent(obj.key))
        raise ObjectStreamBroken(f"the object store did not answer within {source.timeout} s for {obj.key}") from None
    except Exception as exc:  # noqa: BLE001 - any failure of the store ends this body
        source.store_health.outcome(silent(obj.key))
        said = str(exc).strip().split("\n", 1)[0][:500] or type(exc).__name__
        raise ObjectStreamBroken(f"the object store failed for {obj.key}: {said}") from None
    meta, data = result
    if (obj.etag is not None and meta.get("e_tag") != obj.etag) or len(data) != count:
        raise ObjectStreamBroken(f"{obj.key} is no longer the version opened")
    if cache is not None:
        data = bytes(data)
        cache.put(obj.key, obj.etag, data)
    return data


async def _get(store: Any, key: str, options: dict[str, Any]) -> tuple[dict[str, Any], Any]:
    result = await obstore.get_async(store, key, options=options)
    return result.meta, await result.bytes_async()
