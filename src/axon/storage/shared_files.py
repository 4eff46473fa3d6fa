"""A local source whose open files requests share: :class:`SharedFiles`, around a
:class:`~axon.storage.local.FileStore`.

Axon's own server reads files only by offset (``pread``, ``sendfile``), so its requests may
share descriptors; WSGI's ``file_wrapper`` and ASGI's ``zerocopysend`` hand a descriptor to code
that may move its file position, so they must not. The server therefore wraps the App's store in
one of these while it serves (:func:`axon.storage.sources.share_open_files`) rather than
switching the store itself into sharing: the store stays what every other runtime was given.
When a change on disk is seen, and what the cache keeps, is :mod:`.file_cache`'s to say.
"""

from __future__ import annotations

from .file_cache import DEFAULT_INACTIVE, DEFAULT_SIZE, DEFAULT_SMALL_BYTES, DEFAULT_VALID, FileCache
from .local import MAX_CACHED_PATH, FileStore, OpenFile, TrustedFile, portable

__all__ = ["SharedFiles"]


class SharedFiles:
    """``store``'s files, each path resolved once and its descriptor shared (at most ``size``
    of them; see :mod:`.file_cache` for ``valid``, ``inactive`` and ``small_bytes``). Everything
    but ``open`` is the store's own."""

    # As the store's: a local directory never waits on the network, opens a batch's paths one by
    # one, and sends its segments as they are.
    blocking = False
    for_batch = None
    body_stream = None

    def __init__(
        self, store: FileStore, size: int = DEFAULT_SIZE, valid: float = DEFAULT_VALID,
        inactive: float = DEFAULT_INACTIVE, small_bytes: int = DEFAULT_SMALL_BYTES, watch: bool = True,
    ) -> None:
        self.store = store
        self.users = 1  # the workers serving through it (share_open_files counts them)
        # The kernel watches the cached files where it can (inotify, :mod:`.watch`; ``watch`` false:
        # never), so that a hit needs no fstat: sync() takes in its news before each request.
        make = FileCache.watched if watch else FileCache
        self.cache = make(size, valid, inactive=inactive, small_bytes=small_bytes, recheck=store._names, trusted=TrustedFile)
        store.crcs.valid = valid  # a small file's CRC not kept with its bytes is read again on the same window
        self.sync = self.cache.sync
        #: ``cached(path)``: a trusted small file, as one :class:`~.local.TrustedFile` per version
        #: that every request shares, nothing held (FileCache.peek); else None.
        self.cached = self.cache.peek
        #: ``cached_all(paths)``: ``cached`` of each (FileCache.peek_all), for a remembered head's files.
        self.cached_all = self.cache.peek_all
        #: ``ready_files(paths)``: for each, what ``open`` gives without opening (a trusted file), in
        #: one call for a batch (plan/batch.py); None: open it. Not for a portable identity,
        #: whose files ``open`` makes anew.
        self.ready_files = None if store.portable_identity else self.cache.peek_all
        self.root = store.root
        self.portable_identity = store.portable_identity
        # The rest of the Source, bound once: a call costs what it costs on the store.
        self._open = store._open
        self.crc32s = store.crc32s
        self.kind = store.kind
        self.list_dir = store.list_dir
        self.batch_key = store.batch_key

    def __getattr__(self, name: str):  # noqa: ANN204 - whatever the store has
        # The store's other members (crcs, content_type, allow_hidden, ...), for handlers that
        # reach app.store: called only for what this class does not define, so open costs nothing.
        if name == "store":  # not set yet (a half-built instance): no recursion
            raise AttributeError(name)
        return getattr(self.store, name)

    def __repr__(self) -> str:
        return f"SharedFiles({self.store!r}, size={self.cache.size})"

    def __del__(self) -> None:
        cache = getattr(self, "cache", None)
        if cache is not None:
            cache.close()

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
            f = self._open(requested)
        else:
            cache = self.cache
            found = cache.acquire(requested)
            if found is not None:
                entry, st = found
                kept = entry.content(st)
                f = OpenFile(
                    entry.fd, requested, entry.name, st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns,
                    st.st_ctime_ns, entry.content_type, entry, *(kept[1:] if kept is not None else ()),
                )
            else:
                f = self._open(requested)
                f._shared = cache.add(requested, f.fd, (f.device, f.inode), f.name, f.content_type)
        if self.portable_identity:
            portable(f)
        return f

    def prune(self) -> None:
        """Close what has not been used for the idle time (the server's once-a-second sweep)."""
        self.cache.prune()

    def release(self) -> bool:
        """One worker is done with it; True for the last one, which then closes it."""
        self.users -= 1
        return self.users == 0

    def close(self) -> None:
        """Close every descriptor no response holds (the others when their response is done),
        and the kernel's watcher."""
        self.cache.close()
