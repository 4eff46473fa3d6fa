"""The open-file cache's revalidation (:mod:`.file_cache`): whether a cached file's path still names
it, by every rule a request is opened by, with each directory resolved once per window.

Files of one directory share its path, and a data loader's epoch revalidates thousands of them a
window. So :class:`CheckedDirs` resolves a directory by the jail's rules
(:meth:`~.jail.RootJail.resolve`: ``openat2``, else the walk, symlinks and hidden names judged as
for any request) at most once per ``valid`` seconds, keeps its descriptor for that window, and
checks a file in it with one ``fstatat`` of its last component that follows no link (the same
regular file) and one ``faccessat`` (still readable by the server, as an ``open`` would decide).
A last component that is a symlink has its whole path resolved again, as a request would.

A file found so is known to be named by its path as of the directory's resolution, not as of
now: :meth:`CheckedDirs.still_names` gives that time, and the entry's window starts there. A
directory the server's sweep resolves with no record of it starts its window up to the sweep's
look-ahead early, by a phase of its own (``PHASES``), so that directories first resolved together,
and the files under them, do not come due together for good (the sweep would check them all in
one wave, design notes, "The sweep's checks no longer come in waves"); earlier is always safe. So
nothing a file's window relies on was checked more than ``valid`` seconds ago, and every change
the README promises within ``valid`` seconds (a directory renamed away or replaced by a symlink,
a file replaced) is still seen within them. Nothing is opened through a kept directory: it is
only stat-ed, against a descriptor opened while the file was inside the root.

Bound: at most ``size`` directories (least recently used out first), and none kept past its
window once :meth:`CheckedDirs.prune` runs (the server's once-a-second sweep). A descriptor in
use while its record is replaced is closed by its last user.
"""

from __future__ import annotations

import os
import stat
import threading
import time
import zlib
from collections import OrderedDict
from collections.abc import Callable
from typing import Protocol

from .jail import RootJail

#: The most directories kept at once (each one descriptor): a dataset's class directories.
MAX_DIRS = 1024
#: The share of a check's look-ahead over which the windows of directories it resolves are spread.
PHASES = 1.0


class Named(Protocol):
    """What a revalidation needs of a cache entry (:class:`~.file_cache.CachedDescriptor`)."""

    name: str  # normalised, relative to the root
    identity: tuple[int, int]  # (device, inode) of the file it was opened as


class _Dir:
    """One directory's descriptor, resolved at ``checked``, and how many checks use it now."""

    __slots__ = ("fd", "checked", "refs", "dropped")

    def __init__(self, fd: int, checked: float) -> None:
        self.fd = fd
        self.checked = checked
        self.refs = 0
        self.dropped = False


class CheckedDirs:
    """``jail``'s directories, each resolved at most once per ``valid`` seconds (at most ``size``)."""

    def __init__(self, jail: RootJail, valid: float, size: int = MAX_DIRS,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self._jail = jail
        self.valid = valid
        self.size = max(1, size)
        self._clock = clock  # the open-file cache's: prune compares the times still_names was given
        self._dirs: OrderedDict[str, _Dir] = OrderedDict()  # least recently used first
        self._lock = threading.Lock()

    def __len__(self) -> int:
        return len(self._dirs)

    def still_names(self, entry: Named, now: float, ahead: float = 0.0) -> float | None:
        """As of when ``entry``'s path is known to name its file, a regular file the server may
        still read (at most ``now``: the time its directory was resolved, or earlier by its phase); None if it names
        anything else now, or nothing, or is refused. The open-file cache's ``recheck``: with
        ``ahead``, a directory whose window ends within ``ahead`` seconds is resolved anew."""
        head, _, base = entry.name.rpartition("/")
        found = self._acquire(head, now, ahead)
        if found is None:  # the directory is gone, refused, or out of descriptors: open anew
            return None
        try:
            st = os.stat(base, dir_fd=found.fd, follow_symlinks=False)
            if stat.S_ISLNK(st.st_mode):
                return self._through_link(entry, now)
            if not _is_file_of(st, entry):
                return None
            # Permissions revoked (chmod 000) refuse it, as an open would decide (faccessat with
            # the effective ids: modes, ACLs, capabilities), without opening it.
            if not os.access(base, os.R_OK, dir_fd=found.fd, effective_ids=True, follow_symlinks=False):
                return None
        except OSError:
            return None
        finally:
            self._release(found)
        return found.checked

    def _through_link(self, entry: Named, now: float) -> float | None:
        """A link in last place: its target walked by the rules, as a request's would be."""
        fd = self._jail.resolve(entry.name)
        if fd is None:
            return None
        try:
            st = os.fstat(fd)
        finally:
            os.close(fd)
        return now if _is_file_of(st, entry) else None

    def _acquire(self, head: str, now: float, ahead: float) -> _Dir | None:
        """The directory ``head`` resolved within the window (and not in its last ``ahead``
        seconds), with one more user; None if it cannot be resolved now."""
        with self._lock:
            found = self._dirs.get(head)
            if found is not None and now - found.checked < self.valid - ahead:
                self._dirs.move_to_end(head)
                found.refs += 1
                return found
        fd = self._jail.resolve(head)  # outside the lock: system calls
        found = None if fd is None else _Dir(fd, now)
        with self._lock:
            old = self._dirs.pop(head, None)
            if found is not None and old is None and ahead:
                # Resolved by a check ahead (the sweep) with no record of it: its window starts
                # up to ``ahead`` early, by a phase of its own, and a resolution again keeps that
                # offset. Files first seen together (a data set's first pass) would otherwise
                # come due together at every window, their checks a wave that holds up every
                # request meanwhile. At most ``ahead``: a check ahead leaves ``valid - ahead``.
                found.checked -= ahead * PHASES * zlib.crc32(head.encode()) / 2**32
            if old is not None:  # past its window: what it named is resolved anew, or gone
                self._drop(old)
            if found is None:
                return None
            found.refs = 1
            self._dirs[head] = found
            while len(self._dirs) > self.size:
                self._drop(self._dirs.popitem(last=False)[1])
        return found

    def _release(self, found: _Dir) -> None:
        with self._lock:
            found.refs -= 1
            last = found.refs == 0 and found.dropped
        if last:
            os.close(found.fd)

    def _drop(self, found: _Dir) -> None:
        # Called with the lock held, the record already out of the table.
        found.dropped = True
        if found.refs == 0:
            os.close(found.fd)

    def prune(self) -> None:
        """Close the directories whose window has passed (the server calls this once a second)."""
        stale = self._clock() - self.valid
        with self._lock:
            for head in [head for head, found in self._dirs.items() if found.checked <= stale]:
                self._drop(self._dirs.pop(head))

    def close(self) -> None:
        """Forget every directory; one in use closes when its check is done."""
        with self._lock:
            while self._dirs:
                self._drop(self._dirs.popitem(last=False)[1])


def _is_file_of(st: os.stat_result, entry: Named) -> bool:
    """Whether ``st`` is the regular file ``entry`` was opened as."""
    return (st.st_dev, st.st_ino) == entry.identity and stat.S_ISREG(st.st_mode)
