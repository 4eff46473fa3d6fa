"""ObjectFile: one object as its source opened it, the :class:`~axon.storage.File` of
:class:`~.objects.ObjectSource`."""

from __future__ import annotations

import hashlib
from typing import TYPE_CHECKING

from ..http.segments import FileSlice, ObjectSlice, Segment
from . import Source

if TYPE_CHECKING:
    from .object_disk import Held


def identity_of(etag: str | None, size: int, mtime_ns: int) -> int:
    """A version's identity for ETags and batch identities: the store's ETag, hashed, in place of
    an inode (a replaced object is another one, as a replaced file is)."""
    version = (etag or f"{mtime_ns}-{size}").encode()
    return int.from_bytes(hashlib.blake2b(version, digest_size=8).digest(), "big") >> 1


class ObjectFile:
    """One object as a HEAD found it: the facts a :class:`~axon.storage.File` has. It holds no
    resource (its bytes are fetched when sent), so ``close()`` has nothing to give back."""

    __slots__ = ("source", "key", "etag", "path", "name", "size", "mtime_ns", "ctime_ns", "inode", "device",
                 "content_type", "data", "head")

    #: An object may change in the store unseen: no version a server could check without asking.
    version = None
    #: No batch signature kept per version: the planner builds one from the facts.
    signature = None
    #: The disk tier's fill it is read behind while it fills (:class:`~.object_fill.FillingFile`).
    fill = None

    def __init__(self, source: Source, key: str, etag: str | None, path: str, name: str, size: int,
                 mtime_ns: int, content_type: str, data: bytes | None = None, head: bytes | None = None,
                 inode: int | None = None) -> None:
        self.source = source
        self.key = key  # as the store names it (relative to the source's prefix)
        self.etag = etag  # the store's, quoted; None where the store gives none
        self.path = path
        self.name = name
        self.size = size
        self.mtime_ns = self.ctime_ns = mtime_ns
        self.inode = identity_of(etag, size, mtime_ns) if inode is None else inode
        self.device = 0
        self.content_type = content_type
        self.data = data  # the whole object, when opening fetched it (a small one)
        self.head = head  # else its first bytes, as opening fetched them (None if not kept)

    def __repr__(self) -> str:
        return f"ObjectFile(key={self.key!r}, etag={self.etag!r}, size={self.size})"

    def segment(self, start: int, stop: int) -> Segment:
        """From memory when opening brought the object whole, else a slice to fetch."""
        if self.data is not None:
            return self.data if start == 0 and stop == self.size else self.data[start:stop]
        return ObjectSlice(self, start, stop - start)

    def close(self) -> None:
        pass


class TierFile(ObjectFile):
    """An object whose version is whole on the node's disk (:mod:`.object_disk`): the object's
    facts, and a descriptor of its file (``held``: its own, or the tier's open-file cache's),
    sent as a local file is (its segments are :class:`~axon.http.segments.FileSlice` s, read by
    offset; a small file's bytes when the open-file cache keeps them). Whoever holds it closes it."""

    __slots__ = ("fd", "_held")

    def __init__(self, f: ObjectFile, held: Held) -> None:
        super().__init__(f.source, f.key, f.etag, f.path, f.name, f.size, f.mtime_ns, f.content_type, held.data)
        self.fd = held.fd
        self._held: Held | None = held

    @classmethod
    def of(cls, held: Held, *facts: object, inode: int | None = None) -> TierFile:
        """A kept object from its facts (:class:`ObjectFile`'s arguments) and its file: one
        record, where ``TierFile(ObjectFile(...), held)`` makes two."""
        made = cls.__new__(cls)
        ObjectFile.__init__(made, *facts, held.data, None, inode)  # type: ignore[arg-type]
        made.fd, made._held = held.fd, held
        return made

    def __repr__(self) -> str:
        return f"TierFile(key={self.key!r}, etag={self.etag!r}, size={self.size}, fd={self.fd})"

    def segment(self, start: int, stop: int) -> Segment:
        if self.data is not None:
            return super().segment(start, stop)
        return FileSlice(self.fd, start, stop - start)

    def close(self) -> None:
        held, self._held, self.fd = self._held, None, -1
        if held is not None:
            held.close()
