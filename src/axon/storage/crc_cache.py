"""CRC-32 of file versions, computed once and kept in memory: what a zip entry must declare.

A zip's local header carries its entry's CRC-32 before the entry's bytes, so a zip framed up
front (exact ``Content-Length``, ``Range``, bodies sent by ``sendfile``) needs every CRC before
the first byte. Reading a file for it costs what sending it costs; this cache makes that a
once-per-version cost.

A version is named by ``(device, inode, size, mtime_ns, ctime_ns)``: a file replaced is another
inode, a file written in place moves its ctime (even when its size stays and its mtime is put
back with ``utime``), so a changed file is a new key and never finds an old CRC. As with the
open-file cache (:data:`~axon.storage.file_cache.SETTLED_NS`), a CRC is kept only once the file's
last change is ``settled_ns`` old: two writes within one tick of the filesystem's clock can leave
the key as it was, and a CRC read between them must not outlive this one response.

A write through a shared ``mmap`` may change neither the size nor a time, so a version's CRC can
outlive its bytes. Bytes the open-file cache keeps carry their own CRC-32 and never ask here
(:meth:`~axon.storage.local.FileStore.crc32s`); a small file's (up to ``SMALL_FILE``) CRC kept
here is read again once it is ``valid`` seconds old (the open-file cache's revalidation window),
so its zip entries are right again within that window, as its bytes are. A larger file's CRC
stands for its version (the README says to ``touch`` such a file).

After reading, the descriptor is ``fstat`` ed again: if the file changed while it was read (or
since it was opened, which is what the response's length was planned from), the CRC describes no
version the response could send, and :class:`FileChanged` is raised for the planner to open the
batch again. Kept in memory only, per process (a worker computes its own): a CRC persisted
beside the file, or in extended attributes, would have to be trusted across restarts and
writers this process never saw.
"""

from __future__ import annotations

import os
import threading
import time
import zlib
from collections import OrderedDict, deque
from typing import NamedTuple

from ..errors import FileChanged
from . import FILE_CACHE_VALID
from .file_cache import SETTLED_NS, SMALL_FILE


class Version(NamedTuple):
    """The facts that name one version of a file on this host, in the one order storage keeps
    them (the open-file cache's identity and key, an ``OpenFile``'s version token)."""

    device: int
    inode: int
    size: int
    mtime_ns: int
    ctime_ns: int


#: Bytes read per pread: large enough that the loop costs nothing beside the checksum.
CHUNK = 1 << 20


class CrcCache:
    """A bounded LRU of CRC-32 by file version. Thread-safe: blocking handlers run in a pool;
    two threads missing the same version both read it (no lock is held while reading). A hit
    takes no lock: ``OrderedDict``'s lookup and ``move_to_end`` are each one C call, atomic
    under the GIL, and the lock orders only the writers (a zip of 32 known files asks 32 times)."""

    def __init__(
        self, size: int = 65536, settled_ns: int = SETTLED_NS, clock=time.time_ns, valid: float = FILE_CACHE_VALID,
        monotonic=time.monotonic,
    ) -> None:
        self.size = size
        self.settled_ns = settled_ns
        self.valid = valid
        self._clock = clock
        self._monotonic = monotonic
        self._entries: OrderedDict[Version, int] = OrderedDict()
        #: When each small file's CRC was read (``monotonic``): read again once ``valid`` old.
        self._read_at: dict[Version, float] = {}
        self._lock = threading.Lock()

    def known(self, version: Version) -> int | None:
        return self.lookup([version])[0]

    def lookup(self, versions: list[Version]) -> list[int | None]:
        """The CRC-32 of each version, None where not known: the hot path of a zip whose files
        are all known, one C loop for the lookups and one for the LRU's order."""
        entries = self._entries
        crcs = list(map(entries.get, versions))
        read_at = self._read_at
        if read_at:
            oldest = self._monotonic() - self.valid
            for i, when in enumerate(map(read_at.get, versions)):
                if when is not None and when <= oldest:
                    crcs[i] = None  # a small file's, due to be read again (see the module's text)
        try:
            if None not in crcs:
                deque(map(entries.move_to_end, versions), 0)
            else:
                for version, crc in zip(versions, crcs):
                    if crc is not None:
                        entries.move_to_end(version)
        except KeyError:  # one was evicted by another thread meanwhile: its CRC is still right
            pass
        return crcs

    def crc32(self, fd: int, version: Version, data: bytes | None = None, read: bool = True) -> int | None:
        """The CRC-32 of the open file ``fd`` as ``version`` (from the ``fstat`` it was opened
        under); ``data``, when given, is its whole content already in memory. With ``read``
        false, None where the answer would mean reading the file (neither known nor in memory)."""
        crc = self.known(version)
        if crc is not None:
            return crc
        if data is None and not read:
            return None
        crc = zlib.crc32(data) if data is not None else read_crc32(fd, version.size)
        if fd >= 0:  # no descriptor: bytes the open-file cache trusts as ``version`` (it watches the file)
            st = os.fstat(fd)
            if (st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns) != version:
                raise FileChanged(fd)
        if self._clock() - version.ctime_ns >= self.settled_ns:
            with self._lock:
                self._entries[version] = crc
                self._entries.move_to_end(version)
                if version.size <= SMALL_FILE:
                    self._read_at[version] = self._monotonic()
                while len(self._entries) > self.size:
                    self._read_at.pop(self._entries.popitem(last=False)[0], None)
        return crc

    def clear(self) -> None:
        with self._lock:
            self._entries.clear()
            self._read_at.clear()


def read_crc32(fd: int, size: int) -> int:
    """The CRC-32 of the first ``size`` bytes of ``fd``, read by offset (the descriptor may be
    shared: its position is never used). A file shorter than ``size`` has changed."""
    crc, offset = 0, 0
    while offset < size:
        chunk = os.pread(fd, min(CHUNK, size - offset), offset)
        if not chunk:
            raise FileChanged(fd)
        crc = zlib.crc32(chunk, crc)
        offset += len(chunk)
    return crc
