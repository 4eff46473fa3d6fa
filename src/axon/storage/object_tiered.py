"""How an :class:`~.objects.ObjectSource` uses its disk tier (:mod:`.object_disk`): where a
batch's objects are opened, an object whose version is whole on disk becomes a
:class:`~.object_file.TierFile` (sent as a local file), and one that is not is filled, with
``If-Match`` on the ETag it was listed or opened with, while it is sent: a
:class:`~.object_fill.FillingFile` read behind the fill (the status line does not wait for the
fill). Requests of this process that want an object while it fills read behind the same fill;
another worker's wait for the fill to end (:meth:`~.object_disk.DiskTier.fetch`'s lock). An
object that fails to be kept before its first byte is written is sent from the store as without
the tier; one whose fill fails later cuts its responses short (:mod:`.object_fill`)."""

from __future__ import annotations

import asyncio
import os
from collections import deque
from concurrent.futures import Executor, ThreadPoolExecutor
from typing import Any

import obstore

from ..errors import FileChanged, HTTPError
from .crc_cache import read_crc32
from .object_disk import DiskTier, FillFailed
from .object_file import ObjectFile, TierFile
from .object_fill import Fill, FillingFile

#: Bytes of an object read when it is opened (:mod:`.objects`): a smaller object is then held
#: whole, and kept on disk from those bytes.
OPEN_READ = 64 * 1024
#: A larger object is filled by ranged GETs of this many bytes, FILL_AHEAD of them at once (a
#: store serves one connection at a fraction of what several give); a fill holds at most
#: FILL_AHEAD + 1 pieces in memory (and HASH_AHEAD bytes written but not yet hashed), and a
#: process makes object_disk.LARGE_FILLS such fills at once.
FILL_PIECE = 8 << 20
FILL_AHEAD = 4
#: Smaller objects (one GET each) filled at once per process.
FILLS = 64
#: Bytes of one fill written but not yet hashed, at most: its MD5 is summed by a thread of the
#: process's own behind the writes (the store loop streams meanwhile), and the fill waits for it
#: past this.
HASH_AHEAD = 16 << 20


class Lead:
    """An opening's GET that asked for an object's first :data:`FILL_PIECE` bytes, for the
    disk tier's fill to go on with (:meth:`~.objects.ObjectSource._open`): ``first``, the bytes
    read to open it, and the rest of the stream. The fill takes it as its first piece, so a cold
    object's bytes flow one round trip sooner than by a GET of their own after the opening. Not
    taken, it is dropped with its last reference (the store's connection with it)."""

    __slots__ = ("first", "_rest")

    def __init__(self, first: Any, rest: Any) -> None:
        self.first = first
        self._rest = rest

    @classmethod
    async def read(cls, result: Any, at_least: int) -> Lead:
        """``result`` (obstore's answer to a GET) with its first ``at_least`` bytes read, or
        more (what arrived with them), or all of a shorter one."""
        # Chunks of ``at_least`` for the whole stream: of 1 MiB (a ranged piece's), the opening
        # would wait for a megabyte, and a cold 64 MiB object measured 10-20 ms slower.
        rest = result.stream(min_chunk_size=at_least)
        return cls(memoryview(await anext(rest, b"")), rest)

    async def chunks(self) -> Any:
        """Every byte of the GET, ``first`` included, in order."""
        yield self.first
        async for chunk in self._rest:
            yield chunk


class TieredSource:
    """The disk tier's part of :class:`~.objects.ObjectSource`, which provides the rest."""

    tier: DiskTier | None
    listing: bool
    listing_valid: float
    _store: Any

    async def _open(self, requested: str, room: list[int] | None = None,
                    unless: str | None = None, leads: list[Lead] | None = None) -> ObjectFile | HTTPError | None: ...

    def key(self, requested: str) -> str: ...

    def content_type(self, key: str) -> str: ...

    def _listed_file(self, requested: str, meta: dict[str, Any], data: bytes | None = None) -> ObjectFile: ...

    def run(self, coro: Any) -> Any: ...

    async def _after_opening(self, requested: str, room: list[int] | None) -> tuple[Any, Any]: ...

    @property
    def sending(self) -> str:
        """What sends an object's bytes, and how long a listing stands, for ``axon serve``'s start line."""
        if not self.listing:
            listed = "each key opened (no listing)"
        elif self.listing_valid:
            listed = f"a listing valid {self.listing_valid:g} s for kept objects"
        else:
            listed = "a listing per batch"
        if self.tier is None:
            return f"bytes fetched from the store by ranged GETs, {listed}"
        return (f"objects kept on disk in {self.tier.directory} (at most {self.tier.size} bytes; sent as files), "
                f"else fetched from the store by ranged GETs, {listed}")

    def counts(self) -> dict[str, int]:
        """This process's counts of the disk tier (:meth:`.object_disk.DiskTier.counts`); none without one."""
        return {} if self.tier is None else self.tier.counts()

    def share_kept_files(self, size: int, valid: float, inactive: float, small_bytes: int) -> None:
        """For a server that reads files by offset only: the kept files' descriptors shared
        through an open-file cache as a local file's are (:meth:`.object_disk.DiskTier.share_files`)."""
        if self.tier is not None:
            self.tier.share_files(size, valid, inactive, small_bytes)


    def _crc_on_disk(self, f: ObjectFile) -> int | None:
        """The CRC-32 of an object kept on disk, or of one filling once it is (a zip's entry,
        from another thread than the store loop's); None for any other."""
        if isinstance(f, TierFile):
            return crc_of_file(f.fd, f)
        fd = self.run(f.fill.whole_file()) if f.fill is not None else None
        if fd is None:
            return None
        try:  # here, not on the store loop: every fill, opening and stream of the process runs there
            return crc_of_file(fd, f)
        finally:
            os.close(fd)

    def _keeping(self, etag: str | None, size: int) -> DiskTier | None:
        """The disk tier, if it keeps an object of this ETag and size: not one without an ETag
        (its versions cannot be told apart), nor one too large for it; else None."""
        tier = self.tier
        return tier if tier is not None and etag is not None and tier.fits(size) else None

    async def _on_disk(self, requested: str, meta: dict[str, Any]) -> ObjectFile | None:
        """The listed object from its file in the disk tier, if that version is whole there, or
        read behind its fill if this process fills it now."""
        etag, size = meta.get("e_tag"), meta["size"]
        tier = self._keeping(etag, size)
        if tier is None:
            return None
        fill = self._fills().get((meta["path"], etag))
        if fill is not None:
            return FillingFile(self._listed_file(requested, meta), fill)
        fd = await tier.lookup(meta["path"], etag, size)
        if fd is None:
            return None
        found = self._listed_file(requested, meta)
        tier.remember_version(found.key, etag, size, found.mtime_ns)
        return TierFile(found, fd)

    async def _open_kept(self, requested: str, room: list[int] | None = None) -> ObjectFile | HTTPError:
        """:meth:`_open`, then through the disk tier when there is one. Within a listing window,
        one opening of a key at a time (:meth:`~.object_batch.BatchSource._after_opening`)."""
        shared, opening = await self._after_opening(requested, room)
        if shared is not None:
            return shared
        leading = None
        try:
            held, known = await self._kept_version(requested)
            # Nothing of it on disk, filling or opening to fill here: the opening's GET may lead its fill.
            leading = self._leading_for(requested) if held is None else None
            leads: list[Lead] | None = None if leading is None else []
            found = await self._open(requested, room, unless=None if held is None else known[0], leads=leads)
            if found is None:  # the store's 304: the version on disk is the one it has now
                return TierFile(ObjectFile(self, known[3], known[0], requested, known[3], known[1], known[2],
                                           self.content_type(known[3])), held)
            if held is not None:
                held.close()
            if self.tier is None or isinstance(found, HTTPError):
                return found
            lead = leads[0] if leads else None
            return await self._through_tier(found, lead, leading is not None)
        finally:
            if leading is not None:
                self._leading.pop(leading).set_result(None)
            if opening is not None:
                opening()

    def _leading_for(self, requested: str) -> str | None:
        """The key of ``requested``, noted as opened to lead its fill, if its opening may start
        one in this process: a disk tier, no fill of the key under way here and no other opening
        leading one (a stream that no fill takes is dropped, its bytes unread); else None."""
        if self.tier is None:
            return None
        try:
            key = self.key(requested)
        except HTTPError:
            return None
        fills = self._fills()  # (and this process's _leading)
        if key in self._leading or any(filling == key for filling, _ in fills):
            return None
        self._leading[key] = asyncio.get_running_loop().create_future()
        return key

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

    async def _through_tier(self, found: ObjectFile, lead: Lead | None = None, leading: bool = False) -> ObjectFile:
        """``found`` from its file in the disk tier, else read behind its fill (started now unless
        this process fills it already: :mod:`.object_fill`, which goes on with the opening's
        ``lead`` when there is one, or behind the fill of an opening under way that leads one);
        ``found`` itself when it is not kept (no tier, no ETag, too large). An object that
        opening brought whole is sent from memory and kept on disk by a thread. A ``lead`` no
        fill takes is dropped on return (and its connection with it). ``leading``: this is the
        key's leading opening (with its lead, or without one if its GET failed and a HEAD opened
        it), which waits for no other."""
        tier = self._keeping(found.etag, found.size)
        if tier is None:
            return found
        tier.remember_version(found.key, found.etag, found.size, found.mtime_ns)
        if found.size <= OPEN_READ:
            return found  # opening brought it whole (_open keeps it on disk)
        version = (found.key, found.etag)
        fills = self._fills()
        fill = fills.get(version)
        leader = None if fill is not None or leading else self._leading.get(found.key)
        if leader is not None:  # another opening leads a fill of the key: read behind that one
            await asyncio.shield(leader)
            fill = fills.get(version)
        if fill is None:
            fd = await tier.lookup(found.key, found.etag, found.size)
            if fd is not None:
                return TierFile(found, fd)
            fill = fills.get(version)  # begun while this one looked
            if fill is None:
                fill = fills[version] = Fill(found.key, found.size)
                task = asyncio.ensure_future(self._run_fill(found, fill, lead))
                self._fill_tasks.add(task)  # held until done: the loop keeps only weak references
                task.add_done_callback(self._fill_tasks.discard)
        return FillingFile(found, fill)

    def _fills(self) -> dict[tuple[str, str], Fill]:
        """This process's fills under way, by (key, ETag) (a worker forked from a parent has none)."""
        if getattr(self, "_fills_pid", None) != os.getpid():
            self._fills_pid = os.getpid()
            self._filling: dict[tuple[str, str], Fill] = {}
            self._fill_tasks: set[asyncio.Task[None]] = set()
            self._fill_gate = asyncio.Semaphore(FILLS)
            #: Keys opened to lead a fill (_leading_for): done once that opening has ended.
            self._leading: dict[str, asyncio.Future[None]] = {}
            # One thread, so that each fill's pieces are hashed in the order given.
            self._hashing = ThreadPoolExecutor(1, thread_name_prefix="axon-md5")
        return self._filling

    async def _run_fill(self, f: ObjectFile, fill: Fill, lead: Lead | None = None) -> None:
        """Fill ``f`` into the tier (one fill per object across processes: :meth:`DiskTier.fetch`),
        going on with its opening's ``lead`` if any; the readers of ``fill`` follow it, and are
        told how it ended."""
        tier = self.tier
        assert tier is not None
        # Large fills hold pieces in memory: a few at once (and their room is made in turn).
        gate = tier.large_fills if f.size > FILL_PIECE else self._fill_gate
        # The lead is never held idle while the fill waits (its turn here, or another process's
        # fill): it is dropped, and the fill asks for its first piece itself.
        leads = [] if lead is None or gate.locked() else [lead]
        lead = None
        filler = lambda fd, md5: self._fill(f, fd, md5, fill, leads.pop() if leads else None)  # noqa: E731
        fd = None
        try:
            async with gate:
                held = await tier.fetch(f.key, f.etag, f.size, filler, fill.check,  # type: ignore[arg-type]
                                        waiting=leads.clear)
            if held is not None:  # the fill reads by its own descriptor; the tier's is given back
                try:
                    fd = os.dup(held.fd)
                finally:
                    held.close()
        finally:
            self._filling.pop((f.key, f.etag), None)  # type: ignore[arg-type]
            fill.finish(fd)
            fill.release()

    async def _fill(self, f: ObjectFile, fd: int, md5: Any, fill: Fill, lead: Lead | None = None) -> int:
        """Write ``f``'s bytes into ``fd`` in order (the MD5 is of the bytes in order), telling
        ``fill`` how far: one GET with ``If-Match`` on its ETag (or the opening's ``lead``,
        which brings all of it), or for a large object ranged GETs of :data:`FILL_PIECE`,
        :data:`FILL_AHEAD` at once (the ``lead`` the first of them); the bytes written."""
        fill.begin(fd)
        hashing = Hashing(md5, self._hashing)
        if f.size > FILL_PIECE:
            written = await self._fill_ranges(f, fd, hashing, fill, lead)
        else:
            written = 0
            async for chunk in await self._bytes_of(f, lead):
                written = await _write(fd, chunk, written, hashing)
                fill.advance(written)
        await hashing.done()
        return written

    async def _fill_ranges(self, f: ObjectFile, fd: int, hashing: Hashing, fill: Fill, lead: Lead | None) -> int:
        """Ranged GETs at once (the opening's ``lead`` the first, when given); the first in the
        file's order is written as its bytes arrive, the ones behind it wait in memory for their
        turn."""
        starts = iter(range(0, f.size, FILL_PIECE))
        pieces: deque[tuple[asyncio.Future[None], asyncio.Queue[Any]]] = deque()

        def ask_next() -> None:
            start = next(starts, None)
            if start is not None:
                arrived: asyncio.Queue[Any] = asyncio.Queue()
                got = asyncio.ensure_future(self._piece(f, start, min(start + FILL_PIECE, f.size), arrived,
                                                        lead if start == 0 else None))
                pieces.append((got, arrived))

        offset = 0
        try:
            for _ in range(FILL_AHEAD):
                ask_next()
            while pieces:
                got, arrived = pieces[0]
                while (chunk := await arrived.get()) is not None:
                    offset = await _write(fd, chunk, offset, hashing)
                    fill.advance(offset)
                await got  # raises if the piece failed
                pieces.popleft()
                ask_next()
        finally:
            for got, _ in pieces:
                got.cancel()
        return offset

    async def _bytes_of(self, f: ObjectFile, lead: Lead | None, span: tuple[int, int] | None = None) -> Any:
        """The chunks of ``f``'s bytes (of ``span``, a range, else all of them) as the store sends
        them: the opening's ``lead`` when given (it asked for them, of the version it opened),
        else a GET with ``If-Match`` on ``f``'s ETag. FillFailed if another version answers."""
        if lead is not None:
            return lead.chunks()
        options: dict[str, Any] = {"if_match": f.etag}
        if span is not None:
            options["range"] = span
        result = await obstore.get_async(self._store, f.key, options=options)
        if result.meta.get("e_tag") != f.etag or (span is None and result.meta["size"] != f.size):
            raise FillFailed("the store answered with another version")
        return result.stream(min_chunk_size=1 << 20)

    async def _piece(self, f: ObjectFile, start: int, stop: int, arrived: asyncio.Queue[Any],
                     lead: Lead | None = None) -> None:
        """Bytes ``start`` to ``stop`` of ``f`` put in ``arrived`` as they come (from ``lead``,
        the opening's GET of the same bytes, when given), then None."""
        try:
            got = 0
            async for chunk in await self._bytes_of(f, lead, (start, stop)):
                got += len(chunk)
                if got > stop - start:
                    break
                arrived.put_nowait(chunk)
            if got != stop - start:
                raise FillFailed(f"the store sent {got} bytes of a range of {stop - start}")
        finally:
            arrived.put_nowait(None)


class Hashing:
    """A fill's MD5 (None: unchecked), summed in order by ``executor`` (one thread) while the
    store loop goes on: at most :data:`HASH_AHEAD` bytes given and not yet hashed."""

    def __init__(self, md5: Any, executor: Executor) -> None:
        self.md5 = md5
        self._executor = executor
        self._pending: deque[tuple[asyncio.Future[None], int]] = deque()
        self._ahead = 0

    async def add(self, data: Any) -> None:
        """Hash ``data`` after what was given before; wait while too much is not hashed yet."""
        if self.md5 is None:
            return
        while self._ahead + len(data) > HASH_AHEAD and self._pending:
            await self._oldest()
        hashed = asyncio.get_running_loop().run_in_executor(self._executor, self.md5.update, data)
        self._pending.append((hashed, len(data)))
        self._ahead += len(data)

    async def done(self) -> None:
        """Once everything given is hashed (``md5`` is then the digest of all of it)."""
        while self._pending:
            await self._oldest()

    async def _oldest(self) -> None:
        hashed, size = self._pending[0]
        await hashed
        self._pending.popleft()
        self._ahead -= size


async def _write(fd: int, data: Any, offset: int, hashing: Hashing) -> int:
    """Write ``data`` at ``offset`` and give it to ``hashing``; the offset after it."""
    view = memoryview(data)
    while view:
        written = os.pwrite(fd, view, offset)
        offset += written
        view = view[written:]
    await hashing.add(data)
    return offset


def keep_on_disk(tier: DiskTier | None, key: str, etag: str | None, data: bytes) -> None:
    """Keep an object that opening brought whole on disk too, by a thread of the store's loop."""
    if tier is not None and etag is not None:
        tier.keep_later(key, etag, data)


def crc_of_file(fd: int, f: ObjectFile) -> int:
    """The CRC-32 of ``f`` kept on disk, read from ``fd`` (:class:`FileChanged` naming its path,
    which a batch's 503 says, should the file be short)."""
    try:
        return read_crc32(fd, f.size)
    except FileChanged:
        raise FileChanged(f.path) from None
