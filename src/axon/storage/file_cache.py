"""An open-file cache for :class:`~axon.storage.local.FileStore`: resolve a path once, share its descriptor.

nginx's ``open_file_cache`` is the model (``max``, ``inactive``, ``valid``), with one difference:
the size, times and identity a response declares are always the file's own, now. Each use
``fstat``s the cached descriptor, unless the kernel watches the file for the cache
(:mod:`axon.storage.watch`, inotify): then the stat of the last use stands until the kernel tells
of a change, which :meth:`FileCache.sync` takes in before each request (one system call a request,
instead of one a file). Only the path-to-file resolution is trusted, and only for ``valid``
seconds at a time.

* **Bound.** At most ``size`` descriptors; past that the least recently used entry goes.
* **Idle time.** An entry unused for ``inactive`` seconds is closed by :meth:`FileCache.prune`
  (the server's once-a-second sweep), so a pool larger than what is touched each second is not
  opened and closed on every request, and an idle worker does not hold files open for long.
* **Revalidation.** Once ``valid`` seconds have passed since the path was last checked, the next
  use resolves it again by the store's rules (``recheck``): the same file (device, inode), and
  the entry keeps its descriptor for another ``valid`` seconds from the time ``recheck`` says
  the path was known to name it (:mod:`.checked_dirs` resolves a directory once per window);
  anything else and the path is opened anew, or refused, as any request's would be.
  The server's sweep does that check ahead of time for the entries in use (:meth:`FileCache.refresh`), so that a request rarely finds a window past.

When a change on disk is seen:

* a file written, truncated, appended to or touched in place: at once (the ``fstat`` of every use,
  or the kernel's event taken in by the next request's ``sync``);
* a file deleted, or replaced by a rename over it (the usual atomic deploy): at once. The cached
  inode has no name left (``st_nlink`` 0), so the path is resolved again;
* anything else that changes which file a path names (a symlink or directory re-pointed, a file
  replaced while another hard link keeps the old one alive): within ``valid`` seconds;
* what inotify cannot see (writes through a shared ``mmap``, another host's on a network file
  system): within ``valid`` seconds too, when the revalidation ``fstat``s the file again. A write
  through a shared ``mmap`` may change neither the size nor a time, so the revalidation also
  reads a small file's kept bytes again and compares them (:meth:`FileCache._revalidate`, the
  one rule of what a revalidation checks): a watched entry is revalidated on the same window.

Only an entry whose bytes are in memory goes without its ``fstat`` (it is served from those
bytes, so nothing is read from a descriptor someone else might have closed), and from the use
that keeps them, its second (:meth:`FileCache.admit`): the watch is added then, and the stat
trusted is an ``fstat`` taken after it, so no change falls between them. A file used once costs
no watch and no copy of its bytes: a pool larger than the cache, each file asked once in a while
(a data loader's epochs), pays nothing for what it would never use. Watches are at most one an
entry (the cache's ``size``) and leave with it; the inotify instance is one descriptor for the
whole cache.

A small file (up to ``SMALL_FILE``) keeps its bytes in the entry too, read once its last change
is ``SETTLED_NS`` old and served while the ``fstat`` of each use still shows the size, mtime and
ctime they were read under (and a revalidation finds them the file's), as long as all the
entries' bytes together stay within ``small_bytes``: a batch of small files is then framed from
memory, with no read. Kept bytes carry their CRC-32, computed once when they are read: a zip
entry framed from them declares exactly their checksum, and their version token (:data:`Token`)
is their stat and that CRC-32, so bytes that changed under the same stat are a new version, and
nothing made from the old ones (a trusted file, a remembered head) is taken for them.

Descriptors are shared by reference count: an entry evicted or gone stale while responses still
read it is closed when the last of them is done. Shared descriptors must be read with explicit
offsets only (``pread``, ``sendfile``), never through the file position, which is why only Axon's
own server turns the cache on: WSGI's ``file_wrapper`` and ASGI's ``zerocopysend`` hand the
descriptor to code that may use it. Thread-safe: blocking handlers open files from the App's
thread pool.

Why one module of some 610 lines, past the guide of 450: the entries, their revalidation and
the byte budget share one lock and one set of freshness rules, and a third of the length is
this statement of those rules.
"""

from __future__ import annotations

import logging
import os
import threading
import time
import zlib
from collections import OrderedDict
from collections.abc import Callable, Iterable
from typing import Any, NamedTuple

from ..untracked import untracked
from . import FILE_CACHE_BYTES, FILE_CACHE_INACTIVE, FILE_CACHE_SIZE, FILE_CACHE_VALID
from .watch import Events, Watcher, open_watcher

log = logging.getLogger("axon")


#: Files up to this size may keep their bytes in the cache as well, so that a hit needs no read
#: (one write_chunk: a file of it is then one writev, where from its descriptor it takes an
#: fstat, a sendmsg and a sendfile; docs/design-notes.md).
SMALL_FILE = 64 * 1024
#: ... once their last change is this old. Two writes within one tick of the filesystem's clock
#: can leave the size, mtime and ctime as they were (git calls such an entry "racily clean"):
#: bytes read from a file that settled this long are the bytes of every later request with the
#: same stat, since any later write moves the ctime past them.
SETTLED_NS = 2_000_000_000
DEFAULT_SIZE, DEFAULT_INACTIVE = FILE_CACHE_SIZE, FILE_CACHE_INACTIVE
DEFAULT_VALID, DEFAULT_SMALL_BYTES = FILE_CACHE_VALID, FILE_CACHE_BYTES
#: A trusted hit (:meth:`FileCache.peek`) moves its entry to the recent end of the LRU order only
#: if its last move is this old: the order (and ``used``) is kept to this much, while a file hit
#: thousands of times a second takes the lock once a second instead of on every hit.
REORDER_SECONDS = 1.0
#: Keys :meth:`FileCache.refresh` looks at in one call (one loop turn of the server's sweep).
SCAN_SLICE = 1024

#: The version token of kept bytes: (device, inode, size, mtime, ctime) as they were read under,
#: and their CRC-32.
Token = tuple[int, int, int, int, int, int]
#: Kept bytes: the (size, mtime, ctime) they were read under, the bytes, their CRC-32.
Kept = tuple[tuple[int, int, int], bytes, int]

#: What a trusted entry gives (:meth:`FileCache.peek`), made once per file version from the
#: requested path, the version token (:data:`Token`), the bytes, the normalised name and the
#: content type, and carrying that token as its ``version``: the open-file sharing makes it a
#: ready file (:class:`~.local.TrustedFile`), so a request that opens it builds nothing.
Trusted = Callable[[str, Token, bytes, str, str], Any]
#: A revalidation's check of an entry's path, at the cache's time ``now``: as of when the path is
#: known to name the entry's file (at most ``now``), or None if it no longer does. ``ahead``: a
#: check ahead of time (:meth:`FileCache.refresh`), which must leave the path known for at least
#: ``valid - ahead`` seconds more (a directory resolved that long ago is resolved anew).
Recheck = Callable[["CachedDescriptor", float, float], "float | None"]


class Facts(NamedTuple):
    """A trusted entry's facts (a cache used without ``trusted``)."""

    version: Token
    data: bytes
    name: str
    content_type: str


def _facts(requested: str, version: Token, data: bytes, name: str, content_type: str) -> Facts:
    return Facts(version, data, name, content_type)


class CachedDescriptor:
    """One cached open file: its descriptor, how many ``OpenFile`` views still use it, and for a
    small file its bytes with the stat they were read under."""

    __slots__ = ("fd", "identity", "name", "content_type", "checked", "used", "refs", "dropped", "small", "_cache", "wd", "fresh", "known", "made")

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
        self.small: Kept | None = None
        self._cache = cache
        self.wd = 0  # the kernel's watch on the file: 0 none yet, -1 none to be had
        #: The stat of the last use while the kernel watches the file and told of no change since:
        #: what the next use declares without an ``fstat`` (None: ``fstat`` it).
        self.fresh: os.stat_result | None = None
        #: While ``fresh`` stands, what :meth:`FileCache.peek` gives (the cache's ``trusted`` made
        #: it once for this version), set and cleared in one assignment so that a reader without
        #: the lock sees all of it or none.
        self.known: Any = None
        #: What ``known`` was last (its ``version`` the one it was made for): trusted again (after a
        #: revalidation, or a change undone) at the same version, the entry gives the same object.
        #: The object itself, not a pair with its version: every tracked object an entry holds is
        #: one more that each collection of the old generation walks (docs/design-notes.md).
        self.made: Any = None

    def content(self, st: os.stat_result) -> Kept | None:
        """The file's bytes with their CRC-32 if it is small and settled, as of ``st`` (an
        ``fstat`` just taken), and the cache's byte budget allows; else None, and the caller reads
        it at its own offsets."""
        size = st.st_size
        if size > SMALL_FILE:
            return None
        key = (size, st.st_mtime_ns, st.st_ctime_ns)
        small = self.small
        if small is not None and small[0] == key:
            return small
        cache = self._cache
        if time.time_ns() - st.st_ctime_ns < SETTLED_NS and not cache._immutable:  # (a name is one version)
            return None
        if cache.small_total + size > cache.small_bytes:
            return None
        return self._keep(key, small)

    def reread(self, st: os.stat_result) -> None:
        """Read kept bytes again (a revalidation): a write through a shared ``mmap`` changes
        neither the size nor a time, so only the bytes themselves tell. Changed, they are kept
        anew with their CRC-32 (a new version token); unreadable, or changing as they are read,
        they are dropped, and the file is read by offset until it settles."""
        small = self.small
        if small is None or small[0] != (st.st_size, st.st_mtime_ns, st.st_ctime_ns):
            return  # nothing kept for this stat: the next use reads it if it may
        try:
            data = os.pread(self.fd, st.st_size + 1, 0)
        except OSError:
            data = b""
        if data != small[1] and self._keep(small[0], small, data) is None:
            with self._cache._lock:
                if self.small is small:
                    self._cache.small_total -= len(small[1])
                    self.small = self.made = None

    def _keep(self, key: tuple[int, int, int], old: Kept | None, data: bytes | None = None) -> Kept | None:
        """Keep the file's bytes as of ``key`` (its size and times now), ``data`` if just read
        (else read now), in place of ``old``; None if they cannot be read whole."""
        size = key[0]
        if data is None:
            try:
                data = os.pread(self.fd, size + 1, 0)
            except OSError:  # EIO: read by offset later, where the error aborts the response
                return None
        if len(data) != size:  # changed as we read: read by offset this time, cache next time
            return None
        kept = untracked((key, data, zlib.crc32(data)))  # kept while the entry is: axon.untracked
        cache = self._cache
        with cache._lock:
            if self.dropped or self.small is not old:  # evicted, or kept anew by another thread meanwhile
                return kept
            cache.small_total += size - (len(old[1]) if old is not None else 0)
            self.small = kept  # one assignment: a reader sees the old bytes or the new ones
            self.made = None  # made from the old bytes
        return kept

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

    REORDER = REORDER_SECONDS  # for the compiled answer (below)
    # Slots: the compiled answer reads several of these on every request, and reads a slot at
    # its place (axon/server/_simplehead.c, ``get``) where an instance dict costs a lookup.
    __slots__ = (
        "size", "valid", "inactive", "small_bytes", "small_total", "_recheck", "_trusted", "clock", "entries", "_lock",
        "watcher", "_watched", "_syncs", "begun", "taken", "_taking", "_watch_limit", "_immutable", "_walked", "__weakref__",
    )

    def __init__(
        self, size: int = DEFAULT_SIZE, valid: float = DEFAULT_VALID, *, inactive: float = DEFAULT_INACTIVE,
        small_bytes: int = DEFAULT_SMALL_BYTES, recheck: Recheck | None = None,
        clock: Callable[[], float] = time.monotonic, watcher: Watcher | None = None, trusted: Trusted | None = None,
        immutable: bool = False, walked: bool = False,
    ) -> None:
        if size < 1 or valid < 0 or inactive < 0 or small_bytes < 0:
            raise ValueError("a file cache needs a size of at least 1, and no negative time or byte budget")
        self.size = size
        self.valid = valid
        self.inactive = inactive
        self.small_bytes = small_bytes
        #: Bytes the entries' small files hold now (at most ``small_bytes``).
        self.small_total = 0
        self._recheck = recheck if recheck is not None else (lambda entry, now, ahead: None)
        self._trusted = trusted or _facts
        # Public, with ``begun``, ``taken``, ``valid``, ``REORDER`` and ``move_up``: the native
        # server's compiled answer reads them (axon/server/_simplehead.c) to find what peek_all
        # would find, and answers only when no take-in is owed and the watcher's queue is empty.
        self.clock = clock
        self.entries: OrderedDict[str, CachedDescriptor] = OrderedDict()  # least recently used first
        self._lock = threading.Lock()
        self.watcher = watcher
        # watch -> the entry of its inode, or a tuple of them when several paths name it: the entry
        # itself in the usual case, not a list of one, which each collection would walk too.
        self._watched: dict[int, CachedDescriptor | tuple[CachedDescriptor, ...]] = {}
        self._syncs = 0  # how many times events were taken in: a stat older than one is not trusted
        # Requests begun (sync) and requests whose events were taken in: while they differ, a use
        # takes the events in first. Counts, not a flag, so that a request that begins while a
        # take-in runs is not marked done by it.
        self.begun = self.taken = 0
        self._taking = threading.Lock()  # one take-in at a time; the others wait for it
        self._watch_limit = size if watcher is None else min(size, watcher.budget)
        #: Files that never change under their name (the objects' disk tier names a file by its
        #: version): a use trusts the last ``fstat`` until the path's window ends, as it trusts a
        #: watched file's, since only a deletion could change what it says (see :meth:`acquire`).
        self._immutable = immutable
        #: Whether the cycle collector walks the entries. Each entry names this cache, and the
        #: cache's tables name it: a cycle, which is freed without the collector only while what
        #: ``trusted`` makes names nothing that leads back here (a local file's version: then its
        #: entry is kept out of the collector's walk, axon.untracked, and the cache is let go by
        #: close or abandon). True where it may (the disk tier's kept versions name what a source
        #: sent of them, and the source names its tier and this cache).
        self._walked = walked

    @classmethod
    def watched(cls, *args, **kwargs) -> FileCache:  # noqa: ANN002, ANN003 - FileCache's own
        """A cache whose files the kernel watches (:mod:`axon.storage.watch`) where it can."""
        return cls(*args, watcher=open_watcher(), **kwargs)

    @property
    def watched_by_kernel(self) -> bool:
        """Whether the kernel tells this cache of changes (inotify): then a hit whose bytes are in
        memory needs no ``fstat``."""
        return self.watcher is not None

    def __len__(self) -> int:
        return len(self.entries)

    def acquire(self, requested: str, ahead: float = 0.0) -> tuple[CachedDescriptor, os.stat_result] | None:
        """The cached descriptor for ``requested`` with one more user, and its ``fstat`` now; or
        None: not cached, no longer linked, or no longer what the path names. The key is the
        path exactly as requested: it passed the store's checks when the entry was made, and
        they depend on nothing else. ``ahead`` > 0: not a use but :meth:`refresh`'s check, which
        moves nothing in the LRU order and checks a window that ends within ``ahead`` seconds."""
        if self.begun != self.taken:
            self._take_events()
        lock = self._lock
        with lock:
            entry = self.entries.get(requested)
            if entry is None:
                return None
            entry.refs += 1
            now = self.clock()
            if not ahead:
                self.entries.move_to_end(requested)
                entry.used = now
            syncs = self._syncs
        due = now - entry.checked >= self.valid - ahead
        st = entry.fresh
        if st is not None:
            if not due:
                return entry, st
            entry.fresh = entry.known = None  # fstat it again now and then: inotify misses mmap and NFS writes
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
        if st.st_nlink == 0 or (due and not self._revalidate(entry, st, now, ahead)):
            # Deleted, renamed over, or the path names another file now: resolve it again.
            with lock:
                self._forget(requested, entry)
            entry.release()
            return None
        if self._immutable:
            entry.fresh = st  # its bytes stay the version its name says, even once deleted
            if entry.made is not None:
                self._trust(requested, entry, st, syncs)  # trusted before its check: so again, the same object
        elif entry.small is not None and entry.wd >= 0 and self.watcher is not None:
            self._trust(requested, entry, st, syncs)
        return entry, st

    def keys(self) -> list[str]:
        """The entries' keys, in no useful order (a copy: :meth:`refresh` walks it in slices while
        requests move the LRU order; the dictionary's own keys, since a walk of the LRU order
        itself, linked through every entry, took milliseconds for 10,000 of them)."""
        with self._lock:
            return list(dict.keys(self.entries))

    def refresh(self, keys: list[str], start: int, ahead: float, most: int) -> int | None:
        """Check now, as a use would check them (:meth:`acquire`), the entries of ``keys[start:]``
        (:meth:`keys`) used in their window whose window ends within ``ahead`` seconds: at most
        ``most`` of them, and at most ``SCAN_SLICE`` keys looked at. Where to go on, or None once
        done. An entry not used in its window is left to the request that comes for it. The
        server does this in its once-a-second sweep, so that a file in use is never found past
        its window by a request (which would check it then, on the Python path, and send its
        answer late); a file that changed, or that its path no longer names, is forgotten as a
        use would forget it."""
        entries, valid, now = self.entries, self.valid, self.clock()
        checked = 0
        end = min(len(keys), start + SCAN_SLICE)
        for i in range(start, end):
            entry = entries.get(keys[i])
            if entry is None or now - entry.used >= valid or now - entry.checked < valid - ahead:
                continue
            found = self.acquire(keys[i], ahead)
            if found is not None:
                found[0].release()
            checked += 1
            if checked >= most:
                return i + 1 if i + 1 < len(keys) else None
        return end if end < len(keys) else None

    def peek(self, requested: str) -> Any:
        """What ``trusted`` made of ``requested``'s version if its entry is trusted (watched,
        unchanged since its last ``fstat``, its bytes in memory, its path checked within
        ``valid``, or checked again now once that window has passed); else None, and the caller
        opens it. Nothing is held: bytes need no descriptor, so a response sent from them costs
        no reference, no view and no close."""
        if self.begun != self.taken:
            self._take_events()
        entry = self.entries.get(requested)
        if entry is None:
            return None
        known = entry.known  # one read: the whole of it, or None
        if known is None:
            return None
        now = self.clock()
        if now - entry.checked >= self.valid:
            return self._again(requested)
        if now - entry.used >= REORDER_SECONDS:  # most hits of a hot file move nothing (see REORDER_SECONDS)
            self.move_up(((requested, entry),), now)
        return known

    def peek_all(self, paths: list[str]) -> list[Any]:
        """:meth:`peek` of each of ``paths`` (a remembered head's files), in one call: the news
        taken in once, the clock read once."""
        if self.begun != self.taken:
            self._take_events()
        entries, valid, now = self.entries, self.valid, self.clock()
        found: list = []
        moved = None
        for requested in paths:
            entry = entries.get(requested)
            known = None if entry is None else entry.known
            if known is not None:
                if now - entry.checked >= valid:
                    known = self._again(requested)
                elif now - entry.used >= REORDER_SECONDS:
                    moved = [] if moved is None else moved
                    moved.append((requested, entry))
            found.append(known)
        if moved is not None:
            self.move_up(moved, now)
        return found

    def _again(self, requested: str) -> Any:
        """A trusted entry past its window: checked again as any use checks it (:meth:`acquire`:
        its path, its ``fstat``, its bytes), and what it trusts now (the same object if nothing
        changed, so what was made of it still stands), or None."""
        found = self.acquire(requested)
        if found is None:
            return None
        entry = found[0]
        entry.release()
        return entry.known

    def move_up(self, moved: Iterable[tuple[str, CachedDescriptor]], now: float) -> None:
        """Trusted hits of ``now``: their entries go to the recent end of the LRU order."""
        with self._lock:
            for requested, entry in moved:
                if not entry.dropped:
                    self.entries.move_to_end(requested)
                    entry.used = now

    def _trust(self, requested: str, entry: CachedDescriptor, st: os.stat_result, syncs: int) -> None:
        """Let later uses of ``entry`` go without an ``fstat``, if its bytes are in memory as of
        ``st``: watch it at its first such use, trust ``st`` from the next (so that no change can
        fall between the ``fstat`` and the watch)."""
        small = entry.small
        if small is None or small[0] != (st.st_size, st.st_mtime_ns, st.st_ctime_ns):
            return
        if entry.wd == 0 and not self._immutable:  # (a name that is one version needs no watch)
            if not self._watch(entry):
                return
            # Watched from now: a change from here on is an event, one before it shows in this fstat.
            syncs = self._syncs
            try:
                st = os.fstat(entry.fd)
            except OSError:
                return
            if small[0] != (st.st_size, st.st_mtime_ns, st.st_ctime_ns) or st.st_nlink == 0:
                return
        version = (st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns, small[2])
        known = entry.made
        if known is None or known.version != version:  # else the same version: every batch keeps sharing one object
            known = self._trusted(requested, version, small[1], entry.name, entry.content_type)
        with self._lock:
            if entry.dropped or entry.small is not small:  # dropped, or new bytes read meanwhile
                return
            entry.made = known
            if syncs == self._syncs:  # no event taken in since the fstat
                entry.fresh = st
                entry.known = known

    def _watch(self, entry: CachedDescriptor) -> bool:
        """Have the kernel watch ``entry``'s file, if there is room (at most one watch an entry):
        whether this call did (False: no room, the kernel refused, or another thread did first)."""
        room = len(self._watched) < self._watch_limit
        wd = self.watcher.watch(entry.fd) if room else None  # type: ignore[union-attr]
        with self._lock:
            if entry.wd != 0:  # another thread watched it meanwhile: the kernel gave it the same wd
                return False
            if wd is None:
                entry.wd = -1
                return False
            if entry.dropped:
                if wd not in self._watched:  # a wd is the inode's: other entries may hold it
                    self._unwatch(wd)
                return False
            entry.wd = wd
            others = self._watched.get(wd)
            self._watched[wd] = entry if others is None else (*_each(others), entry)
            return True

    def admit(self, requested: str, entry: CachedDescriptor, st: os.stat_result) -> Any:
        """The use that kept ``entry``'s bytes as of ``st`` (an ``fstat`` of this use; the caller
        holds a reference), for a file the kernel does not watch yet: watched now, and trusted from
        this use on (an ``fstat`` after the watch, :meth:`_trust`). What :meth:`peek` gives from now
        (what ``trusted`` made of it), or None: no watcher, no room for a watch, or a change. An
        ``immutable`` cache trusts kept bytes as they are, unwatched: its names never change bytes."""
        if self._immutable:
            if entry.known is None:
                self._trust(requested, entry, st, self._syncs)
            return entry.known
        if self.watcher is None or entry.wd != 0:
            return None
        self._trust(requested, entry, st, self._syncs)  # not watched yet: it watches, then fstats
        return entry.known

    def sync(self) -> None:
        """A request begins: take in what the kernel told of before its first use of the cache
        (so a request that opens no file costs nothing). The server calls this for each request."""
        if self._watched:  # nothing watched, nothing to hear of
            self.begun += 1

    def _take_events(self) -> None:
        """Every event queued now: a changed file is ``fstat``-ed at its next use. A thread that
        finds a take-in under way waits for it, and so never trusts a stat it is about to clear."""
        with self._taking:
            begun = self.begun
            if begun == self.taken:  # taken in by another thread while this one waited
                return
            watcher = self.watcher
            if watcher is not None and watcher.pending():
                self._apply(watcher.read())
            self.taken = begun

    def _apply(self, events: Events) -> None:
        with self._lock:
            self._syncs += 1
            if events.overflowed:
                for entry in self.entries.values():
                    entry.fresh = entry.known = None
            for wd in events.changed:
                for entry in _each(self._watched.get(wd)):
                    entry.fresh = entry.known = None
            for wd in events.removed:  # no events will come for it: fstat its entries from now on
                for entry in _each(self._watched.pop(wd, None)):
                    entry.fresh, entry.known, entry.wd = None, None, -1

    def _revalidate(self, entry: CachedDescriptor, st: os.stat_result, now: float, ahead: float = 0.0) -> bool:
        """What every ``valid`` seconds of use check, watched or not (inotify misses mmap and NFS
        writes): the path still names the file (``recheck``), and bytes kept are still the file's.
        False: resolve the path again. The entry's next window starts when the path was known to
        name the file, which may be before ``now``."""
        since = self._recheck(entry, now, ahead)
        if since is None:
            return False
        entry.reread(st)
        entry.checked = since
        return True

    def add(self, requested: str, fd: int, identity: tuple[int, int], name: str, content_type: str) -> CachedDescriptor:
        """Cache the descriptor just opened for ``requested``; the caller holds one reference."""
        # Out of the collector's walk (unless ``walked``): an entry dies by reference count once it
        # leaves the cache's tables (see ``walked`` and axon.untracked).
        entry = CachedDescriptor(self, fd, identity, name, content_type, self.clock())
        if not self._walked:
            untracked(entry)
        with self._lock:
            old = self.entries.pop(requested, None)
            if old is not None:  # another thread resolved the same path meanwhile
                self._drop(old)
            self.entries[requested] = entry
            while len(self.entries) > self.size:
                self._drop(self.entries.popitem(last=False)[1])
        return entry

    def prune(self) -> None:
        """Close the entries unused for ``inactive`` seconds (the server calls this once a
        second). The least recently used come first, so this stops at the first recent one. An
        entry still in use closes when its last user is done."""
        idle = self.clock() - self.inactive
        entries = self.entries
        with self._lock:
            while entries:
                key = next(iter(entries))
                if entries[key].used > idle:
                    break
                self._drop(entries.pop(key))

    def clear(self) -> None:
        """Forget every entry; descriptors still in use close when their last user is done."""
        with self._lock:
            while self.entries:
                self._drop(self.entries.popitem(last=False)[1])

    def abandon(self) -> None:
        """Let go of every entry, closing and unwatching nothing: a forked child leaving its
        parent's cache (the watches are the kernel's, in an instance both processes hold). The
        entries name this cache, so without this it would never be freed (see ``walked``)."""
        with self._lock:
            self.entries.clear()
            self._watched.clear()

    def close(self) -> None:
        """:meth:`clear`, and close the kernel's watcher (after any take-in under way)."""
        self.clear()
        with self._taking:
            if self.watcher is not None:
                self.watcher.close()
                self.watcher = None

    def _forget(self, key: str, entry: CachedDescriptor) -> None:
        # Called with the lock held: drop ``entry`` if it is still the one cached for ``key``.
        if self.entries.get(key) is entry:
            del self.entries[key]
            self._drop(entry)

    def _drop(self, entry: CachedDescriptor) -> None:
        # Called with the lock held, the entry already out of the table.
        entry.dropped = True
        entry.fresh = entry.known = entry.made = None
        if entry.wd > 0:
            watched = self._watched.get(entry.wd)
            if watched is not None:
                rest = tuple(other for other in _each(watched) if other is not entry)
                if rest:
                    self._watched[entry.wd] = rest[0] if len(rest) == 1 else rest
                else:
                    del self._watched[entry.wd]
                    self._unwatch(entry.wd)
        small = entry.small
        if small is not None:
            self.small_total -= len(small[1])
            entry.small = None
        if entry.refs == 0 and entry.fd >= 0:
            os.close(entry.fd)

    def _unwatch(self, wd: int) -> None:
        if self.watcher is not None:
            self.watcher.unwatch(wd)


def _each(watched: CachedDescriptor | tuple[CachedDescriptor, ...] | None) -> tuple[CachedDescriptor, ...]:
    """The entries of one watch (``FileCache._watched``'s value), as a tuple."""
    return () if watched is None else (watched,) if type(watched) is CachedDescriptor else watched
