"""The objects' disk tier: objects fetched from the store kept as files under one directory,
shared by every worker of a node and found again after a restart (``--object-disk-cache DIR``).

A file is named by its object's key and the ETag the store gives now, both hashed
(:func:`DiskTier.path_of`): a lookup asks for the version the listing (or the opening GET) just
named, so an overwritten object is never served from its old file, and the fill of its new
version deletes the old ones. A fill writes a temporary name, checks it (length, and an ETag
that is an MD5 against the bytes), syncs it and renames it: the rename is the commit, so a
worker killed mid-fill leaves only a temporary file that no lookup opens (:mod:`.object_disk_space`
deletes it once its process is gone). One fill per object at a time: within a process one
future per name; across processes an exclusive ``flock`` on ``<name>.lock``, which the others
poll until the file is there (then it is theirs too) or ``wait`` seconds passed (then they
fetch from the store as without the tier). The bytes on disk stay within the bound
(:class:`~.object_disk_space.Space`); a fill that fails (a full disk, a store that fails) is a
line in the log and a count, and the object is served from the store.

Everything here runs on the source's store loop (:mod:`.objects`), except :meth:`DiskTier.keep`,
which is given bytes already fetched and runs in a thread.
"""

from __future__ import annotations

import asyncio
import errno
import fcntl
import hashlib
import logging
import os
import re
import time
from typing import Awaitable, Callable

from .object_disk_space import LOCK, Space, disk_bytes, entries_of, reserved_for, temp_name

log = logging.getLogger("axon.storage")

#: Seconds a hit leaves a file's mtime (its last use, for the LRU) before setting it again.
TOUCH = 1.0
#: Small objects being written from bytes already fetched, at most, per process (each holds its
#: bytes, at most the opening read's, until written): past it an object is not kept this time.
KEEPS_IN_FLIGHT = 32
#: Large objects filled at once per process (each holds a few pieces in memory).
LARGE_FILLS = 2
#: Seconds between polls of a fill that another process holds.
POLL = 0.01
#: Seconds between two log lines about fills that fail (the others are counted).
LOG_EVERY = 10.0
#: The store's ETag of a single-part upload is the MD5 of the bytes: ``"<32 hex digits>"``.
_MD5_ETAG = re.compile(r'^(?:W/)?"?([0-9a-fA-F]{32})"?$')

#: ``fill(fd, md5)``: write the object into the descriptor (by offset), hashing it into ``md5``
#: when given, and return the bytes written (the file's length is set beforehand, so only the
#: filler knows how many came); raises to abandon the fill.
Filler = Callable[[int, "hashlib._Hash | None"], Awaitable[int]]


class FillFailed(Exception):
    """A fill was abandoned for a reason of the tier's own (say, a checksum that disagrees)."""


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
        self.forked()

    def __repr__(self) -> str:
        return f"DiskTier({self.directory!r}, size={self.size})"

    def forked(self) -> None:
        """This process's own counts and fills (a worker forked after the tier was made)."""
        self._flights: dict[str, asyncio.Future[None]] = {}
        self._keeping = 0  # keep_later's writes in flight
        #: Fills by ranged GETs this process makes at once (object_tiered): their pieces are in memory.
        self.large_fills = asyncio.Semaphore(LARGE_FILLS)
        self._logged = float("-inf")
        self.hits = self.misses = self.bytes_filled = self.fill_failures = 0
        self.space.evictions = 0

    def counts(self) -> dict[str, int]:
        """This process's counts, by the names the metrics give them (``axon_<name>_total``)."""
        return {"object_disk_hits": self.hits, "object_disk_misses": self.misses,
                "object_disk_bytes_filled": self.bytes_filled, "object_disk_evictions": self.space.evictions,
                "object_disk_fill_failures": self.fill_failures}

    def path_of(self, key: str, etag: str) -> str:
        """The file of ``key`` at version ``etag``: ``<dir>/ab/<sha256(key)>-<sha256(etag)>``."""
        k = hashlib.sha256(key.encode()).hexdigest()
        return os.path.join(self.directory, k[:2], f"{k}-{hashlib.sha256(etag.encode()).hexdigest()[:32]}")

    def fits(self, size: int) -> bool:
        return 0 < size <= self.largest

    # -- lookups ---------------------------------------------------------------------------------

    def open(self, key: str, etag: str, size: int) -> int | None:
        """A read-only descriptor of ``key`` at ``etag`` when its whole file is here (counted a
        hit), else None (not counted: the caller decides whether it is a miss)."""
        fd = self._open_whole(self.path_of(key, etag), size)
        if fd is not None:
            self.hits += 1
        return fd

    async def lookup(self, key: str, etag: str, size: int) -> int | None:
        """:meth:`open`, after the fill of that version under way in this process, if one is."""
        path = self.path_of(key, etag)
        flight = self._flights.get(path)
        if flight is not None:
            await asyncio.shield(flight)
        return self.open(key, etag, size)

    def _open_whole(self, path: str, size: int) -> int | None:
        try:
            fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC | os.O_NOFOLLOW)
        except OSError:
            return None
        try:
            st = os.fstat(fd)
            if st.st_size != size:  # never: a name is committed whole; but never serve a wrong length
                os.close(fd)
                return None
            if time.time() - st.st_mtime > TOUCH:
                os.utime(fd)  # its last use, for the LRU
        except OSError:
            os.close(fd)
            return None
        return fd

    # -- fills -----------------------------------------------------------------------------------

    async def fetch(self, key: str, etag: str, size: int, fill: Filler) -> int | None:
        """A descriptor of ``key`` at ``etag``: from its file, or filled by ``fill`` now (one fill
        per object at a time, across processes), or waited for from another process's fill;
        None when it cannot be kept (a failure logged and counted): then fetch it from the store."""
        path = self.path_of(key, etag)
        fd = self._open_whole(path, size)
        if fd is not None:
            self.hits += 1
            return fd
        self.misses += 1
        flight = self._flights.get(path)
        if flight is None:
            flight = self._flights[path] = asyncio.get_running_loop().create_future()
            try:
                await self._fill_locked(path, key, etag, size, fill)
            except OSError as exc:  # the directory itself failed us (its lock, its count)
                self._failed(key, str(exc))
            finally:
                self._flights.pop(path, None)
                flight.set_result(None)
        else:
            await asyncio.shield(flight)
        return self._open_whole(path, size)

    async def _fill_locked(self, path: str, key: str, etag: str, size: int, fill: Filler) -> None:
        """Fill ``path`` unless another process does (then wait for it, at most ``wait`` s)."""
        os.makedirs(os.path.dirname(path), exist_ok=True)
        lock = os.open(path + LOCK, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
        try:
            deadline = time.monotonic() + self.wait
            while True:
                try:
                    fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
                    break
                except BlockingIOError:
                    if os.path.exists(path):
                        return  # the other fill committed it
                    if time.monotonic() > deadline:
                        self._failed(key, f"another process has filled it for more than {self.wait} s")
                        return
                    await asyncio.sleep(POLL)
            if os.path.exists(path):
                return  # filled while this one waited for the lock
            try:
                await self._fill(path, key, etag, size, fill)
            finally:
                try:
                    os.unlink(path + LOCK)  # still held: a waiter that locks it next finds the file
                except OSError:
                    pass
        finally:
            os.close(lock)

    async def _fill(self, path: str, key: str, etag: str, size: int, fill: Filler) -> None:
        reserved = reserved_for(size)
        temp = temp_name(path, reserved)
        # In a thread: making room may scan the directory, which the store's loop must not wait on.
        fd = await asyncio.to_thread(self.space.reserve, reserved, temp)
        if fd is None:
            self._failed(key, f"{size} bytes do not fit in the cache's {self.size} beside the fills under way")
            return
        committed = False
        try:
            try:
                os.posix_fallocate(fd, 0, size)  # a full disk is found before any GET
                expected = md5_of_etag(etag)
                md5 = hashlib.md5(usedforsecurity=False) if expected is not None else None
                written = await fill(fd, md5)
                if written != size or os.fstat(fd).st_size != size:
                    raise FillFailed(f"the store sent {written} bytes, not {size}")
                if md5 is not None and md5.hexdigest() != expected:
                    raise FillFailed("its bytes' MD5 is not the one its ETag states")
                await asyncio.to_thread(os.fdatasync, fd)
                taken = disk_bytes(os.fstat(fd))
            finally:
                os.close(fd)
            self.space.commit(temp, path, reserved, taken)
            committed = True
            self.bytes_filled += size
            self._drop_other_versions(path)
        except asyncio.CancelledError:
            raise
        except (OSError, FillFailed) as exc:
            why = "no space left on the device" if getattr(exc, "errno", None) == errno.ENOSPC else str(exc)
            self._failed(key, why)
        except Exception as exc:  # noqa: BLE001 - the store failed: served from it, as without the tier
            self._failed(key, str(exc).strip().split("\n", 1)[0][:300] or type(exc).__name__)
        finally:
            if not committed:
                self.space.release([temp], reserved)

    def keep_later(self, key: str, etag: str, data: bytes) -> None:
        """:meth:`keep` in a thread, from the store's loop: a fill in flight until it is done, so
        that a batch right behind this one waits for the file rather than fetch the object again."""
        path = self.path_of(key, etag)
        if path in self._flights or not self.fits(len(data)) or self._keeping >= KEEPS_IN_FLIGHT:
            return
        self._keeping += 1
        flight = self._flights[path] = asyncio.get_running_loop().run_in_executor(None, self.keep, key, etag, data)

        def done(_: object) -> None:
            self._keeping -= 1
            self._flights.pop(path, None)

        flight.add_done_callback(done)

    def keep(self, key: str, etag: str, data: bytes) -> None:
        """Keep ``data``, the whole of ``key`` at ``etag``, fetched already (in a thread: it may
        wait for another process's fill of it, as :meth:`fetch` does)."""
        path = self.path_of(key, etag)
        if not self.fits(len(data)) or os.path.exists(path):
            return
        self.misses += 1

        async def write(fd: int, md5: hashlib._Hash | None) -> int:
            if md5 is not None:
                md5.update(data)
            return os.pwrite(fd, data, 0)

        try:
            asyncio.run(self._fill_locked(path, key, etag, len(data), write))
        except OSError as exc:  # the directory itself failed us
            self._failed(key, str(exc))

    def _drop_other_versions(self, path: str) -> None:
        """Delete the files of the key's other versions (an object overwritten since they were kept)."""
        directory, name = os.path.split(path)
        prefix = name.split("-", 1)[0] + "-"
        older = [e.path for e in entries_of(directory) if e.name.startswith(prefix) and e.name != name
                 and "." not in e.name]
        if older:
            self.space.release(older)

    def _failed(self, key: str, why: str) -> None:
        self.fill_failures += 1
        now = time.monotonic()
        if now - self._logged >= LOG_EVERY:
            self._logged = now
            log.warning("object disk cache %s: %r not kept (%s); served from the store (%d fills failed "
                        "in this process so far)", self.directory, key, why, self.fill_failures)
