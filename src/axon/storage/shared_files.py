"""A local source whose open files requests share: :class:`SharedFiles`, around a
:class:`~axon.storage.local.FileStore`.

Axon's own server reads files only by offset (``pread``, ``sendfile``), so its requests may
share descriptors; WSGI's ``file_wrapper`` and ASGI's ``zerocopysend`` hand a descriptor to code
that may move its file position, so they must not. ``axon serve`` therefore builds its App with
one of these as the store (:func:`axon.storage.sources.share_open_files`), and every other
runtime is given the store itself. The cache is each process's own: a worker forked after the
App was built starts an empty one (the kernel's watcher, shared with the parent, would hand
each change to one process only). When a change on disk is seen, and what the cache keeps, is
:mod:`.file_cache`'s to say.
"""

from __future__ import annotations

import os
import time
import weakref
from collections.abc import Callable

from ..errors import HTTPError
from . import Entry
from .checked_dirs import MAX_DIRS, CheckedDirs
from .file_cache import DEFAULT_INACTIVE, DEFAULT_SIZE, DEFAULT_SMALL_BYTES, DEFAULT_VALID, FileCache
from .local import MAX_CACHED_PATH, FileStore, OpenFile, TrustedFile, portable

__all__ = ["SharedFiles"]


class SharedFiles:
    """``store``'s files, each path resolved once and its descriptor shared (at most ``size``
    of them; see :mod:`.file_cache` for ``valid``, ``inactive`` and ``small_bytes``). Every member
    of a :class:`~axon.storage.Source` is here; the store itself is :attr:`store`."""

    # As the store's: a local directory never waits on the network, opens a batch's paths one by
    # one, and sends its segments as they are.
    blocking = False
    for_batch = None
    body_stream = None
    health = None

    def __init__(
        self, store: FileStore, size: int = DEFAULT_SIZE, valid: float = DEFAULT_VALID,
        inactive: float = DEFAULT_INACTIVE, small_bytes: int = DEFAULT_SMALL_BYTES, watch: bool = True,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.store = store
        store.crcs.valid = valid  # a small file's CRC not kept with its bytes is read again on the same window
        self.root = store.root
        self.portable_identity = store.portable_identity
        # The rest of the Source, bound once: a call costs what it costs on the store.
        self.crc32s = store.crc32s
        self.kind: Callable[[str], str] = store.kind
        self.list_dir: Callable[[str, int], tuple[list[Entry], bool]] = store.list_dir
        self.batch_key = store.batch_key
        self._open_here = store.open_here
        # The kernel watches the cached files where it can (inotify, :mod:`.watch`; ``watch`` false:
        # never), so that a hit needs no fstat: sync() takes in its news before each request.
        self._make_cache = lambda: (FileCache.watched if watch else FileCache)(
            size, valid, inactive=inactive, small_bytes=small_bytes, recheck=self.dirs.still_names,
            trusted=TrustedFile, clock=clock,
        )
        self._make_dirs = lambda: CheckedDirs(store, valid, min(size, MAX_DIRS), clock)
        self._closed = False
        self._start()
        # A forked worker starts a cache of its own (see the module's docstring).
        mine = weakref.ref(self)
        os.register_at_fork(after_in_child=lambda: _restart(mine))

    def _start(self) -> None:
        """A new, empty cache and its checked directories, and the members bound to them."""
        #: The directories of the cached files, each resolved once per window (the revalidation).
        self.dirs = self._make_dirs()
        cache = self.cache = self._make_cache()
        #: A request begins: the shared files take in the changes the kernel told of.
        self.sync: Callable[[], None] = cache.sync
        #: ``cached(path)``: a trusted small file, as one :class:`~.local.TrustedFile` per version
        #: that every request shares, nothing held (FileCache.peek); else None.
        self.cached: Callable[[str], TrustedFile | None] = cache.peek
        #: ``cached_all(paths)``: ``cached`` of each (FileCache.peek_all), for a remembered head's files.
        self.cached_all: Callable[[list[str]], list[TrustedFile | None]] = cache.peek_all
        #: The Source's ``ready_files``: what ``open`` gives without opening (a trusted file), in
        #: one call for a batch (plan/batch.py). None for a portable identity, whose files ``open``
        #: makes anew.
        self.ready_files: Callable[[list[str]], list[TrustedFile | None]] | None = (
            None if self.portable_identity else cache.peek_all
        )

    def __repr__(self) -> str:
        return f"SharedFiles({self.store!r}, size={self.cache.size})"

    def __del__(self) -> None:
        cache = getattr(self, "cache", None)  # noqa: B009 - a half-built instance has none
        if cache is not None:
            cache.close()
            self.dirs.close()

    def open(self, requested: str) -> OpenFile:
        """Open ``requested`` (already decoded once) as the store would, from the cache when it
        holds the path (its facts are the file's own, now: see :mod:`.file_cache`). A file the
        cache trusts (its bytes in memory, the kernel watching it) is the one
        :class:`~.local.TrustedFile` of its version, without a descriptor: nothing built, held or
        given back, and nothing read."""
        if not self.portable_identity:  # a portable file's CRC re-checks its descriptor's facts
            trusted = self.cached(requested)
            if trusted is not None:
                return trusted
        if len(requested) > MAX_CACHED_PATH:  # its key would be large: opened alone
            f = self._open_here(requested)
        else:
            cache = self.cache
            found = cache.acquire(requested)
            if found is not None:
                entry, st = found
                kept = entry.content(st)
                if kept is not None and not self.portable_identity:
                    trusted = cache.admit(requested, entry, st)
                    if trusted is not None:  # trusted from this use on: served from its bytes
                        entry.release()
                        return trusted
                f = OpenFile(
                    entry.fd, requested, entry.name, st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns,
                    st.st_ctime_ns, entry.content_type, entry, *(kept[1:] if kept is not None else ()),
                )
            else:
                f = self._open_here(requested)
                f._shared = cache.add(requested, f.fd, (f.device, f.inode), f.name, f.content_type)
        if self.portable_identity:
            portable(f)
        return f

    def prune(self) -> None:
        """Close what has not been used for the idle time, and the directories whose window has
        passed (the server's once-a-second sweep)."""
        self.cache.prune()
        self.dirs.prune()

    def close(self) -> None:
        """Close every descriptor no response holds (the others when their response is done) and
        the kernel's watcher: the server stopped. A later request is served unwatched."""
        self._closed = True
        self.cache.close()
        self.dirs.close()


def _restart(ref: weakref.ref[SharedFiles]) -> None:
    """In a forked child: a cache of its own, unless closed (a stopped server's: it watches
    nothing, and a kernel watcher per fork of a process holding many would be wasted). The
    parent's is abandoned, unclosed: its watches are the kernel's, in an instance both
    processes hold (and ``axon serve`` forks before anything is cached)."""
    shared = ref()
    if shared is not None and not shared._closed:
        shared.cache.abandon()
        shared._start()
