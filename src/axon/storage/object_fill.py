"""An object being filled into the disk tier, sent while it fills (:mod:`.object_tiered`).

The fill writes the object into the tier's temporary file (a large one by ranges, each at its
own offset as it arrives); a :class:`Fill` says how far it is written from the start without a
gap, and the responses that want the object read behind it (by offset, from a duplicate
of the temporary file's descriptor) instead of waiting for the whole object before their status
line. Every request of the process that wants the object while it fills reads behind the same
writer: one set of GETs to the store.

What a reader may take (:meth:`Fill.read`):

* bytes the fill has written, except the object's last byte, which waits for the check (its
  length, the MD5 its ETag states), so a response that includes the object's end is never
  completed with bytes that failed it. Not for the commit (the sync and the rename that follow):
  they keep the bytes for later requests and change none. A span that ends before it (a ``Range``, a batch's slice) is given as soon as
  written, and may complete before the check: an MD5 checks only the whole object, a span of it
  fetched from the store without the tier is not checked either, and it should not wait for the
  rest of a large object;
* nothing once a fill that had written bytes fails: :class:`ObjectStreamBroken`, so the runtime
  cuts the connection short of its ``Content-Length`` (never a truncated body that looks whole);
  the temporary file is deleted, and the next request fills again;
* a fill that failed before writing any byte (no room, the lock held by another process past
  the wait, a store that refused the first GET) is not kept: the object is fetched from the
  store as without the tier (:meth:`Fill.read` gives None).

All of it runs on the source's store loop, except :meth:`Fill.release`, which a response's
``close()`` calls from its runtime's thread: the descriptor is closed under a lock that each
read holds too. The loop only waits for a fill: a committed object's CRC-32 is read from a
descriptor :meth:`Fill.whole_file` gives, in the asker's thread.
"""

from __future__ import annotations

import asyncio
import os
import threading

from ..http.segments import FileSlice
from .object_file import ObjectFile
from .object_stream import ObjectStreamBroken

FILLING, WHOLE, FAILED, NOT_KEPT = "filling", "whole", "failed", "not kept"


class Fill:
    """How far the fill of one object (``key``, ``size`` bytes) has come; shared by the fill and
    the :class:`FillingFile` s that read it (each holds a use of its descriptor)."""

    def __init__(self, key: str, size: int) -> None:
        self.key = key
        self.size = size
        self.written = 0  # bytes written from the start without a gap
        self.checked = False  # whole, and its bytes checked (the commit may be under way)
        self.state = FILLING
        self._fd = -1  # a duplicate of the temporary file's descriptor (the committed file's after)
        self._uses = 1  # the fill's own, and each reader's
        self._lock = threading.Lock()
        self._moved = asyncio.get_running_loop().create_future()  # set at each step, then replaced

    def __repr__(self) -> str:
        return f"Fill({self.key!r}, {self.written} of {self.size}, {self.state})"

    # -- the writer's side -----------------------------------------------------------------------

    def begin(self, fd: int) -> None:
        """The fill's temporary file is ``fd``: read behind it from a duplicate."""
        with self._lock:
            if self._fd < 0:
                self._fd = os.dup(fd)

    def advance(self, written: int) -> None:
        self.written = written
        self._step()

    def check(self) -> None:
        """The object is whole and its bytes checked: its last byte may be read."""
        self.checked = True
        self._step()

    def finish(self, fd: int | None) -> None:
        """The fill is over: ``fd`` is the committed file (the fill's result), or None if not kept."""
        if fd is not None:
            with self._lock:
                if self._fd < 0:  # committed by another process: read that file
                    self._fd, fd = fd, -1
            if fd >= 0:
                os.close(fd)  # the duplicate reads the same file
            self.state = WHOLE
        else:  # bytes written may have been read: cut those responses; else fetch from the store
            self.state = FAILED if self.written else NOT_KEPT
        self._step()

    def _step(self) -> None:
        moved, self._moved = self._moved, asyncio.get_running_loop().create_future()
        moved.set_result(None)

    # -- the readers' side -----------------------------------------------------------------------

    def use(self) -> None:
        with self._lock:
            self._uses += 1

    def release(self) -> None:
        """One use less (a reader closed, or the fill ended); the last closes the descriptor."""
        with self._lock:
            self._uses -= 1
            fd = self._fd if self._uses == 0 else -1
            if fd >= 0:
                self._fd = -1
        if fd >= 0:
            os.close(fd)

    async def ready(self, offset: int, count: int) -> FileSlice | None:
        """Bytes ``offset`` to ``offset + count`` in the fill's file once the fill has them (the
        last piece once the object is checked), for a reader that sends them from the file
        itself and closes its :class:`FillingFile` only after (no byte there is ever written
        again: each is written once, and a later fill writes a file of its own); None when the
        object is not kept (fetch it from the store); :class:`ObjectStreamBroken` when the fill
        failed after it had written bytes."""
        stop = offset + count
        while self.state is FILLING and not stop <= min(self.written, self.size - (not self.checked)):
            await asyncio.shield(self._moved)
        if self.state is NOT_KEPT:
            return None
        if self.state is FAILED:
            raise ObjectStreamBroken(f"the fill of {self.key} into the disk cache failed midway")
        if self._fd < 0:
            raise ObjectStreamBroken(f"{self.key}: read after its response was closed")
        return FileSlice(self._fd, offset, count)

    async def read(self, offset: int, count: int) -> bytes | None:
        """The bytes :meth:`ready` names, read now (under the lock :meth:`release` takes, which
        another thread may call)."""
        if await self.ready(offset, count) is None:
            return None
        with self._lock:
            if self._fd < 0:
                raise ObjectStreamBroken(f"{self.key}: read after its response was closed")
            data = os.pread(self._fd, count, offset)
        if len(data) != count:
            raise ObjectStreamBroken(f"{self.key}: its file in the disk cache came up short")
        return data

    async def whole_file(self) -> int | None:
        """A duplicate of the committed file's descriptor once the object is whole (the caller
        reads it off the store loop, a zip entry's CRC-32, and closes it); None if it was not kept."""
        while self.state is FILLING:
            await asyncio.shield(self._moved)
        with self._lock:
            return os.dup(self._fd) if self.state is WHOLE and self._fd >= 0 else None


class FillingFile(ObjectFile):
    """An object sent while it fills the disk tier: the object's facts (its first bytes too, when
    opening brought them), its bytes read behind the fill (:meth:`Fill.read`, by
    :mod:`.object_stream`). Whoever holds it closes it."""

    __slots__ = ("fill", "_using")

    def __init__(self, f: ObjectFile, fill: Fill) -> None:
        super().__init__(f.source, f.key, f.etag, f.path, f.name, f.size, f.mtime_ns, f.content_type, None, f.head)
        fill.use()
        self.fill = fill
        self._using = True

    def __repr__(self) -> str:
        return f"FillingFile(key={self.key!r}, etag={self.etag!r}, size={self.size}, {self.fill!r})"

    def close(self) -> None:
        using, self._using = self._using, False
        if using:
            self.fill.release()
