"""Where served files come from: one small interface, and the local root jail behind it.

A :class:`Source` answers "open this requested path" with a :class:`File`: the facts the
planners need (size, times, identity, content type) and the segments the runtimes send, held
until ``close()``. The planners (:mod:`axon.plan`) know only this interface; nothing above this
package opens or stats a served file (the runtimes send the segments they are given).

The first implementation is the local root jail, :class:`~axon.storage.local.FileStore`
(``openat2`` or a portable walk, never outside the root); Axon's own server shares its open
files between requests through :class:`~axon.storage.shared_files.SharedFiles` (the open-file
cache, :mod:`axon.storage.file_cache`). Another source (an object store) is another module here
whose ``open`` returns its own kind of :class:`File`.

Both are :class:`typing.Protocol` s: a source satisfies them by shape, and a call through them
costs what a call on the concrete class costs.
"""

from __future__ import annotations

from typing import Any, Callable, NamedTuple, Optional, Protocol

from ..errors import HTTPError
from ..http.batch_identity import KeptSignature
from ..http.segments import Segment

#: The open-file cache's defaults (:mod:`axon.storage.file_cache`; README, "axon serve"), here so
#: that a runtime configures a source's cache through this interface alone: descriptors, seconds
#: an unused entry stays, seconds a path is trusted between checks, bytes of small files kept.
FILE_CACHE_SIZE = 10_000
FILE_CACHE_INACTIVE = 60.0
FILE_CACHE_VALID = 5.0
#: The bytes: enough for the default count of files of 4 KiB (40 MiB) with room to spare. At 32
#: MiB a working set of 10,000 such files left a fifth of them to be read by offset on every use.
FILE_CACHE_BYTES = 48 * 1024 * 1024


class File(Protocol):
    """One file opened for one response, as it was when opened. Whoever holds it closes it."""

    path: str  # as requested (decoded once): for headers and error messages
    name: str  # normalised, relative to the source's root: the part's file name
    size: int
    mtime_ns: int
    ctime_ns: int  # moves on every write: what mtime alone cannot promise
    # What the file is, beside what it holds: a replaced file is another file. The local store
    # gives the inode and device; another source fills them from its own notion (an object's
    # version), since the ETags and batch identities hash them.
    inode: int
    device: int
    content_type: str
    #: The batch signature storage keeps for this version (a trusted file's: one object that every
    #: batch sending it shares), or None: the planner builds one from the facts above.
    signature: Optional[KeptSignature]

    def segment(self, start: int, stop: int) -> Segment:
        """Bytes ``[start, stop)`` as a body segment the runtimes can send."""
        ...

    @property
    def version(self) -> object:
        """An opaque, hashable token of the file as opened: equal tokens, same bytes and facts
        (a server sends a remembered head again on it). None where a source cannot promise
        that without asking (an object store)."""
        ...

    def close(self) -> None:
        """Give the file back; only the first call does anything."""
        ...


class Source(Protocol):
    """Where the files of one App come from: all the App, the planners and the runtimes ask of
    one. Three members are optional as values, not as attributes (``None`` where a source has no
    use for them), so that the App reads them once and a request pays no call for them."""

    #: What is served, as given (a directory's real path, or a store's URL): named in messages
    #: and, with no secret, in the batch key.
    root: str
    #: Whether opening may wait even on an event loop's thread: the async runtimes then run
    #: Axon's own file endpoints in their thread pool. An object store says False: on a loop's
    #: thread it raises :class:`~axon.errors.WouldBlock` where it would wait for the store, and
    #: the App runs the handler again in its pool.
    blocking: bool
    #: ``for_batch(paths)``: a source for one batch that opens its paths together (an object
    #: store asks for them all at once); None where each path is opened alone.
    for_batch: Callable[[list[str]], Source] | None
    #: ``body_stream(segments, chunk_size)``: a body holding this source's own segments as the
    #: stream the runtimes send (an object store's slices are fetched as they are sent), or None
    #: for a body of bytes only; the attribute is None where every segment is sendable as it is.
    body_stream: Callable[[list[Segment], int], Any] | None
    #: ``health()``: None while the source serves, as far as it last saw; else the error saying
    #: why it cannot (an object store that stopped answering), never asked anew per call. The
    #: attribute is None where only a file can fail, not the source (a directory).
    health: Callable[[], HTTPError | None] | None
    #: ``ready_files(paths)``: for each of ``paths``, the file ``open`` would give when it is ready
    #: without opening (nothing held), else None; a batch's planner takes its files so, in one
    #: call. None where ``open`` makes each file anew (every source but the server's shared files).
    ready_files: Callable[[list[str]], list[File | None]] | None

    def open(self, requested: str) -> File:
        """``requested`` (decoded once) as an open :class:`File`, or an
        :class:`~axon.errors.HTTPError` that says why not (400, 403, 404, 503)."""
        ...

    def crc32s(self, files: list[File], read: bool = True) -> list[int | None]:
        """The CRC-32 of each of ``files`` (ones this source opened) as it was opened, for zip
        entries; :class:`~axon.errors.FileChanged` naming the requested path of one
        that is no longer that version. A source that stores checksums (an object store)
        answers from them. With ``read`` false, None where answering would mean reading that
        file (the caller must not block)."""
        ...

    def kind(self, requested: str) -> str:
        """``"dir"`` or ``"file"``: what ``requested`` names (``""`` is the root); an HTTPError
        for anything else, as serving it would refuse it."""
        ...

    def list_dir(self, requested: str, limit: int) -> tuple[list[Entry], bool]:
        """The entries of the directory ``requested`` (``""`` or ending in ``/``), at most
        ``limit`` of them, and whether there were more; an HTTPError as ``open`` gives one."""
        ...

    def batch_key(self, secret: str | bytes | None) -> bytes:
        """The key that batch identities (ETag and boundary) are keyed with
        (:mod:`.batch_key`): from ``secret`` when there is one, else this source's own."""
        ...


class Entry(NamedTuple):
    """One entry of a directory listing: plain facts, no descriptor (a symlink's are its target's)."""

    name: str  # the name within its directory, never a path
    kind: str  # "file" or "dir"
    size: int  # bytes; 0 for a directory
    mtime_ns: int | None  # None where the source keeps none (an object store's prefix)
