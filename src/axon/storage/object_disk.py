"""The objects' disk tier: objects fetched from the store kept as files under one directory,
shared by every worker of a node and found again after a restart (``--object-disk-cache DIR``).

A file is named by its object's key and the ETag the store gives now, both hashed
(:func:`DiskTier.path_of`): a lookup asks for the version the listing (or the opening GET) just
named, so an overwritten object is never served from its old file, and the fill of its new
version deletes the old ones. A fill (:mod:`.object_disk_fill`) writes a temporary name, checks
it (its length, and an ETag that looks like an MD5 against the bytes while the store's ETags
prove to be MD5s), syncs it and renames it: the rename is the commit, so a worker killed
mid-fill leaves only a temporary file that no lookup opens (and no fill locks:
:mod:`.object_disk_space` deletes it). One fill per object at a time: within a process one
future per name; across processes an exclusive ``flock`` on ``<name>.lock``, which the others
poll until the file is there (then it is theirs too) or ``wait`` seconds passed (then they
fetch from the store as without the tier). The bytes on disk stay within the bound
(:class:`~.object_disk_space.Space`); a fill that fails (a full disk, a store that fails) is a
line in the log and a count, and the object is served from the store.

For a server that reads by offset (``axon serve``) the kept files' descriptors are shared by
responses through an open-file cache (:meth:`DiskTier.share_files`), as local files' are.

Everything here runs on the source's store loop (:mod:`.objects`), except :meth:`DiskTier.keep`,
which is given bytes already fetched and runs in a thread.
"""

from __future__ import annotations

import asyncio
import errno
import functools
import hashlib
import logging
import os
import re
import threading
import time
from collections import OrderedDict
from concurrent.futures import ThreadPoolExecutor
from typing import Any, Awaitable, Callable, NamedTuple

from . import FILE_CACHE_BYTES, FILE_CACHE_INACTIVE, FILE_CACHE_SIZE, FILE_CACHE_VALID
from .file_cache import CachedDescriptor, FileCache
from .object_disk_fill import Fill, lock_fill, to_the_end, unlock_fill, write_all
from .object_disk_space import Space, entries_of

log = logging.getLogger("axon.storage")

#: Seconds a hit leaves a file's mtime (its last use, for the LRU) before setting it again.
TOUCH = 1.0
#: Files whose last touch a process remembers (a hit's stat may be older: :meth:`DiskTier._touched`);
#: past it all are forgotten, and each is touched again at its next hit.
TOUCHES = 65536
#: Bytes of small objects (fetched already) waiting to be written, at most, per process: a burst
#: of them is queued for the KEEPERS threads; past it an object is not kept this time.
KEEP_QUEUE_BYTES = 16 << 20
#: Threads per process that write those objects (each write ends with a sync).
KEEPERS = 4
#: Large objects filled at once per process (each keeps object_tiered.FILL_AHEAD connections to the store).
LARGE_FILLS = 2
#: Seconds between polls of a fill that another process holds.
POLL = 0.01
#: Seconds between two log lines about fills that fail (the others are counted).
LOG_EVERY = 10.0
#: Seconds between two sweeps of the kept files' descriptors (as the server's of local files).
SWEEP = 1.0
#: Fills of MD5-looking ETags whose bytes disagree (at the right length) before this process
#: takes the store's ETags for what they are then (not MD5s: AWS SSE-KMS), while no fill agreed.
NOT_MD5_AFTER = 3
#: Keys whose last version found on disk a process remembers (:meth:`DiskTier.remember_version`).
VERSIONS_KNOWN = 65536
#: The store's ETag of a single-part upload is the MD5 of the bytes: ``"<32 hex digits>"``.
_MD5_ETAG = re.compile(r'^(?:W/)?"?([0-9a-fA-F]{32})"?$')

#: ``fill(fd, md5)``: write the object into the descriptor (by offset), hashing it into ``md5``
#: when given, and return the bytes written (the file's length is set beforehand, so only the
#: filler knows how many came); raises to abandon the fill.
Filler = Callable[[int, "hashlib._Hash | None"], Awaitable[int]]


class FillFailed(Exception):
    """A fill was abandoned for a reason of the tier's own (say, a checksum that disagrees)."""


class Held(NamedTuple):
    """A kept file's descriptor, as a response holds it: the open-file cache's (``shared``:
    given back, never closed; read by offset only) or its own. Whoever holds it closes it.
    ``data``: a small file's bytes, when the open-file cache keeps them (sent without a read)."""

    fd: int
    shared: CachedDescriptor | None = None
    data: bytes | None = None

    def close(self) -> None:
        if self.shared is not None:
            self.shared.release()
        else:
            os.close(self.fd)


class KeptVersion:
    """A kept small file the tier's open-file cache trusts (:meth:`DiskTier.trusted`): its version
    token and bytes, made once per file by the cache and dropped with its entry. ``sent``: what a
    source made of it last (its listing entry and the object sent), shared by the requests that
    send it while both stand, and gone with the trust: it holds nothing the cache does not."""

    __slots__ = ("version", "data", "sent")

    def __init__(self, requested: str, version: tuple, data: bytes, name: str, content_type: str) -> None:
        self.version = version
        self.data = data
        self.sent: Any = None


def md5_of_etag(etag: str) -> str | None:
    """The MD5 an ETag states (a single-part upload's), in lower-case hex; None for any other."""
    found = _MD5_ETAG.match(etag)
    return found.group(1).lower() if found else None


class DiskTier:
    """Objects kept as files under ``directory``, at most ``size`` bytes on disk."""

    def __init__(self, directory: str, size: int, *, wait: float = 30.0) -> None:
        if size < 1:
            raise ValueError("the object disk cache's size must be at least 1 byte")
        os.makedirs(directory, exist_ok=True)
        self.directory = os.path.realpath(directory)
        self.size = size
        self.wait = wait
        #: The largest object kept: half the bound, so that one never empties the tier alone.
        self.largest = size // 2
        self.space = Space(self.directory, size)
        self.space.scan()  # a restart: what is whole stays, a killed fill's temporary file goes
        #: The open-file cache's settings (:meth:`share_files`), None while descriptors are not shared.
        self._sharing: tuple[int, float, float, int] | None = None
        self.forked()

    def __repr__(self) -> str:
        return f"DiskTier({self.directory!r}, size={self.size})"

    def share_files(self, size: int = FILE_CACHE_SIZE, valid: float = FILE_CACHE_VALID,
                    inactive: float = FILE_CACHE_INACTIVE, small_bytes: int = FILE_CACHE_BYTES) -> None:
        """Keep the kept files' descriptors in an open-file cache (:mod:`.file_cache`, as a local
        file's: at most ``size``, each closed once unused ``inactive`` seconds, its name checked
        again every ``valid``, small files' bytes kept too within ``small_bytes``), shared by the
        responses: for a server that reads files by offset only (``axon serve``). A name is a version, so a use trusts the descriptor's last
        ``fstat`` for the cache's ``valid`` window (its bytes are that version's even once
        deleted); each process drops all of them within :data:`SWEEP` seconds of a deletion by
        any process, so that no evicted file's blocks stay held."""
        self._sharing = (size, valid, inactive, small_bytes)
        self.forked()

    def forked(self) -> None:
        """This process's own counts and fills (a worker forked after the tier was made)."""
        self._flights: dict[str, asyncio.Future[None]] = {}
        self._versions: OrderedDict[str, tuple[str, int, int]] = OrderedDict()
        self._versions_lock = threading.Lock()  # remembered from the store loop and handler threads
        #: The store loop of this process (set by its source): a sweep found due on a handler
        #: thread (:meth:`open` called there) is started on it.
        self.loop: asyncio.AbstractEventLoop | None = None
        self._queued = 0  # bytes of keep_later's writes queued or under way
        self._keepers: ThreadPoolExecutor | None = None  # made at the first keep (threads do not fork)
        #: Fills by ranged GETs this process makes at once (object_tiered): each keeps FILL_AHEAD connections to the store.
        self.large_fills = asyncio.Semaphore(LARGE_FILLS)
        self._logged = float("-inf")
        self.hits = self.misses = self.bytes_filled = self.fill_failures = 0
        self._counting = threading.Lock()  # hits counted by handler threads, fills by keepers and the loop
        self._touches: dict[str, float] = {}
        self.space.evictions = 0
        self._md5_agreed, self._md5_disagreed, self.etags_are_md5 = False, 0, True
        # A parent's descriptors are left to it: never closed or swept here.
        self.files = None if self._sharing is None else FileCache(
            self._sharing[0], self._sharing[1], inactive=self._sharing[2], small_bytes=self._sharing[3],
            recheck=_still_named, immutable=True, trusted=KeptVersion, walked=True)  # KeptVersion.sent names the source
        self._usage = -1 if self._sharing is None else self.space.open_usage()
        self._seen_deletions = -1 if self._sharing is None else self.space.deletions(self._usage)
        self._sweeping: asyncio.AbstractEventLoop | None = None  # the loop a sweep is due on

    def counts(self) -> dict[str, int]:
        """This process's counts, by the names the metrics give them (``axon_<name>_total``)."""
        return {"object_disk_hits": self.hits, "object_disk_misses": self.misses,
                "object_disk_bytes_filled": self.bytes_filled, "object_disk_evictions": self.space.evictions,
                "object_disk_fill_failures": self.fill_failures}

    def _count(self, hits: int = 0, misses: int = 0, bytes_filled: int = 0, fill_failures: int = 0) -> None:
        """Add to this process's counts, from any of its threads."""
        with self._counting:
            self.hits += hits
            self.misses += misses
            self.bytes_filled += bytes_filled
            self.fill_failures += fill_failures

    def path_of(self, key: str, etag: str) -> str:
        """The file of ``key`` at version ``etag``: ``<dir>/ab/<sha256(key)>-<sha256(etag)>``."""
        return self.directory + _name_of(key, etag)

    def fits(self, size: int) -> bool:
        return 0 < size <= self.largest

    def remember_version(self, key: str, etag: str, size: int, mtime_ns: int) -> None:
        """``key``'s version as this process last found or filled it (the store's facts), so
        that opening the key alone can ask the store whether it is still the current one
        (:meth:`known_version`); at most :data:`VERSIONS_KNOWN` keys, the least recent forgotten."""
        versions, version = self._versions, (etag, size, mtime_ns)
        if versions.get(key) == version:
            return  # each warm hit: left where it was (one forgotten is remembered at its next hit)
        with self._versions_lock:
            versions[key] = version
            versions.move_to_end(key)
            if len(versions) > VERSIONS_KNOWN:
                versions.popitem(last=False)

    def known_version(self, key: str) -> tuple[str, int, int] | None:
        """(ETag, size, mtime_ns) of ``key`` as :meth:`remember_version` last had it; None."""
        return self._versions.get(key)

    # -- lookups ---------------------------------------------------------------------------------

    def open(self, key: str, etag: str, size: int) -> Held | None:
        """A read-only descriptor of ``key`` at ``etag`` when its whole file is here (counted a
        hit), else None (not counted: the caller decides whether it is a miss). From any thread:
        a name is only ever a whole file, so a fill under way is no reason to wait here."""
        held = self._open_whole(self.path_of(key, etag), size)
        if held is not None:
            self._count(hits=1)
        return held

    async def lookup(self, key: str, etag: str, size: int) -> Held | None:
        """:meth:`open`, after the fill of that version under way in this process, if one is."""
        path = self.path_of(key, etag)
        flight = self._flights.get(path)
        if flight is not None:
            await asyncio.shield(flight)
        return self.open(key, etag, size)

    def trusted(self, path: str) -> KeptVersion | None:
        """The kept file ``path`` from its bytes in memory, when the open-file cache trusts them
        (:meth:`~.file_cache.FileCache.peek`: nothing held, nothing read), counted a hit; else None
        (then :meth:`open` it). A name is one version, so trusted bytes are that version's."""
        files = self.files
        kept = None if files is None else files.peek(path)
        if kept is None or not self._touched(path, path, kept.version[3] / 1e9):
            return None
        self._sweep_later()
        self._count(hits=1)
        return kept

    def _open_whole(self, path: str, size: int) -> Held | None:
        files = self.files
        if files is not None:
            found = files.acquire(path)  # None as well for a file deleted or renamed over since
            if found is not None:
                entry, st = found
                if st.st_size == size and self._touched(path, entry.fd, st.st_mtime):
                    self._sweep_later()
                    return _shared(files, path, entry, st)
                entry.release()
                return None
        try:
            fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC | os.O_NOFOLLOW)
        except OSError:
            return None
        try:
            st = os.fstat(fd)
        except OSError:
            st = None
        # Never: a name is committed whole; but never serve a wrong length.
        if st is None or st.st_size != size or not self._touched(path, fd, st.st_mtime):
            os.close(fd)
            return None
        if files is None:
            return Held(fd)
        self._sweep_later()
        return _shared(files, path, files.add(path, fd, (st.st_dev, st.st_ino), path, ""), st)

    def _touched(self, path: str, file: int | str, mtime: float) -> bool:
        """Set a hit file's mtime (its last use, for the LRU) at most every :data:`TOUCH` seconds
        (``file``: its descriptor, or its path when none is held); False if it cannot be (gone
        bad: not served). ``mtime`` may be as of a stat taken before this process's last touch,
        so the time of that touch is remembered beside it."""
        now, touches = time.time(), self._touches
        if now - max(mtime, touches.get(path, 0.0)) <= TOUCH:
            return True
        try:
            os.utime(file)
        except OSError:
            return False
        if len(touches) >= TOUCHES:
            touches.clear()
        touches[path] = now
        return True

    def _sweep_later(self) -> None:
        """A sweep in :data:`SWEEP` seconds on the store loop, unless one is due: one wake-up of
        that loop, not one per hit (hits come from handler threads)."""
        due = self._sweeping
        if due is not None and not due.is_closed():  # (a loop that ended took its sweep with it)
            return
        try:
            running: asyncio.AbstractEventLoop | None = asyncio.get_running_loop()
        except RuntimeError:
            running = None
        loop = self.loop or running
        if loop is None:
            return  # no loop (a test's direct call): descriptors are checked by each use still
        with self._counting:  # one thread asks for it; the others find it due
            if self._sweeping is due:
                self._sweeping = loop
            else:
                return
        if loop is running:
            loop.call_later(SWEEP, self._sweep)
        else:  # a handler thread: the sweep is the store loop's to start
            loop.call_soon_threadsafe(loop.call_later, SWEEP, self._sweep)

    def _sweep(self) -> None:
        """Close the descriptors unused for the idle time; all of them once any process deleted
        a kept file since the last sweep (a deleted file's blocks are free once none is open)."""
        files = self.files
        self._sweeping = None
        if files is None:
            return
        deletions = self.space.deletions(self._usage)
        if deletions != self._seen_deletions:
            self._seen_deletions = deletions
            files.clear()
        else:
            files.prune()
        if len(files):
            self._sweep_later()

    # -- fills -----------------------------------------------------------------------------------

    async def fetch(self, key: str, etag: str, size: int, fill: Filler,
                    checked: Callable[[], None] | None = None,
                    waiting: Callable[[], None] | None = None) -> Held | None:
        """A descriptor of ``key`` at ``etag``: from its file, or filled by ``fill`` now (one fill
        per object at a time, across processes), or waited for from another process's fill;
        None when it cannot be kept (a failure logged and counted): then fetch it from the store.
        ``checked`` is called once a fill made here is whole and checked, before its commit;
        ``waiting`` when this waits for another fill of it (of this process or another)."""
        path = self.path_of(key, etag)
        held = self._open_whole(path, size)
        if held is not None:
            self._count(hits=1)
            return held
        self._count(misses=1)
        flight = self._flights.get(path)
        if flight is None:
            flight = self._flights[path] = asyncio.get_running_loop().create_future()
            try:
                await self._fill_locked(path, key, etag, size, fill, checked, waiting)
            except OSError as exc:  # the directory itself failed us (its lock, its count)
                self._failed(key, str(exc))
            finally:
                self._flights.pop(path, None)
                flight.set_result(None)
        else:
            if waiting is not None:
                waiting()
            await asyncio.shield(flight)
        return self._open_whole(path, size)

    async def _fill_locked(self, path: str, key: str, etag: str, size: int, fill: Filler,
                           checked: Callable[[], None] | None, waiting: Callable[[], None] | None = None) -> None:
        """Fill ``path`` unless another process does (then wait for it, at most ``wait`` s,
        ``waiting`` called first)."""
        deadline = time.monotonic() + self.wait
        while True:
            lock = lock_fill(path)
            if lock is not None:
                break
            if waiting is not None:
                waiting()
                waiting = None
            if os.path.exists(path):
                return  # the other fill committed it
            if time.monotonic() > deadline:
                self._failed(key, f"another process has filled it for more than {self.wait} s")
                return
            await asyncio.sleep(POLL)
        try:
            if not os.path.exists(path):  # else filled while this one waited for the lock
                await self._fill(path, key, etag, size, fill, checked)
        finally:
            unlock_fill(path, lock)

    async def _fill(self, path: str, key: str, etag: str, size: int, fill: Filler,
                    checked: Callable[[], None] | None = None) -> None:
        made = Fill(self.space, path, size)
        try:
            # In threads: making room may delete files, and a sync waits on the disk; the store's
            # loop must not wait on either.
            if not await to_the_end(made.reserve):
                self._failed(key, f"{size} bytes do not fit in the cache's {self.size} beside the fills under way")
                return
            expected = self._md5_to_check(etag)
            md5 = hashlib.md5(usedforsecurity=False) if expected is not None else None
            self._check(size, await fill(made.fd, md5), made.fd, md5, expected)
            if checked is not None:  # its bytes are final: the sync and the rename keep them, no more
                checked()
            await to_the_end(made.commit)
            self._filled(path, size)
        except asyncio.CancelledError:
            raise
        except Exception as exc:  # noqa: BLE001 - the store failed: served from it, as without the tier
            self._fill_failed(key, exc)
        finally:
            made.abandon()

    def keep_later(self, key: str, etag: str, data: bytes) -> None:
        """:meth:`keep` by a thread of :data:`KEEPERS`, queued from the store's loop while the
        queue holds at most :data:`KEEP_QUEUE_BYTES`: a fill in flight until it is done, so that a
        batch right behind this one waits for the file rather than fetch the object again."""
        path, size = self.path_of(key, etag), len(data)
        if path in self._flights or not self.fits(size) or self._queued + size > KEEP_QUEUE_BYTES:
            return
        if self._keepers is None:
            self._keepers = ThreadPoolExecutor(KEEPERS, thread_name_prefix="axon-keep")
        self._queued += size
        flight = self._flights[path] = asyncio.get_running_loop().run_in_executor(
            self._keepers, self.keep, key, etag, data)

        def done(_: object) -> None:
            self._queued -= size
            self._flights.pop(path, None)

        flight.add_done_callback(done)

    def keep(self, key: str, etag: str, data: bytes) -> None:
        """Keep ``data``, the whole of ``key`` at ``etag``, fetched already (in a thread, without
        an event loop). Another process filling it now keeps it: this one does not wait."""
        path = self.path_of(key, etag)
        if not self.fits(len(data)) or os.path.exists(path):
            return
        self._count(misses=1)
        try:
            lock = lock_fill(path)
        except OSError as exc:  # the directory itself failed us
            self._failed(key, str(exc))
            return
        if lock is None:
            return
        made = Fill(self.space, path, len(data))
        try:
            if os.path.exists(path):
                return
            if not made.reserve():
                self._failed(key, f"{len(data)} bytes do not fit in the cache's {self.size} beside the fills under way")
                return
            expected = self._md5_to_check(etag)
            md5 = hashlib.md5(data, usedforsecurity=False) if expected is not None else None
            self._check(len(data), write_all(made.fd, data), made.fd, md5, expected)
            made.commit()
            self._filled(path, len(data))
        except Exception as exc:  # noqa: BLE001 - as in _fill
            self._fill_failed(key, exc)
        finally:
            made.abandon()
            unlock_fill(path, lock)

    def _md5_to_check(self, etag: str) -> str | None:
        """The MD5 a fill's bytes must have: the one its ETag states, unless this store's ETags
        proved not to be MD5s (:meth:`_check`)."""
        return md5_of_etag(etag) if self.etags_are_md5 else None

    def _check(self, size: int, written: int, fd: int, md5: Any, expected: str | None) -> None:
        """The checks of a fill before its commit: its length always, and its bytes' MD5 against
        an ETag that states one. A store whose MD5-looking ETags disagree with
        :data:`NOT_MD5_AFTER` fills of the right length, and never agreed with one, does not make
        them of the bytes (AWS SSE-KMS): its fills are checked by their length from then on (the
        ones that disagreed were not kept). One that agreed once is always checked."""
        if written != size or os.fstat(fd).st_size != size:
            raise FillFailed(f"the store sent {written} bytes, not {size}")
        if md5 is None:
            return
        if md5.hexdigest() == expected:
            self._md5_agreed = True
            return
        if not self._md5_agreed:
            self._md5_disagreed += 1
            if self._md5_disagreed >= NOT_MD5_AFTER:
                self.etags_are_md5 = False
                log.warning("object disk cache %s: the store's ETags are not the MD5 of the bytes (say, "
                            "SSE-KMS): objects are kept checked by their length", self.directory)
        raise FillFailed("its bytes' MD5 is not the one its ETag states")

    def _filled(self, path: str, size: int) -> None:
        self._count(bytes_filled=size)
        self._drop_other_versions(path)

    def _drop_other_versions(self, path: str) -> None:
        """Delete the files of the key's other versions (an object overwritten since they were kept)."""
        directory, name = os.path.split(path)
        prefix = name.split("-", 1)[0] + "-"
        older = [e.path for e in entries_of(directory) if e.name.startswith(prefix) and e.name != name
                 and "." not in e.name]
        if older:
            self.space.release(older)

    def _fill_failed(self, key: str, exc: Exception) -> None:
        if isinstance(exc, (OSError, FillFailed)):
            why = "no space left on the device" if getattr(exc, "errno", None) == errno.ENOSPC else str(exc)
        else:
            why = str(exc).strip().split("\n", 1)[0][:300] or type(exc).__name__
        self._failed(key, why)

    def _failed(self, key: str, why: str) -> None:
        self._count(fill_failures=1)
        now = time.monotonic()
        if now - self._logged >= LOG_EVERY:
            self._logged = now
            log.warning("object disk cache %s: %r not kept (%s); served from the store (%d fills failed "
                        "in this process so far)", self.directory, key, why, self.fill_failures)


@functools.lru_cache(maxsize=8192)
def _name_of(key: str, etag: str) -> str:
    """:meth:`DiskTier.path_of` below the directory, kept for the keys in use (a hit hashes nothing)."""
    k = hashlib.sha256(key.encode()).hexdigest()
    return f"/{k[:2]}/{k}-{hashlib.sha256(etag.encode()).hexdigest()[:32]}"


def _shared(files: FileCache, path: str, entry: CachedDescriptor, st: os.stat_result) -> Held:
    """A use of the open-file cache's ``entry`` (``st``: its stat now), with a small file's bytes
    when the cache keeps them: a name is one version, so they are that version's bytes, trusted
    from this use on (:meth:`DiskTier.trusted`)."""
    kept = entry.content(st)
    if kept is None:
        return Held(entry.fd, entry)
    files.admit(path, entry, st)
    return Held(entry.fd, entry, kept[1])


def _still_named(entry: CachedDescriptor, now: float, ahead: float = 0.0) -> float | None:
    """The open-file cache's revalidation of a kept file: ``now`` if its name still names that
    file (asked now, ahead of time or not)."""
    try:
        st = os.lstat(entry.name)
    except OSError:
        return None
    return now if (st.st_dev, st.st_ino) == entry.identity else None
