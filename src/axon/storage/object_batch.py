"""How an :class:`~.objects.ObjectSource` opens a batch: its keys named by the listing entries
still valid (:class:`~.object_listing.ListedKeys`) or by a listing made now
(:mod:`.object_listing`), each then found in memory (:mod:`.object_cache`), on the disk tier
(:mod:`.object_tiered`), or opened with a ranged GET, ``concurrency`` requests at a time.

A listing entry kept from an earlier batch (``--object-listing-valid SECONDS``) is trusted only
for an object whose bytes this process holds for that entry's ETag: in memory, in the disk tier,
or filling there. Such a batch costs the store nothing. Every other key is listed or opened as
without the window, so bytes fetched from the store are always asked by the ETag the store gives
now (an entry that went stale never makes a fetch fail its ``If-Match``), and a key the table
does not hold (new, expired, evicted) is never a 404 for that: the table only vouches for what
it holds.
"""

from __future__ import annotations

import asyncio
import logging
import time
from typing import TYPE_CHECKING, Any

from ..errors import HTTPError
from .object_file import ObjectFile, TierFile, identity_of
from .object_fill import FillingFile
from .object_listing import ListedKeys, ListingRefused, list_runs, plan_runs
from .object_tiered import OPEN_READ

if TYPE_CHECKING:
    from .object_cache import ObjectCache
    from .object_disk import DiskTier, Held, KeptVersion

log = logging.getLogger("axon.storage")

#: Listing entries whose objects' facts a process keeps made (each path's, for its entry now).
FACTS_MADE = 16384
#: Seconds batches are opened without listing after the store refused to list (credentials
#: that may GET but not LIST are common): then it is asked again.
LISTING_RETRY = 300.0


def holds_bytes(found: ObjectFile) -> bool:
    """Whether this process holds ``found``'s bytes for its listed ETag: in memory, or in the disk
    tier (whole or filling). The one test of what an entry kept from an earlier listing may vouch
    for, and of what is sent without a fetch; any other object is fetched by the ETag a listing
    made now gives (a small object's kept bytes past the batch's room are such a fetch too)."""
    return found.data is not None or isinstance(found, (TierFile, FillingFile))


class BatchSource:
    """The batch part of :class:`~.objects.ObjectSource`, which provides the rest."""

    listing: bool
    concurrency: int
    prefetch_bytes: int
    timeout: float
    _store: Any
    _cache: ObjectCache | None
    _listings: ListedKeys
    _listing_off_until: float
    #: key -> the opening of it under way on the store loop (within a listing window): :meth:`_after_opening`.
    _openings: dict[str, asyncio.Future[None]]
    tier: DiskTier | None
    #: requested path -> (its listing entry, the facts made of it, their identity, the file the disk
    #: tier keeps it as or None): :meth:`_listed_file`.
    _made: dict[str, tuple[dict[str, Any], tuple[Any, ...], int, str | None]]

    if TYPE_CHECKING:  # (stubs here would stand before the TieredSource methods they name)
        def key(self, requested: str) -> str: ...

        def content_type(self, key: str) -> str: ...

        def run(self, coro: Any) -> Any: ...

        def _ensure(self) -> Any: ...

        async def _open_kept(self, requested: str, room: list[int] | None = None) -> ObjectFile | HTTPError: ...

        async def _on_disk(self, requested: str, meta: dict[str, Any]) -> ObjectFile | None: ...

        def _keeping(self, etag: str | None, size: int) -> DiskTier | None: ...

        async def _through_tier(self, found: ObjectFile) -> ObjectFile: ...

    def open_many(self, paths: list[str]) -> list[ObjectFile | HTTPError]:
        """Each of ``paths`` opened, concurrently: an object or why it is not one. A batch whose
        every key is trusted within the window (:meth:`~.object_listing.ListedKeys.current`)
        and held (in memory, or whole on disk) is answered on the caller's thread: the store
        loop is asked only for the rest."""
        self._ensure()
        batch = _Batch(self, paths)
        try:
            if batch.trusted:
                for i, (path, meta) in enumerate(zip(paths, batch.metas())):
                    if meta is not None:
                        batch.first[i] = self._held_now(path, meta, batch.room)
                if None not in batch.first:
                    return batch.first  # type: ignore[return-value]
            return self.run(self._open_many(paths, batch))
        except BaseException:
            batch.close()  # what it holds (closing twice is nothing: a file closes once)
            raise

    def open_held(self, requested: str) -> ObjectFile | None:
        """``requested`` alone as :meth:`open_many` opens a batch's key on the caller's thread:
        when its entry stands within the window and this process holds its bytes (in memory, or
        whole on disk); else None, and it is opened (asking the store)."""
        if not self._listings.valid:
            return None
        try:
            key = self.key(requested)
        except HTTPError:
            return None  # opening says why
        meta = self._listings.current([key], time.monotonic()).get(key)
        return None if meta is None else self._held_now(requested, meta, [self.prefetch_bytes])

    async def _after_opening(self, requested: str, room: list[int] | None) -> tuple[ObjectFile | None, Any]:
        """Within a listing window, one opening of a key at a time (on the store loop): a request
        for a key whose opening is under way waits for it; then (or at once) it takes the object as
        its entry within the window names it, when this process holds (or fills) its bytes: (that
        object, None). Else
        (None, done), ``done`` to be called when this request's own opening has ended (None when
        it is not the key's opening). Without a window every request opens: an answer sent before
        it began would not be the store's version now."""
        if not self._listings.valid:
            return None, None
        try:
            key = self.key(requested)
        except HTTPError:
            return None, None  # opening says why
        openings = self._openings
        under_way = openings.get(key)
        if under_way is not None:
            await asyncio.shield(under_way)
        meta = self._listings.current([key], time.monotonic()).get(key)
        found = None if meta is None else await self._listed_object(
            requested, meta, [self.prefetch_bytes] if room is None else room)
        if found is not None and holds_bytes(found):
            return found, None
        if key in openings:
            return None, None  # another request's opening began meanwhile: this one opens too
        mine = openings[key] = asyncio.get_running_loop().create_future()

        def done() -> None:
            openings.pop(key, None)
            mine.set_result(None)

        return None, done

    def for_batch(self, paths: list[str]) -> BatchOpener:
        """This source as a batch of ``paths`` opens it: each ``open`` answered from HEADs made
        together (the planner opens one path at a time; the round trips overlap here)."""
        return BatchOpener(self, paths)

    async def _open_many(self, paths: list[str], batch: _Batch | None = None) -> list[ObjectFile | HTTPError]:
        gate = asyncio.Semaphore(self.concurrency)
        batch = _Batch(self, paths) if batch is None else batch
        keys, trusted, room = batch.keys, batch.trusted, batch.room

        async def held(path: str, meta: dict[str, Any] | None) -> ObjectFile | None:
            """The object from the bytes held for its entry still valid; None to list it."""
            found = None if meta is None else await self._listed_object(path, meta, room)
            return found if found is not None and holds_bytes(found) else None

        # In turn, not as tasks: a lookup waits only on a write of that object under way.
        first = batch.first
        if trusted:
            for i, (path, meta) in enumerate(zip(paths, batch.metas())):
                if first[i] is None:
                    first[i] = await held(path, meta)
        listed = await self._listed([keys[p] for p, f in zip(paths, first) if f is None and p in keys])

        async def one(path: str, found: ObjectFile | None) -> ObjectFile | HTTPError:
            if found is not None:
                return found
            meta = listed.get(keys.get(path, ""))
            if meta is not None:
                found = await self._listed_object(path, meta, room)
                if found is not None:
                    if holds_bytes(found):
                        return found
                    async with gate:
                        return await self._through_tier(found)
            async with gate:
                return await self._open_kept(path, room)

        opened = await asyncio.gather(*map(one, paths, first), return_exceptions=True)
        failed = next((f for f in opened if isinstance(f, BaseException) and not isinstance(f, HTTPError)), None)
        if failed is not None:
            batch.first = [f for f in opened if isinstance(f, ObjectFile)]  # closed by open_many
            raise failed
        return opened  # type: ignore[return-value]

    async def _listed(self, keys: list[str]) -> dict[str, dict[str, Any]]:
        """What listings made now say of ``keys`` and the keys beside them (key -> size, ETag,
        date), noted for the validity window; empty for too few keys, or while the store
        refuses to list."""
        if not self.listing or time.monotonic() < self._listing_off_until:
            return {}
        runs = plan_runs(keys)
        if not runs:
            return {}
        sent = time.monotonic()
        try:
            named = await list_runs(self._store, runs, self.concurrency, self.timeout)
        except ListingRefused as exc:
            log.warning("the object store refuses to list (%s): batches are opened key by key for %d s",
                        exc, LISTING_RETRY)
            self._listing_off_until = time.monotonic() + LISTING_RETRY
            return {}
        self._listings.note(named, sent, keys)
        return named

    async def _listed_object(self, requested: str, meta: dict[str, Any], room: list[int]) -> ObjectFile | None:
        """The object a listing entry names, from memory, else from the disk tier (whole there, or
        filling), else as :meth:`_from_listing` gives it (a large one, to fetch); None for a small
        object whose bytes are not kept (opened instead)."""
        found = self._from_listing(requested, meta, room)
        if found is not None and found.data is not None:
            return found  # from memory
        kept = await self._on_disk(requested, meta)
        return kept if kept is not None else found

    def _from_listing(self, requested: str, meta: dict[str, Any], room: list[int]) -> ObjectFile | None:
        """The object a listing named, without a request: a large one (its bytes fetched with
        ``If-Match`` as sent), an empty one, or a small one whose bytes are kept for the listed
        ETag. None for a small object not kept: opening it brings it whole in one request,
        which a GET of it after the status line would cost anyway."""
        key, size, etag = meta["path"], meta["size"], meta.get("e_tag")
        if etag is None:
            return None  # nothing to fetch it by with If-Match: opened as before
        data = None
        if size == 0:
            data = b""
        elif size <= OPEN_READ:
            kept = self._cache.get(key, etag) if self._cache is not None else None
            if kept is None or len(kept) != size:
                return None
            if room[0] >= size:  # else sent from the cache, or fetched, as the stream reaches it
                room[0] -= size
                data = kept
        return self._listed_file(requested, meta, data)

    def _held_now(self, requested: str, meta: dict[str, Any], room: list[int]) -> ObjectFile | None:
        """:meth:`_listed_object` without waiting, from any thread: the object from memory, or
        from its file whole on disk; None for the store loop to find (filling, or not held). A
        small kept file whose bytes the tier's open-file cache trusts is sent as the one object
        made of that entry and those bytes (:meth:`_trusted_file`), which every request shares."""
        made = self._made.get(requested)
        if made is not None and made[0] is meta and made[3] is not None:
            kept = self.tier.trusted(made[3])  # type: ignore[union-attr]
            if kept is not None:
                sent = kept.sent
                return sent[1] if sent is not None and sent[0] is made else self._trusted_file(kept, made)
        found = self._from_listing(requested, meta, room)
        if found is not None and found.data is not None:
            return found
        etag, size = meta.get("e_tag"), meta["size"]
        tier = self._keeping(etag, size)
        if tier is None:
            return None
        held = tier.open(meta["path"], etag, size)
        if held is None:
            return None
        kept = self._listed_file(requested, meta, held=held)
        tier.remember_version(kept.key, etag, size, kept.mtime_ns)
        return kept

    def _trusted_file(self, kept: KeptVersion, made: tuple[Any, ...]) -> ObjectFile:
        """The object ``made`` names (a requested path's listing entry) from the trusted bytes
        ``kept``: holding nothing (its ``close`` gives nothing back), kept with them for the next
        request of that path and entry."""
        _, facts, inode, _ = made
        sent = ObjectFile(*facts, kept.data, None, inode)
        kept.sent = (made, sent)
        return sent

    def _listed_file(self, requested: str, meta: dict[str, Any], data: bytes | None = None,
                     held: Held | None = None) -> ObjectFile:
        """The object a listing entry names: its bytes ``data`` in memory, or its file ``held``.
        Its facts are made once per entry (a warm batch's objects are named by the same entries)."""
        made = self._made.get(requested)
        if made is None or made[0] is not meta:
            key, etag = meta["path"], meta.get("e_tag")
            facts = (self, key, etag, requested, key, meta["size"],
                     int(meta["last_modified"].timestamp()) * 1_000_000_000, self.content_type(key))
            tier = self._keeping(etag, meta["size"])
            # ... and the file it is kept as, if the tier keeps it (DiskTier.trusted asks by it).
            made = (meta, facts, identity_of(etag, facts[5], facts[6]),
                    None if tier is None else tier.path_of(key, etag))
            if len(self._made) >= FACTS_MADE:
                self._made.clear()
            self._made[requested] = made
        _, facts, inode, _ = made
        if held is None:
            return ObjectFile(*facts, data, None, inode)  # type: ignore[arg-type]
        return TierFile.of(held, *facts, inode=inode)


class _Batch:
    """One batch's keys as its paths name them, the entries of them still valid, and the bytes
    of small objects it may hold from opening (``room``); ``first``: what was found held."""

    def __init__(self, source: BatchSource, paths: list[str]) -> None:
        self.room = [source.prefetch_bytes]
        started = time.monotonic()
        self.keys = keys = {}
        made = source._made
        for path in paths:
            known = made.get(path)
            if known is not None:  # a path named by an entry before: key() gave this key then
                keys[path] = known[1][1]
                continue
            try:
                keys[path] = source.key(path)
            except HTTPError:
                pass  # _open says why
        self.paths = paths
        self.trusted = source._listings.current(list(self.keys.values()), started)
        self.first: list[ObjectFile | None] = [None] * len(paths)

    def close(self) -> None:
        """Close what was found for the batch (a batch that fails to open holds nothing)."""
        for f in self.first:
            if f is not None:
                f.close()

    def metas(self) -> list[dict[str, Any] | None]:
        """Each path's entry still valid, or None."""
        keys, trusted = self.keys, self.trusted
        return [trusted.get(keys.get(p, "")) for p in self.paths]


class BatchOpener:
    """A :class:`~axon.storage.Source` for one batch: the first ``open`` HEADs every distinct
    path at once, each ``open`` then takes its answer. A path asked again (the planner opens
    the batch anew when an object changed under its CRC-32) starts a new round."""

    def __init__(self, source: Any, paths: list[str]) -> None:
        self._source = source
        self._paths = list(dict.fromkeys(paths))
        self._found: dict[str, ObjectFile | HTTPError] = {}
        self.crc32s = source.crc32s
        self.ready_files = None

    def open(self, requested: str) -> ObjectFile:
        found = self._found.pop(requested, None)
        if found is None:
            if requested not in self._paths:
                return self._source.open(requested)
            self._found = dict(zip(self._paths, self._source.open_many(self._paths)))
            found = self._found.pop(requested)
        if isinstance(found, HTTPError):
            raise found
        return found
