"""The bound of the objects' disk tier (:mod:`.object_disk`): bytes on disk, shared by every
process that fills the same directory.

``.usage`` in the directory holds the bytes reserved, read and written under an exclusive
``flock`` of that file. A fill reserves what it will take before its first byte (its size rounded
up to a block) as it makes its temporary file, and corrects that to what the file takes once
committed (``st_blocks * 512``); each change to the directory is made with its count under the
lock, so a scan never sees one without the other.
A reservation that does not fit :meth:`Space.scan` s the directory: what is there is counted
(a temporary file of a live fill as the larger of its reservation and its blocks; one whose
process is gone is deleted), the least recently used objects (by mtime: a hit sets it) are
deleted down to :data:`LOW_WATER` of the bound, and the count is written anew, which also gives
back what a killed fill had reserved. So the directory never holds more than the bound, however
many processes fill it, and scans are rare: one frees a tenth of the bound.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import struct
from typing import Iterator

#: The file that holds the bytes reserved, under its own flock.
USAGE = ".usage"
#: A scan deletes down to this share of the bound: the next scan is a tenth of it away.
LOW_WATER = 0.9
#: The unit a file's size is reserved in (a filesystem block).
BLOCK = 4096
#: The suffix of a fill under way: ``<name>.<pid>.<reserved>.tmp``.
TEMP = ".tmp"
LOCK = ".lock"

_COUNT = struct.Struct("<Q")


def reserved_for(size: int) -> int:
    """What a file of ``size`` bytes is reserved before it is written: whole blocks."""
    return -(-size // BLOCK) * BLOCK


def disk_bytes(st: os.stat_result) -> int:
    """What a file takes on disk (its blocks), not its length."""
    return st.st_blocks * 512


def pid_alive(pid: int) -> bool:
    """Whether process ``pid`` may still be filling: it exists and is no zombie (a killed worker
    whose parent died too stays a zombie where nothing reaps it)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            return f.read().rpartition(b")")[2].split()[0] not in (b"Z", b"X")
    except (OSError, IndexError):
        return True


class Space:
    """The bytes reserved in ``directory``, at most ``bound``."""

    def __init__(self, directory: str, bound: int) -> None:
        self.directory = directory
        self.bound = bound
        self._usage = os.path.join(directory, USAGE)
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

    # Each change to what the directory holds is made with its count under the lock, so that a
    # scan (which recounts under it) never falls between the two and counts it twice or never.

    def reserve(self, amount: int, temp: str) -> int | None:
        """Make the fill's file ``temp`` (a temporary name), counted as ``amount`` bytes, making
        room first if they do not fit; its descriptor, or None when they cannot fit (more than
        the bound even in an empty directory)."""
        if amount > self.bound:
            return None
        with self._held() as fd:
            used = self._read(fd)
            if used + amount > self.bound:
                used = self._scan(int(self.bound * LOW_WATER) - amount)
                if used + amount > self.bound:
                    self._write(fd, used)
                    return None
            made = os.open(temp, os.O_RDWR | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o644)
            self._write(fd, used + amount)
        return made

    def commit(self, temp: str, path: str, reserved: int, taken: int) -> None:
        """Rename the fill ``temp`` to ``path``, counted as the ``taken`` bytes it holds rather
        than the ``reserved`` ones; a count past the bound makes room at once."""
        with self._held() as fd:
            os.rename(temp, path)
            used = self._read(fd) + taken - reserved
            if used > self.bound:
                used = self._scan(int(self.bound * LOW_WATER))
            self._write(fd, used)

    def release(self, paths: list[str], reserved: int | None = None) -> None:
        """Delete ``paths``, giving back ``reserved`` bytes (a fill abandoned: what it reserved)
        or, when None, their blocks (an object's older versions)."""
        with self._held() as fd:
            freed = reserved or 0
            for path in paths:
                try:
                    taken = disk_bytes(os.lstat(path))
                    os.unlink(path)
                except FileNotFoundError:
                    continue
                if reserved is None:
                    freed += taken
            self._write(fd, self._read(fd) - freed)

    def scan(self, target: int | None = None) -> int:
        """Recount the directory, deleting the least recently used objects down to ``target``
        (default: the bound) and the temporary files of processes that are gone; the count."""
        with self._held() as fd:
            used = self._scan(self.bound if target is None else target)
            self._write(fd, used)
            return used

    def _scan(self, target: int) -> int:
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
                    pid, reserved = _temp_facts(name)
                    if pid is None or not pid_alive(pid):
                        _unlink(entry.path)
                        continue
                    used += max(reserved, disk_bytes(st))
                    continue
                objects.append((st.st_mtime, disk_bytes(st), entry.path))
                used += disk_bytes(st)
        if used > target:
            objects.sort()
            for _, size, path in objects:
                if used <= target:
                    break
                if _unlink(path):
                    used -= size
                    self.evictions += 1
        return max(0, used)


def temp_name(path: str, reserved: int) -> str:
    """The temporary name a fill of ``path`` writes, naming its process and its reservation."""
    return f"{path}.{os.getpid()}.{reserved}{TEMP}"


def _temp_facts(name: str) -> tuple[int | None, int]:
    parts = name[: -len(TEMP)].rsplit(".", 2)
    try:
        return int(parts[1]), int(parts[2])
    except (IndexError, ValueError):
        return None, 0


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
