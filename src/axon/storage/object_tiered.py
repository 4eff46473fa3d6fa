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
#: A larger object is filled by ranged GETs of about this many bytes (fill_spans), FILL_AHEAD
#: of them at once (a store serves one connection at a fraction of what several give), each
#: written at its own offset as it arrives and the next asked as soon as one ends; a process
#: makes object_disk.LARGE_FILLS such fills at once. Eight at once (the whole of a 64 MiB object) were
#: a little faster cold than four, once no piece waited in memory (BENCHMARKS.md, 2026-11-29);
#: pieces of 4 MiB were slower.
FILL_PIECE = 8 << 20
FILL_AHEAD = 8
#: Smaller objects (one GET each) filled at once per process.
FILLS = 64
#: Bytes the MD5's thread reads from a fill's file at a time.
HASH_BLOCK = 1 << 20


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
        # Large fills keep FILL_AHEAD connections to the store each: a few at once (and their
        # room is made in turn).
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
        """Write ``f``'s bytes into ``fd``, telling ``fill`` how far the object is written from its
        start: one GET with ``If-Match`` on its ETag (or the opening's ``lead``, which brings all
        of it), or for a large object ranged GETs (:meth:`_fill_ranges`); the bytes written."""
        fill.begin(fd)
        hashing = Hashing(md5, self._hashing, fd)
        try:
            if f.size > FILL_PIECE:
                written = await self._fill_ranges(f, fd, hashing, fill, lead)
            else:
                written = 0
                async for chunk in await self._bytes_of(f, lead):
                    written = _write(fd, chunk, written)
                    _advance(fill, hashing, written)
            await hashing.done()
        except BaseException:
            await hashing.abandon()  # its thread reads the file no more once the fill gives it up
            raise
        return written

    async def _fill_ranges(self, f: ObjectFile, fd: int, hashing: Hashing, fill: Fill, lead: Lead | None) -> int:
        """The ranged GETs of :func:`fill_spans`, :data:`FILL_AHEAD` at once (the opening's ``lead``
        the first, when given), each piece written at its own offset as its bytes arrive and the
        next piece asked as soon as one ends: no connection waits for the file's order, and no
        piece waits in memory. ``fill`` (and the MD5) follow the prefix written without a gap."""
        spans = fill_spans(f.size)
        written = Written(spans)
        unasked = iter(range(len(spans)))

        async def pieces_in_turn() -> None:
            for k in unasked:  # shared: each loop takes the next piece not yet asked
                start, stop = spans[k]
                at = start
                async for chunk in await self._bytes_of(f, lead if k == 0 else None, (start, stop)):
                    if at + len(chunk) > stop:
                        raise FillFailed(f"the store sent more than the {stop - start} bytes of a range")
                    at = _write(fd, chunk, at)
                    _advance(fill, hashing, written.wrote(k, at))
                if at != stop:
                    raise FillFailed(f"the store sent {at - start} bytes of a range of {stop - start}")

        tasks = [asyncio.ensure_future(pieces_in_turn()) for _ in range(min(FILL_AHEAD, len(spans)))]
        try:
            await asyncio.gather(*tasks)
        finally:  # one failed (or the fill was cancelled): the others stop writing too
            for task in tasks:
                task.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)
        return f.size

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


def fill_spans(size: int) -> list[tuple[int, int]]:
    """The ranges a large object of ``size`` bytes is filled by, in the file's order, as many as
    pieces of :data:`FILL_PIECE` would make: its first :data:`FILL_PIECE` bytes (what an opening
    that leads the fill asks for), then the others of the first round (the :data:`FILL_AHEAD`
    asked at once) growing in size, then pieces of :data:`FILL_PIECE`. Ranges asked together
    share the link about equally: equal ones would all end at the end of the round, and the
    readers, who follow the bytes written without a gap from the start, would wait until then
    for most of them. The ``m`` pieces after the first grow by ``1/m``, ``1/(m-1)``, ... ``1/1``
    of an equal share (each ends about when the link has brought ``1/m`` more of them), so what
    readers may take grows as the bytes arrive."""
    if size <= 0:
        return []
    first = min(FILL_PIECE, size)
    spans = [(0, first)]
    rest = size - first
    m = min(-(-rest // FILL_PIECE), FILL_AHEAD - 1)
    if m:
        graded = min(rest, m * FILL_PIECE)
        harmonic = [0.0]
        for j in range(1, m + 1):
            harmonic.append(harmonic[-1] + 1 / j)
        start, share = first, 0.0
        for k in range(1, m + 1):
            share += harmonic[m] - harmonic[m - k]  # the shares sum to m
            stop = first + graded if k == m else first + round(graded * share / m)
            spans.append((start, stop))
            start = stop
    start = spans[-1][1]
    spans.extend((at, min(at + FILL_PIECE, size)) for at in range(start, size, FILL_PIECE))
    return spans


class Written:
    """How far a fill's pieces (``spans``, in the file's order) are written, each from its own
    start: the length of the object written without a gap."""

    __slots__ = ("spans", "ends", "head")

    def __init__(self, spans: list[tuple[int, int]]) -> None:
        self.spans = spans
        self.ends = [start for start, _ in spans]  # each piece written up to here
        self.head = 0  # the first piece not written whole

    def wrote(self, k: int, end: int) -> int:
        """Piece ``k`` is written up to ``end``: the bytes written from the object's start."""
        self.ends[k] = end
        spans, ends = self.spans, self.ends
        while self.head < len(spans) and ends[self.head] == spans[self.head][1]:
            self.head += 1
        return ends[self.head] if self.head < len(spans) else spans[-1][1]


class Hashing:
    """A fill's MD5 (None: unchecked), summed in order by ``executor`` (one thread) from the
    fill's file while the store loop goes on: each span once it is written without a gap before
    it (:meth:`add`), read back from the page cache, so no bytes wait in memory for it."""

    def __init__(self, md5: Any, executor: Executor, fd: int) -> None:
        self.md5 = md5
        self._executor = executor
        self._fd = fd
        self._given = 0
        self._pending: deque[asyncio.Future[None]] = deque()

    def add(self, written: int) -> None:
        """The bytes up to ``written`` are in the file: hash those not given before."""
        if self.md5 is None or written <= self._given:
            return
        while self._pending and self._pending[0].done():
            self._pending.popleft().result()  # a hash that failed fails the fill
        start, self._given = self._given, written
        self._pending.append(asyncio.get_running_loop().run_in_executor(self._executor, self._hash, start, written))

    def _hash(self, start: int, stop: int) -> None:
        while start < stop:
            data = os.pread(self._fd, min(HASH_BLOCK, stop - start), start)
            if not data:
                raise FillFailed("the fill's file came up short of what was written")
            self.md5.update(data)
            start += len(data)

    async def done(self) -> None:
        """Once everything given is hashed (``md5`` is then the digest of all of it)."""
        while self._pending:
            await self._pending[0]  # (left in the queue until it ended: abandon() waits for it)
            self._pending.popleft()

    async def abandon(self) -> None:
        """Once nothing given is being hashed, whatever came of it, even if cancelled meanwhile (a
        thread cannot be stopped, and the file it reads is closed once the fill is undone); the
        cancellation is raised once it ended."""
        pending, self._pending = self._pending, deque()
        cancelled: asyncio.CancelledError | None = None
        for job in pending:
            while not job.done():
                try:
                    await asyncio.shield(job)
                except asyncio.CancelledError as exc:
                    cancelled = exc
                except Exception:  # noqa: BLE001 - the fill failed already; this is not its cause
                    break
            if not job.cancelled():
                job.exception()  # retrieved: the fill's own error is the one raised
        if cancelled is not None:
            raise cancelled


def _write(fd: int, data: Any, offset: int) -> int:
    """Write ``data`` at ``offset``; the offset after it."""
    view = memoryview(data)
    while view:
        written = os.pwrite(fd, view, offset)
        offset += written
        view = view[written:]
    return offset


def _advance(fill: Fill, hashing: Hashing, written: int) -> None:
    """The object is written up to ``written`` from its start: its readers and its MD5 may follow."""
    if written > fill.written:
        fill.advance(written)
        hashing.add(written)


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
