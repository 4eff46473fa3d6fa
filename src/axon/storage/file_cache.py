"""An open-file cache for :class:`~axon.storage.local.FileStore`: resolve a path once, share its descriptor.

A miss costs what an uncached open costs (normalise, ``openat2``, ``fstat``, later ``close``); a
hit costs one ``fstat`` of the cached descriptor, so the size, times and identity a response
declares are always the file's own, now. nginx's ``open_file_cache`` is the model; what differs
is that nginx trusts its cached stat for ``open_file_cache_valid`` (60 s by default), while here
only the path-to-file resolution is trusted, and only for ``valid`` seconds (default 1).

When a change on disk is seen:

* a file written, truncated, appended to or touched in place: at once (the ``fstat`` of every use);
* a file deleted, or replaced by a rename over it (the usual atomic deploy): at once. The cached
  inode has no name left (``st_nlink`` 0), so the path is resolved again;
* anything else that changes which file a path names (a symlink or directory re-pointed, a file
  replaced while another hard link keeps the old one alive) or whether it may be opened (its
  permissions): within ``valid`` seconds, after which the path is resolved again.

A cached descriptor never reaches outside the root: it was opened under the store's rules, and a
stale one can only name a file that was inside the root when it was opened.

A small file (up to ``SMALL_FILE``) keeps its bytes in the entry too, read once its last change
is ``SETTLED_NS`` old and served while the ``fstat`` of each use still shows the size, mtime and
ctime they were read under: a batch of small files is then framed from memory, with no read.

Descriptors are shared by reference count: an entry evicted (least recently used beyond ``size``
entries) or gone stale while responses still read it is closed when the last of them is done.
Shared descriptors must be read with explicit offsets only (``pread``, ``sendfile``), never
through the file position, which is why only Axon's own server turns the cache on: WSGI's
``file_wrapper`` and ASGI's ``zerocopysend`` hand the descriptor to code that may use it.
Thread-safe: blocking handlers open files from the App's thread pool.
"""

from __future__ import annotations

import logging
import os
import threading
import time
from collections import OrderedDict
from collections.abc import Callable

log = logging.getLogger("axon")


#: Files up to this size keep their bytes in the cache as well, so that a hit needs no read: a
#: batch of small files is then framed from memory (at most this much per entry, 16 MiB for
#: the default 1024 entries).
SMALL_FILE = 16 * 1024
#: ... once their last change is this old. Two writes within one tick of the filesystem's clock
#: can leave the size, mtime and ctime as they were (git calls such an entry "racily clean"):
#: bytes read from a file that settled this long are the bytes of every later request with the
#: same stat, since any later write moves the ctime past them.
SETTLED_NS = 2_000_000_000


class CachedDescriptor:
    """One cached open file: its descriptor, how many ``OpenFile`` views still use it, and for a
    small file its bytes with the stat they were read under."""

    __slots__ = ("fd", "identity", "name", "content_type", "expires", "refs", "dropped", "small", "_cache")

    def __init__(self, cache: FileCache, fd: int, identity: tuple[int, int], name: str, content_type: str,
                 expires: float) -> None:
        self.fd = fd
        self.identity = identity  # (device, inode): what the descriptor must still name
        self.name = name
        self.content_type = content_type
        self.expires = expires
        self.refs = 1
        self.dropped = False
        self.small: tuple[tuple[int, int, int], bytes] | None = None
        self._cache = cache

    def content(self, st: os.stat_result) -> bytes | None:
        """The file's bytes if it is small and settled, as of ``st`` (an ``fstat`` just taken);
        else None, and the caller reads it at its own offsets."""
        size = st.st_size
        if size > SMALL_FILE:
            return None
        key = (size, st.st_mtime_ns, st.st_ctime_ns)
        small = self.small
        if small is not None and small[0] == key:
            return small[1]
        if time.time_ns() - st.st_ctime_ns < SETTLED_NS:
            return None
        try:
            data = os.pread(self.fd, size + 1, 0)
        except OSError:  # EIO: read by offset later, where the error aborts the response
            return None
        if len(data) != size:  # changed as we read: read by offset this time, cache next time
            return None
        self.small = (key, data)  # one assignment: a reader sees the old pair or the new one
        return data

    def retain(self) -> None:
        """One more user: the descriptor stays open until it calls :meth:`release`, even once
        the entry leaves the cache (the server's remembered answers hold their files so)."""
        with self._cache._lock:
            self.refs += 1

    def valid(self) -> bool:
        """Whether the cache still trusts its path for this descriptor (in it, within validity)."""
        return not self.dropped and self._cache._clock() < self.expires

    def holds(self, version: tuple[int, int, int, int, int]) -> bool:
        """Whether the path still names this descriptor (the entry is in the cache and within its
        validity) and the file is still ``version``, ``(inode, device, size, mtime_ns,
        ctime_ns)`` by an ``fstat`` now, and linked: what :meth:`FileCache.acquire` would find,
        without taking a new reference (the caller holds one)."""
        if not self.valid():
            return False
        try:
            st = os.fstat(self.fd)
        except OSError:
            return False
        return st.st_nlink > 0 and (st.st_ino, st.st_dev, st.st_size, st.st_mtime_ns, st.st_ctime_ns) == version

    def release(self) -> None:
        """One user is done; the last one closes a descriptor that left the cache."""
        with self._cache._lock:
            self.refs -= 1
            last = self.refs == 0 and self.dropped and self.fd >= 0
        if last:
            os.close(self.fd)


class FileCache:
    """Requested path -> :class:`CachedDescriptor`, at most ``size`` of them, trusted ``valid`` seconds."""

    def __init__(self, size: int = 1024, valid: float = 1.0, clock: Callable[[], float] = time.monotonic) -> None:
        if size < 1 or valid < 0:
            raise ValueError("a file cache needs a size of at least 1 and a validity of 0 s or more")
        self.size = size
        self.valid = valid
        self._clock = clock
        self._entries: OrderedDict[str, CachedDescriptor] = OrderedDict()
        self._lock = threading.Lock()

    def __len__(self) -> int:
        return len(self._entries)

    def acquire(self, requested: str) -> tuple[CachedDescriptor, os.stat_result] | None:
        """The cached descriptor for ``requested`` with one more user, and its ``fstat`` now; or
        None: not cached, stale, or no longer linked. The key is the path exactly as requested:
        it passed the store's checks when the entry was made, and they depend on nothing else."""
        lock = self._lock
        with lock:
            entry = self._entries.get(requested)
            if entry is None:
                return None
            if self._clock() >= entry.expires:
                self._drop(requested, entry)
                return None
            entry.refs += 1
            self._entries.move_to_end(requested)
        try:
            st = os.fstat(entry.fd)
        except OSError:
            st = None
        if st is None or (st.st_dev, st.st_ino) != entry.identity:
            # Someone closed our descriptor (a handler's os.close, a file object that owned
            # it) and the number may now be another file's: forget it, never serve or close it.
            log.warning("a cached file descriptor was closed by someone else: %s", requested)
            with lock:
                entry.fd = -1  # not ours any more: never to be closed by us
                if self._entries.get(requested) is entry:
                    self._drop(requested, entry)
                entry.refs -= 1
            return None
        if st.st_nlink == 0:  # deleted, or renamed over: resolve the path again
            with lock:
                if self._entries.get(requested) is entry:
                    self._drop(requested, entry)
            entry.release()
            return None
        return entry, st

    def add(self, requested: str, fd: int, identity: tuple[int, int], name: str, content_type: str) -> CachedDescriptor:
        """Cache the descriptor just opened for ``requested``; the caller holds one reference."""
        entry = CachedDescriptor(self, fd, identity, name, content_type, self._clock() + self.valid)
        with self._lock:
            old = self._entries.pop(requested, None)
            if old is not None:  # another thread resolved the same path meanwhile
                self._drop(requested, old, popped=True)
            self._entries[requested] = entry
            while len(self._entries) > self.size:
                key, oldest = self._entries.popitem(last=False)
                self._drop(key, oldest, popped=True)
        return entry

    def prune(self) -> None:
        """Forget the entries past their validity, so that a file deleted or replaced and never
        asked for again is not held open (and its disk space kept) for long: the server calls
        this once a second. An entry still in use closes when its last user is done."""
        now = self._clock()
        with self._lock:
            stale = [(key, entry) for key, entry in self._entries.items() if now >= entry.expires]
            for key, entry in stale:
                self._drop(key, entry)

    def clear(self) -> None:
        """Forget every entry; descriptors still in use close when their last user is done."""
        with self._lock:
            while self._entries:
                key, entry = self._entries.popitem(last=False)
                self._drop(key, entry, popped=True)

    def _drop(self, key: str, entry: CachedDescriptor, *, popped: bool = False) -> None:
        # Called with the lock held.
        if not popped:
            del self._entries[key]
        entry.dropped = True
        if entry.refs == 0 and entry.fd >= 0:
            os.close(entry.fd)
