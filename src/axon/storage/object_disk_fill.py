"""One fill of the objects' disk tier (:mod:`.object_disk`): its temporary file, from its
reservation to its commit or its undoing, and the lock that makes it the only fill of its object
across processes.

A fill's temporary file is made, reserved and locked by :meth:`Fill.reserve` and renamed to the
object's name by :meth:`Fill.commit`, both in a thread: the state they leave says what
:meth:`Fill.abandon` undoes, and :func:`to_the_end` awaits such a thread to its end even when
the fill is cancelled, so that a cancellation leaks no descriptor, file or reservation.
"""

from __future__ import annotations

import asyncio
import fcntl
import os
from typing import Any, Callable

from .object_disk_space import LOCK, Space, disk_bytes, reserved_for, temp_name


class Fill:
    """One fill's temporary file: reserved and locked (:meth:`reserve`), then committed whole
    (:meth:`commit`) or given back (:meth:`abandon`). The first two run in a thread; the state
    they leave says what is to undo, so that a fill cancelled while a thread runs leaks
    nothing (:func:`to_the_end`)."""

    __slots__ = ("space", "path", "size", "reserved", "temp", "fd", "made", "done")

    def __init__(self, space: Space, path: str, size: int) -> None:
        self.space, self.path, self.size = space, path, size
        self.reserved = reserved_for(size)
        self.temp = temp_name(path, self.reserved)
        self.fd = -1
        self.made = self.done = False

    def reserve(self) -> bool:
        """Make the temporary file, its room made and its length set (a full disk is found
        before any GET); False when it cannot fit beside the fills under way."""
        fd = self.space.reserve(self.reserved, self.temp)
        if fd is None:
            return False
        self.fd, self.made = fd, True
        os.posix_fallocate(fd, 0, self.size)
        return True

    def commit(self) -> None:
        """Sync the whole, checked file and rename it to its name (still locked: a scan never
        takes it for a dead fill's), then close it."""
        os.fdatasync(self.fd)
        self.space.commit(self.temp, self.path, self.reserved, disk_bytes(os.fstat(self.fd)))
        self.done = True
        fd, self.fd = self.fd, -1
        os.close(fd)

    def abandon(self) -> None:
        """Give back what was not committed: the file and its reservation, then the descriptor
        (its flock held until the file is gone: a scan meanwhile counts it as a live fill's)."""
        try:
            if self.made and not self.done:
                self.space.release([self.temp], self.reserved)
        finally:
            if self.fd >= 0:
                fd, self.fd = self.fd, -1
                os.close(fd)


async def to_the_end(call: Callable[[], Any]) -> Any:
    """``call()`` in a thread, awaited to its end even when the caller is cancelled meanwhile (a
    thread cannot be stopped: what it made must be known before anything is undone); the
    cancellation is raised once it ended."""
    done = asyncio.get_running_loop().run_in_executor(None, call)
    cancelled: asyncio.CancelledError | None = None
    while not done.done():
        try:
            await asyncio.shield(done)
        except asyncio.CancelledError as exc:
            cancelled = exc
        except Exception:  # noqa: BLE001 - the call's own: raised below
            break
    if cancelled is not None:
        raise cancelled
    return done.result()


def lock_fill(path: str) -> int | None:
    """An exclusive ``flock`` on ``<path>.lock``, the file that name names now; None while another
    holds it. A holder deletes the name while it holds it (:func:`unlock_fill`): a lock taken on the
    file it deleted would let a later fill lock a new file of that name at the same time, so
    such a lock is let go and the name's file locked instead."""
    name = path + LOCK
    os.makedirs(os.path.dirname(path), exist_ok=True)
    while True:
        fd = os.open(name, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(fd)
            return None
        try:
            mine, named = os.fstat(fd), os.stat(name)
            if (mine.st_dev, mine.st_ino) == (named.st_dev, named.st_ino):
                return fd
        except FileNotFoundError:
            pass
        os.close(fd)


def unlock_fill(path: str, fd: int) -> None:
    """Let go of :func:`lock_fill`'s lock, deleting its file first (still held: a waiter that locks
    it next finds the object's file there, or locks the name's new file)."""
    try:
        os.unlink(path + LOCK)
    except OSError:
        pass
    os.close(fd)


def write_all(fd: int, data: bytes) -> int:
    view, offset = memoryview(data), 0
    while offset < len(data):
        offset += os.pwrite(fd, view[offset:], offset)
    return offset
