"""How an :class:`~.objects.ObjectSource` uses its disk tier (:mod:`.object_disk`): where a
batch's objects are opened, an object whose version is whole on disk becomes a
:class:`~.object_file.TierFile` (sent as a local file), and one that is not is filled first,
one GET with ``If-Match`` on the ETag it was listed or opened with. An object that fails to be
kept is sent from the store as without the tier."""

from __future__ import annotations

import asyncio
import os
import zlib
from collections import deque
from typing import Any

import obstore

from ..errors import FileChanged, HTTPError
from .object_disk import DiskTier, FillFailed
from .object_file import ObjectFile, TierFile

#: Bytes of an object read when it is opened (:mod:`.objects`): a smaller object is then held
#: whole, and kept on disk from those bytes.
OPEN_READ = 64 * 1024
#: A larger object is filled by ranged GETs of this many bytes, FILL_AHEAD of them at once (a
#: store serves one connection at a fraction of what several give); a fill holds at most
#: FILL_AHEAD + 1 pieces in memory, and a process makes object_disk.LARGE_FILLS such fills at once.
FILL_PIECE = 8 << 20
FILL_AHEAD = 4


class TieredSource:
    """The disk tier's part of :class:`~.objects.ObjectSource`, which provides the rest."""

    tier: DiskTier | None
    _store: Any

    async def _open(self, requested: str, room: list[int] | None = None,
                    unless: str | None = None) -> ObjectFile | HTTPError | None: ...

    def key(self, requested: str) -> str: ...

    def content_type(self, key: str) -> str: ...

    def _listed_file(self, requested: str, meta: dict[str, Any], data: bytes | None = None) -> ObjectFile: ...

    @property
    def sending(self) -> str:
        """What sends an object's bytes, for ``axon serve``'s start line."""
        if self.tier is None:
            return "bytes fetched from the store by ranged GETs"
        return (f"objects kept on disk in {self.tier.directory} (at most {self.tier.size} bytes; sent as files), "
                "else fetched from the store by ranged GETs")

    def counts(self) -> dict[str, int]:
        """This process's counts of the disk tier (:meth:`.object_disk.DiskTier.counts`); none without one."""
        return {} if self.tier is None else self.tier.counts()

    def share_kept_files(self, size: int, valid: float, inactive: float) -> None:
        """For a server that reads files by offset only: the kept files' descriptors shared
        through an open-file cache as a local file's are (:meth:`.object_disk.DiskTier.share_files`)."""
        if self.tier is not None:
            self.tier.share_files(size, valid, inactive)


    async def _on_disk(self, requested: str, meta: dict[str, Any]) -> TierFile | None:
        """The listed object from its file in the disk tier, if that version is whole there."""
        tier, etag, size = self.tier, meta.get("e_tag"), meta["size"]
        if tier is None or etag is None or not tier.fits(size):
            return None
        fd = await tier.lookup(meta["path"], etag, size)
        if fd is None:
            return None
        found = self._listed_file(requested, meta)
        tier.remember_version(found.key, etag, size, found.mtime_ns)
        return TierFile(found, fd)

    async def _open_kept(self, requested: str, room: list[int] | None = None) -> ObjectFile | HTTPError:
        """:meth:`_open`, then through the disk tier when there is one."""
        held, known = await self._kept_version(requested)
        found = await self._open(requested, room, unless=None if held is None else known[0])
        if found is None:  # the store's 304: the version on disk is the one it has now
            return TierFile(ObjectFile(self, known[3], known[0], requested, known[3], known[1], known[2],
                                       self.content_type(known[3])), held)
        if held is not None:
            held.close()
        if self.tier is None or isinstance(found, HTTPError):
            return found
        return await self._through_tier(found)

    async def _kept_version(self, requested: str) -> tuple[Any, Any]:
        """The file of the version of ``requested`` this process last found on disk, and that
        version (ETag, size, mtime_ns, key): opening then asks the store for it only if it is not
        the current one (one request either way; none of its bytes when it is). (None, None) if none."""
        try:
            key = self.key(requested)
        except HTTPError:
            return None, None  # _open says why
        known = None if self.tier is None else self.tier.known_version(key)
        if known is None:
            return None, None
        held = await self.tier.lookup(key, known[0], known[1])
        return (held, (*known, key)) if held is not None else (None, None)

    async def _through_tier(self, found: ObjectFile) -> ObjectFile:
        """``found`` from its file in the disk tier, filled now if it is not there; ``found``
        itself when it is not kept (no tier, no ETag, too large, a fill that failed). An object
        that opening brought whole is sent from memory and kept on disk by a thread."""
        tier = self.tier
        if tier is None or found.etag is None or not tier.fits(found.size):
            return found
        tier.remember_version(found.key, found.etag, found.size, found.mtime_ns)
        if found.size <= OPEN_READ:
            return found  # opening brought it whole (_open keeps it on disk)
        fill = lambda fd, md5: self._fill(found, fd, md5)  # noqa: E731
        if found.size <= FILL_PIECE:
            fd = await tier.fetch(found.key, found.etag, found.size, fill)
        else:  # filled by ranged GETs: its room is made only once its turn to fill comes
            fd = await tier.lookup(found.key, found.etag, found.size)
            if fd is None:
                async with tier.large_fills:
                    fd = await tier.fetch(found.key, found.etag, found.size, fill)
        return found if fd is None else TierFile(found, fd)

    async def _fill(self, f: ObjectFile, fd: int, md5: Any) -> int:
        """Write ``f``'s bytes into ``fd``: one GET with ``If-Match`` on its ETag, or for a large
        object ranged GETs of :data:`FILL_PIECE`, :data:`FILL_AHEAD` at once, written in order
        (the MD5 is of the bytes in order); the bytes written."""
        if f.size > FILL_PIECE:  # (under the tier's large_fills: _through_tier)
            return await self._fill_ranges(f, fd, md5)
        result = await obstore.get_async(self._store, f.key, options={"if_match": f.etag})
        if result.meta.get("e_tag") != f.etag or result.meta["size"] != f.size:
            raise FillFailed("the store answered with another version")
        offset = 0
        async for chunk in result.stream(min_chunk_size=1 << 20):
            offset = _write(fd, chunk, offset, md5)
        return offset

    async def _fill_ranges(self, f: ObjectFile, fd: int, md5: Any) -> int:
        starts = iter(range(0, f.size, FILL_PIECE))
        pieces: deque[asyncio.Future[bytes]] = deque()

        def ask_next() -> None:
            start = next(starts, None)
            if start is not None:
                pieces.append(asyncio.ensure_future(self._piece(f, start, min(start + FILL_PIECE, f.size))))

        offset = 0
        try:
            for _ in range(FILL_AHEAD):
                ask_next()
            while pieces:
                data = await pieces.popleft()
                ask_next()
                offset = _write(fd, data, offset, md5)
        finally:
            for piece in pieces:
                piece.cancel()
        return offset

    async def _piece(self, f: ObjectFile, start: int, stop: int) -> bytes:
        result = await obstore.get_async(self._store, f.key, options={"range": (start, stop), "if_match": f.etag})
        data = await result.bytes_async()
        if result.meta.get("e_tag") != f.etag or len(data) != stop - start:
            raise FillFailed("the store answered with another version")
        return data


def _write(fd: int, data: Any, offset: int, md5: Any) -> int:
    """Write ``data`` at ``offset`` (hashed into ``md5`` when given); the offset after it."""
    view = memoryview(data)
    while view:
        written = os.pwrite(fd, view, offset)
        offset += written
        view = view[written:]
    if md5 is not None:
        md5.update(data)
    return offset


def keep_on_disk(tier: DiskTier | None, key: str, etag: str | None, data: bytes) -> None:
    """Keep an object that opening brought whole on disk too, by a thread of the store's loop."""
    if tier is not None and etag is not None:
        tier.keep_later(key, etag, data)


def crc_of_file(f: TierFile) -> int:
    """The CRC-32 of a kept object's file, read by offset (:class:`FileChanged` should it be short)."""
    crc = offset = 0
    while offset < f.size:
        chunk = os.pread(f.fd, min(1 << 20, f.size - offset), offset)
        if not chunk:
            raise FileChanged(f.path)
        crc = zlib.crc32(chunk, crc)
        offset += len(chunk)
    return crc
