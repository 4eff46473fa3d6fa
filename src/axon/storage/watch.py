"""Changes to open files, told by the kernel (Linux inotify), so that a cache hit need not
``fstat`` its file to know it is unchanged (lighttpd's stat cache does the same).

A watch is on the inode, added through ``/proc/self/fd/N`` (the descriptor the cache holds), for
writes and truncation (``IN_MODIFY``), metadata and link count (``IN_ATTRIB``: a touch, a chmod,
an unlink, a rename over the file, a new hard link), and the inode's own move or deletion. The
kernel queues the event before the changing call returns, so reading the queue before a request
is handled takes in every change made before the request was sent. Asking whether anything is
queued is one ``FIONREAD`` ioctl, which touches no file: one system call a request instead of an
``fstat`` a file.

Where inotify is missing, or out of instances or watches (``fs.inotify.max_user_instances``,
``max_user_watches``), :func:`open_watcher` and :meth:`Watcher.watch` return None, and the cache
``fstat``s every use as before. A watcher takes at most :data:`WATCH_SHARE` of the user's
watches (its ``budget``), so that several workers, and the user's other programs, keep theirs. inotify does not see writes through a shared ``mmap`` or by
another host on a network filesystem; the cache bounds how long those go unseen (its ``valid``).
"""

from __future__ import annotations

import ctypes
import ctypes.util
import fcntl
import os
import struct
import termios
from collections.abc import Callable

IN_MODIFY, IN_ATTRIB, IN_MOVE_SELF, IN_DELETE_SELF = 0x2, 0x4, 0x800, 0x400
IN_Q_OVERFLOW, IN_IGNORED = 0x4000, 0x8000
MASK = IN_MODIFY | IN_ATTRIB | IN_MOVE_SELF | IN_DELETE_SELF
_EVENT = struct.Struct("iIII")  # wd, mask, cookie, len; then len bytes of a name (none for a file)
_NOTHING = b"\0\0\0\0"
#: The share of ``fs.inotify.max_user_watches`` (shared by all the user's programs) one watcher takes.
WATCH_SHARE = 1 / 8


class Events:
    """What one read of the queue told: the watches that saw a change, the watches the kernel
    removed (the file system went away: no more events will come for them), and whether the
    queue overflowed and lost events (then anything may have changed)."""

    __slots__ = ("changed", "removed", "overflowed")

    def __init__(self) -> None:
        self.changed: set[int] = set()
        self.removed: set[int] = set()
        self.overflowed = False


class Watcher:
    """One inotify instance: :meth:`watch` the file a descriptor names, :meth:`pending` and
    :meth:`read` what changed since."""

    def __init__(self, fd: int, add: Callable[[int, bytes, int], int], remove: Callable[[int, int], int],
                 budget: int) -> None:
        self.fd = fd
        self.budget = budget  # at most this many watches: the cache adds no more
        self._add = add
        self._remove = remove
        self._queued = bytearray(4)  # FIONREAD's answer: bytes of events queued

    def watch(self, fd: int) -> int | None:
        """A watch (a positive number) on the file ``fd`` names, or None if none can be added."""
        wd = self._add(self.fd, b"/proc/self/fd/%d" % fd, MASK)
        return wd if wd > 0 else None

    def unwatch(self, wd: int) -> None:
        self._remove(self.fd, wd)  # an error (the kernel removed it already) changes nothing

    def pending(self) -> bool:
        """Whether events are queued: one ioctl, no file touched, no read."""
        fcntl.ioctl(self.fd, termios.FIONREAD, self._queued)
        return self._queued != _NOTHING

    def read(self) -> Events:
        """Every event queued now, summed up."""
        events = Events()
        while True:
            try:
                data = os.read(self.fd, 65536)
            except BlockingIOError:
                return events
            offset = 0
            while offset < len(data):
                wd, mask, _, length = _EVENT.unpack_from(data, offset)
                offset += _EVENT.size + length
                if mask & IN_Q_OVERFLOW:
                    events.overflowed = True
                elif mask & IN_IGNORED:
                    events.removed.add(wd)
                else:
                    events.changed.add(wd)

    def close(self) -> None:
        os.close(self.fd)


def open_watcher() -> Watcher | None:
    """A new :class:`Watcher`, or None where there is no inotify (not Linux, or out of instances)."""
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c"), use_errno=True)
        init, add, remove = libc.inotify_init1, libc.inotify_add_watch, libc.inotify_rm_watch
    except (OSError, AttributeError):
        return None
    add.argtypes = (ctypes.c_int, ctypes.c_char_p, ctypes.c_uint32)
    remove.argtypes = (ctypes.c_int, ctypes.c_int)
    fd = init(os.O_NONBLOCK | os.O_CLOEXEC)
    return Watcher(fd, add, remove, int(_max_user_watches() * WATCH_SHARE)) if fd >= 0 else None


def _max_user_watches() -> int:
    try:
        with open("/proc/sys/fs/inotify/max_user_watches") as f:
            return int(f.read())
    except (OSError, ValueError):
        return 8192  # the kernel's default before 5.11
