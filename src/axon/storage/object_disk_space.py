"""The bound of the objects' disk tier (:mod:`.object_disk`): bytes on disk, shared by every
process that fills the same directory.

``.usage`` in the directory holds the bytes reserved, read and written under an exclusive
``flock`` of that file, and a count of deletions (read without the lock: a process that keeps
descriptors of kept files drops them when it moves, so that no deleted file is held open for
long). A fill reserves what it will take before its first byte (its size rounded up to a block)
as it makes its temporary file, and corrects that to what the file takes once committed
(``st_blocks * 512``); each change to the directory is made with its count under the lock, so
a scan never sees one without the other.

A fill holds a ``flock`` on its temporary file from the moment it is made: a temporary file
that can be locked is a dead fill's (a killed worker, in whatever PID namespace), deleted by
the next scan; one that cannot is counted as the larger of its reservation and its blocks.

A reservation that does not fit deletes the least recently used objects (by mtime: a hit sets
it) down to :data:`LOW_WATER` of the bound, taken from an index of the objects by last use (a
heap) that each process keeps: built by a scan of the directory at start, it learns of other
processes' fills from ``.journal``, where every commit appends its file's name under the lock,
and checks each candidate's mtime before deleting it (a hit since moves it up). Making room is
then O(deleted · log n), not O(files). When the index cannot free enough (a count grown by a
killed fill's reservation), or the journal has grown to twice its length when last written anew, a full
:meth:`Space.scan` recounts the directory, rebuilds the index and writes the journal anew.
So the directory never holds more than the bound, however many processes fill it.
"""

from __future__ import annotations

import contextlib
import fcntl
import heapq
import os
import secrets
import struct
from typing import Iterator

#: The file that holds the bytes reserved and the count of deletions, under its own flock.
USAGE = ".usage"
#: The names of the objects committed, a line each, appended under the lock of ``.usage``.
JOURNAL = ".journal"
#: Making room deletes down to this share of the bound: the next time is a tenth of it away.
LOW_WATER = 0.9
#: The unit a file's size is reserved in (a filesystem block).
BLOCK = 4096
#: The suffix of a fill under way: ``<name>.<random>.<reserved>.tmp``.
TEMP = ".tmp"
LOCK = ".lock"
#: The journal is written anew (by a full scan) once it is twice as long as when last written anew,
#: and this many lines more.
JOURNAL_SLACK = 10_000
#: A journal line's bytes, about (a name of :meth:`~.object_disk.DiskTier.path_of`).
JOURNAL_LINE = 100

_COUNT = struct.Struct("<Q")


def reserved_for(size: int) -> int:
    """What a file of ``size`` bytes is reserved before it is written: whole blocks."""
    return -(-size // BLOCK) * BLOCK


def disk_bytes(st: os.stat_result) -> int:
    """What a file takes on disk (its blocks), not its length."""
    return st.st_blocks * 512


class Space:
    """The bytes reserved in ``directory``, at most ``bound``."""

    def __init__(self, directory: str, bound: int) -> None:
        self.directory = directory
        self.bound = bound
        self._usage = os.path.join(directory, USAGE)
        self._journal = os.path.join(directory, JOURNAL)
        #: The objects by last use: (mtime when indexed, bytes on disk, path), a heap.
        self._index: list[tuple[float, int, str]] = []
        self._journal_read = (0, 0)  # (inode, offset) of the journal read into the index
        self._journal_base = 0  # its length when written anew: it is long at twice that and more
        #: Objects deleted to make room, by this process (a metric).
        self.evictions = 0

    @contextlib.contextmanager
    def _held(self) -> Iterator[int]:
        fd = os.open(self._usage, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
            yield fd
        finally:
            os.close(fd)  # and the lock with it

    @staticmethod
    def _read(fd: int) -> int:
        data = os.pread(fd, _COUNT.size, 0)
        return _COUNT.unpack(data)[0] if len(data) == _COUNT.size else 0

    @staticmethod
    def _write(fd: int, used: int) -> None:
        os.pwrite(fd, _COUNT.pack(max(0, used)), 0)

    def used(self) -> int:
        """The bytes reserved now."""
        with self._held() as fd:
            return self._read(fd)

    def deletions(self, fd: int) -> int:
        """How many times objects were deleted from the directory so far, by any process (read
        from ``fd``, a descriptor of ``.usage``, without its lock: a number that only grows)."""
        data = os.pread(fd, _COUNT.size, _COUNT.size)
        return _COUNT.unpack(data)[0] if len(data) == _COUNT.size else 0

    def open_usage(self) -> int:
        return os.open(self._usage, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)

    def _deleted(self, fd: int) -> None:
        os.pwrite(fd, _COUNT.pack(self.deletions(fd) + 1), _COUNT.size)

    # Each change to what the directory holds is made with its count under the lock, so that a
    # scan (which recounts under it) never falls between the two and counts it twice or never.

    def reserve(self, amount: int, temp: str) -> int | None:
        """Make the fill's file ``temp`` (a temporary name), counted as ``amount`` bytes and
        locked by its descriptor (which is returned), making room first if they do not fit;
        None when they cannot fit (more than the bound even in an empty directory)."""
        if amount > self.bound:
            return None
        with self._held() as fd:
            used = self._read(fd)
            if used + amount > self.bound:
                used = self._make_room(fd, used, int(self.bound * LOW_WATER) - amount)
                if used + amount > self.bound:
                    self._write(fd, used)
                    return None
            made = os.open(temp, os.O_RDWR | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o644)
            fcntl.flock(made, fcntl.LOCK_EX | fcntl.LOCK_NB)  # a new name: no one else holds it
            self._write(fd, used + amount)
        return made

    def commit(self, temp: str, path: str, reserved: int, taken: int) -> None:
        """Rename the fill ``temp`` to ``path`` (its descriptor still open, so still locked),
        counted as the ``taken`` bytes it holds rather than the ``reserved`` ones; a count past
        the bound makes room at once."""
        with self._held() as fd:
            os.rename(temp, path)
            used = self._read(fd) + taken - reserved
            try:
                long = self._journal_add(path)
            except OSError:  # a full disk: the object is indexed by the next full scan
                long = False
            if long:  # overwritten objects' lines too: written anew, from what is there
                used = self._scan(fd, self.bound)
            elif used > self.bound:
                used = self._make_room(fd, used, int(self.bound * LOW_WATER))
            self._write(fd, used)

    def release(self, paths: list[str], reserved: int | None = None) -> None:
        """Delete ``paths``, giving back what each one deleted here held: ``reserved`` bytes (a
        fill abandoned: what it reserved) or, when None, its blocks (an object's older versions).
        A file already gone was taken off the count by whoever deleted it (a scan deletes a fill's
        file once its lock is let go, and recounts without it)."""
        with self._held() as fd:
            freed = 0
            for path in paths:
                try:
                    taken = disk_bytes(os.lstat(path))
                    os.unlink(path)
                except FileNotFoundError:
                    continue
                if reserved is not None:
                    freed += reserved
                else:
                    freed += taken
                    self._deleted(fd)
            self._write(fd, self._read(fd) - freed)

    def scan(self, target: int | None = None) -> int:
        """Recount the directory, deleting the least recently used objects down to ``target``
        (default: the bound) and the temporary files of dead fills; rebuild the index and the
        journal; the count."""
        with self._held() as fd:
            used = self._scan(fd, self.bound if target is None else target)
            self._write(fd, used)
            return used

    def _make_room(self, fd: int, used: int, target: int) -> int:
        """Delete the least recently used objects until ``used`` is at most ``target``, by the
        index (O(deleted)); by a full scan when the index cannot, or its journal is long."""
        self._catch_up()
        if self._journal_long(self._journal_read[1]):
            return self._scan(fd, target)
        index = self._index
        while used > target and index:
            when, _, path = heapq.heappop(index)
            try:
                st = os.lstat(path)
            except FileNotFoundError:
                continue  # deleted by another process, or an older version dropped
            if st.st_mtime > when:  # used since it was indexed: its place is later
                heapq.heappush(index, (st.st_mtime, disk_bytes(st), path))
                continue
            if _unlink(path):
                used -= disk_bytes(st)
                self.evictions += 1
                self._deleted(fd)
        return used if used <= target else self._scan(fd, target)

    def _journal_add(self, path: str) -> bool:
        """Append the object committed at ``path`` to the journal; index it at once if nothing
        was appended since this process last read it. Whether the journal is now long."""
        line = os.path.relpath(path, self.directory).encode() + b"\n"
        with open(self._journal, "ab") as journal:
            journal.write(line)
            end = journal.tell()
            inode = os.fstat(journal.fileno()).st_ino
        if self._journal_read == (inode, end - len(line)):
            st = os.lstat(path)
            heapq.heappush(self._index, (st.st_mtime, disk_bytes(st), path))
            self._journal_read = (inode, end)
        return self._journal_long(end)

    def _journal_long(self, length: int) -> bool:
        """Whether a journal of ``length`` bytes is to be written anew: past twice its length
        when last written anew (by then most of it may name deleted files), and some slack."""
        return length > 2 * self._journal_base + JOURNAL_LINE * JOURNAL_SLACK

    def _catch_up(self) -> None:
        """Index what other processes committed since this one last read the journal (all of it
        anew when it was written anew)."""
        try:
            journal = open(self._journal, "rb")
        except OSError:  # none yet, or none to be had: the index has what the last full scan found
            return
        with journal:
            inode = os.fstat(journal.fileno()).st_ino
            known, offset = self._journal_read
            if inode != known:
                self._index, offset = [], 0
            journal.seek(offset)
            data = journal.read()
        end = data.rfind(b"\n") + 1  # a line being written is read next time
        for name in data[:end].splitlines():
            path = os.path.join(self.directory, os.fsdecode(name))
            try:
                st = os.lstat(path)
            except OSError:
                continue
            heapq.heappush(self._index, (st.st_mtime, disk_bytes(st), path))
        self._journal_read = (inode, offset + end)
        if inode != known:
            self._journal_base = offset + end

    def _scan(self, fd: int, target: int) -> int:
        objects: list[tuple[float, int, str]] = []  # (last use, bytes on disk, path)
        used = 0
        for sub in _subdirectories(self.directory):
            for entry in entries_of(sub):
                name = entry.name
                if name.endswith(LOCK):
                    continue
                try:
                    st = entry.stat(follow_symlinks=False)
                except OSError:
                    continue  # gone meanwhile
                if name.endswith(TEMP):
                    if not _filling(entry.path):
                        _unlink(entry.path)
                        continue
                    used += max(_temp_reserved(name), disk_bytes(st))
                    continue
                objects.append((st.st_mtime, disk_bytes(st), entry.path))
                used += disk_bytes(st)
        heapq.heapify(objects)
        while used > target and objects:
            _, size, path = heapq.heappop(objects)
            if _unlink(path):
                used -= size
                self.evictions += 1
                self._deleted(fd)
        self._index = objects
        self._write_journal(objects)
        return max(0, used)

    def _write_journal(self, objects: list[tuple[float, int, str]]) -> None:
        """The journal anew: the objects there are now (under the lock, so no commit is lost)."""
        temp = f"{self._journal}.{secrets.token_hex(6)}"
        try:
            with open(temp, "wb") as journal:
                journal.write(b"".join(os.path.relpath(p, self.directory).encode() + b"\n" for _, _, p in objects))
                end = journal.tell()
            os.rename(temp, self._journal)
        except OSError:  # a full disk: the old journal stays, read as known (this index is whole)
            _unlink(temp)
            try:
                st = os.stat(self._journal)
            except OSError:
                return
            self._journal_read, self._journal_base = (st.st_ino, st.st_size), st.st_size
            return
        self._journal_read = (os.stat(self._journal).st_ino, end)
        self._journal_base = end


def temp_name(path: str, reserved: int) -> str:
    """A temporary name a fill of ``path`` writes, naming its reservation (and a random part:
    no two fills, in whatever process or namespace, share one)."""
    return f"{path}.{secrets.token_hex(8)}.{reserved}{TEMP}"


def _temp_reserved(name: str) -> int:
    try:
        return int(name[: -len(TEMP)].rsplit(".", 1)[1])
    except (IndexError, ValueError):
        return 0


def _filling(path: str) -> bool:
    """Whether a fill still holds its temporary file ``path`` (its flock): a killed one holds
    nothing, whatever its process id now names."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC | os.O_NOFOLLOW)
    except OSError:
        return False
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        return False
    except BlockingIOError:
        return True
    finally:
        os.close(fd)


def entries_of(directory: str) -> list[os.DirEntry[str]]:
    """What ``directory`` holds now (nothing, should it be gone)."""
    try:
        with os.scandir(directory) as found:
            return list(found)
    except OSError:
        return []


def _subdirectories(directory: str) -> list[str]:
    try:
        return [e.path for e in os.scandir(directory) if len(e.name) == 2 and e.is_dir(follow_symlinks=False)]
    except OSError:
        return []


def _unlink(path: str) -> bool:
    try:
        os.unlink(path)
        return True
    except FileNotFoundError:
        return False
