"""An open-file cache for :class:`~axon.storage.local.FileStore`: resolve a path once, share its descriptor.

nginx's ``open_file_cache`` is the model (``max``, ``inactive``, ``valid``), with one difference:
every use still ``fstat``s the cached descriptor, so the size, times and identity a response
declares are always the file's own, now. Only the path-to-file resolution is trusted, and only for
``valid`` seconds at a time.

* **Bound.** At most ``size`` descriptors; past that the least recently used entry goes.
* **Idle time.** An entry unused for ``inactive`` seconds is closed by :meth:`FileCache.prune`
  (the server's once-a-second sweep), so a pool larger than what is touched each second is not
  opened and closed on every request, and an idle worker does not hold files open for long.
* **Revalidation.** Once ``valid`` seconds have passed since the path was last checked, the next
  use resolves it again by the store's rules (``recheck``): the same file (device, inode), and
  the entry keeps its descriptor for another ``valid`` seconds; anything else and the path is
  opened anew, or refused, as any request's would be.

When a change on disk is seen:

* a file written, truncated, appended to or touched in place: at once (the ``fstat`` of every use);
* a file deleted, or replaced by a rename over it (the usual atomic deploy): at once. The cached
  inode has no name left (``st_nlink`` 0), so the path is resolved again;
* anything else that changes which file a path names (a symlink or directory re-pointed, a file
  replaced while another hard link keeps the old one alive): within ``valid`` seconds.

A small file (up to ``SMALL_FILE``) keeps its bytes in the entry too, read once its last change
is ``SETTLED_NS`` old and served while the ``fstat`` of each use still shows the size, mtime and
ctime they were read under, as long as all the entries' bytes together stay within
``small_bytes``: a batch of small files is then framed from memory, with no read.

Descriptors are shared by reference count: an entry evicted or gone stale while responses still
read it is closed when the last of them is done. Shared descriptors must be read with explicit
offsets only (``pread``, ``sendfile``), never through the file position, which is why only Axon's
own server turns the cache on: WSGI's ``file_wrapper`` and ASGI's ``zerocopysend`` hand the
descriptor to code that may use it. Thread-safe: blocking handlers open files from the App's
thread pool.
"""

from __future__ import annotations

import logging
import os
import threading
import time
from collections import OrderedDict
from collections.abc import Callable

from . import FILE_CACHE_BYTES, FILE_CACHE_INACTIVE, FILE_CACHE_SIZE, FILE_CACHE_VALID

log = logging.getLogger("axon")


#: Files up to this size may keep their bytes in the cache as well, so that a hit needs no read.
SMALL_FILE = 16 * 1024
#: ... once their last change is this old. Two writes within one tick of the filesystem's clock
#: can leave the size, mtime and ctime as they were (git calls such an entry "racily clean"):
#: bytes read from a file that settled this long are the bytes of every later request with the
#: same stat, since any later write moves the ctime past them.
SETTLED_NS = 2_000_000_000
DEFAULT_SIZE, DEFAULT_INACTIVE = FILE_CACHE_SIZE, FILE_CACHE_INACTIVE
DEFAULT_VALID, DEFAULT_SMALL_BYTES = FILE_CACHE_VALID, FILE_CACHE_BYTES


class CachedDescriptor:
    """One cached open file: its descriptor, how many ``OpenFile`` views still use it, and for a
    small file its bytes with the stat they were read under."""

    __slots__ = ("fd", "identity", "name", "content_type", "checked", "used", "refs", "dropped", "small", "_cache")

    def __init__(self, cache: FileCache, fd: int, identity: tuple[int, int], name: str, content_type: str,
                 now: float) -> None:
        self.fd = fd
        self.identity = identity  # (device, inode): what the descriptor must still name
        self.name = name  # normalised, relative to the root: what a revalidation stats
        self.content_type = content_type
        self.checked = now  # when the path was last found to name this file
        self.used = now
        self.refs = 1
        self.dropped = False
        self.small: tuple[tuple[int, int, int], bytes] | None = None
        self._cache = cache

    def content(self, st: os.stat_result) -> bytes | None:
        """The file's bytes if it is small and settled, as of ``st`` (an ``fstat`` just taken),
        and the cache's byte budget allows; else None, and the caller reads it at its own offsets."""
        size = st.st_size
        if size > SMALL_FILE:
            return None
        key = (size, st.st_mtime_ns, st.st_ctime_ns)
        small = self.small
        if small is not None and small[0] == key:
            return small[1]
        if time.time_ns() - st.st_ctime_ns < SETTLED_NS:
            return None
        cache = self._cache
        if cache.small_total + size > cache.small_bytes:
            return None
        try:
            data = os.pread(self.fd, size + 1, 0)
        except OSError:  # EIO: read by offset later, where the error aborts the response
            return None
        if len(data) != size:  # changed as we read: read by offset this time, cache next time
            return None
        with cache._lock:
            if self.dropped:  # evicted meanwhile: its bytes would never be counted back
                return data
            old = self.small
            cache.small_total += size - (len(old[1]) if old is not None else 0)
            self.small = (key, data)  # one assignment: a reader sees the old pair or the new one
        return data

    def release(self) -> None:
        """One user is done; the last one closes a descriptor that left the cache."""
        with self._cache._lock:
            self.refs -= 1
            last = self.refs == 0 and self.dropped and self.fd >= 0
        if last:
            os.close(self.fd)


class FileCache:
    """Requested path -> :class:`CachedDescriptor`: at most ``size`` of them, each closed once
    unused for ``inactive`` seconds, its path checked again (``recheck``) every ``valid`` seconds."""

    def __init__(
        self, size: int = DEFAULT_SIZE, valid: float = DEFAULT_VALID, *, inactive: float = DEFAULT_INACTIVE,
        small_bytes: int = DEFAULT_SMALL_BYTES, recheck: Callable[[CachedDescriptor], bool] | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        if size < 1 or valid < 0 or inactive < 0 or small_bytes < 0:
            raise ValueError("a file cache needs a size of at least 1, and no negative time or byte budget")
        self.size = size
        self.valid = valid
        self.inactive = inactive
        self.small_bytes = small_bytes
        #: Bytes the entries' small files hold now (at most ``small_bytes``).
        self.small_total = 0
        self._recheck = recheck if recheck is not None else (lambda entry: False)
        self._clock = clock
        self._entries: OrderedDict[str, CachedDescriptor] = OrderedDict()  # least recently used first
        self._lock = threading.Lock()

    def __len__(self) -> int:
        return len(self._entries)

    def acquire(self, requested: str) -> tuple[CachedDescriptor, os.stat_result] | None:
        """The cached descriptor for ``requested`` with one more user, and its ``fstat`` now; or
        None: not cached, no longer linked, or no longer what the path names. The key is the
        path exactly as requested: it passed the store's checks when the entry was made, and
        they depend on nothing else."""
        lock = self._lock
        with lock:
            entry = self._entries.get(requested)
            if entry is None:
                return None
            entry.refs += 1
            self._entries.move_to_end(requested)
            entry.used = now = self._clock()
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
                self._forget(requested, entry)
                entry.refs -= 1
            return None
        if st.st_nlink == 0 or (now - entry.checked >= self.valid and not self._checked(entry, now)):
            # Deleted, renamed over, or the path names another file now: resolve it again.
            with lock:
                self._forget(requested, entry)
            entry.release()
            return None
        return entry, st

    def _checked(self, entry: CachedDescriptor, now: float) -> bool:
        if not self._recheck(entry):
            return False
        entry.checked = now
        return True

    def add(self, requested: str, fd: int, identity: tuple[int, int], name: str, content_type: str) -> CachedDescriptor:
        """Cache the descriptor just opened for ``requested``; the caller holds one reference."""
        entry = CachedDescriptor(self, fd, identity, name, content_type, self._clock())
        with self._lock:
            old = self._entries.pop(requested, None)
            if old is not None:  # another thread resolved the same path meanwhile
                self._drop(old)
            self._entries[requested] = entry
            while len(self._entries) > self.size:
                self._drop(self._entries.popitem(last=False)[1])
        return entry

    def prune(self) -> None:
        """Close the entries unused for ``inactive`` seconds (the server calls this once a
        second). The least recently used come first, so this stops at the first recent one. An
        entry still in use closes when its last user is done."""
        idle = self._clock() - self.inactive
        entries = self._entries
        with self._lock:
            while entries:
                key = next(iter(entries))
                if entries[key].used > idle:
                    break
                self._drop(entries.pop(key))

    def clear(self) -> None:
        """Forget every entry; descriptors still in use close when their last user is done."""
        with self._lock:
            while self._entries:
                self._drop(self._entries.popitem(last=False)[1])

    def _forget(self, key: str, entry: CachedDescriptor) -> None:
        # Called with the lock held: drop ``entry`` if it is still the one cached for ``key``.
        if self._entries.get(key) is entry:
            del self._entries[key]
            self._drop(entry)

    def _drop(self, entry: CachedDescriptor) -> None:
        # Called with the lock held, the entry already out of the table.
        entry.dropped = True
        small = entry.small
        if small is not None:
            self.small_total -= len(small[1])
            entry.small = None
        if entry.refs == 0 and entry.fd >= 0:
            os.close(entry.fd)
