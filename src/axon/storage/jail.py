"""The root jail: a requested path opened beneath one root directory, and nowhere else.

:class:`RootJail` holds the root open and resolves a path's components to a descriptor (a file,
a directory, anything: what may be served is the caller's to decide, after ``fstat``);
:func:`normalize` turns a requested path into those components. :class:`~.local.FileStore` is a
``RootJail``; :class:`~.objects.ObjectSource` jails its keys with the same :func:`normalize`.

The rules (DESIGN.md, "Rules that keep it safe"):

* a requested path arrives decoded exactly once and is never decoded again here;
* it must be relative and free of NUL and backslash; ``..`` may not climb above the root;
* it is walked one component at a time with ``openat``-style calls relative to an open directory
  and ``O_NOFOLLOW``, so the kernel never follows a link on our behalf. A symlink met on the way
  is read and its target walked by the same rules, which refuses any target outside the root.
  Nothing outside the root is ever opened, and there is no check-then-open race;
* unless hidden files are allowed, no dot-named component is ever opened: not in the request,
  not in a symlink's target (a link to ``.secret``, or through ``.git/..``, is refused as hidden);
* the final descriptor is checked with ``fstat``: only regular files are served.

On Linux 5.6+ the kernel does that walk in one call: ``openat2`` with ``RESOLVE_BENEATH`` follows
symlinks only while they stay below the root (a quarter of the cost of four ``openat`` calls;
the standard library has no wrapper, so ``ctypes`` calls it). Unless hidden files are allowed it
follows none (``RESOLVE_NO_SYMLINKS``): the kernel cannot apply the rule on names to a target.
Anything it refuses, a symlink included, is walked again the portable way, which applies every
rule and gives the precise error; where ``openat2`` is missing or forbidden, the walk is all.
"""

from __future__ import annotations

import ctypes
import errno
import os
import sys

from ..config import environment
from ..errors import BadRequest, Forbidden, HTTPError, NotFound, ServiceUnavailable

_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
# O_NONBLOCK: opening a FIFO that sits in the root must not hang the worker; it is refused after
# fstat like any other non-regular file.
_FILE_FLAGS = os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NONBLOCK | os.O_NOCTTY
_MAX_SYMLINKS = 40  # as the kernel's own limit


class _OpenHow(ctypes.Structure):
    _fields_ = [("flags", ctypes.c_uint64), ("mode", ctypes.c_uint64), ("resolve", ctypes.c_uint64)]


# openat2's resolve flags. BENEATH: never leave dir_fd; NO_MAGICLINKS: no /proc/self/fd style
# jumps; NO_SYMLINKS: follow no symlink at all (ELOOP), which leaves each one to the walk.
_RESOLVE_NO_SYMLINKS, _RESOLVE_NO_MAGICLINKS, _RESOLVE_BENEATH = 0x04, 0x02, 0x08


def _openat2():
    """A maker ``resolve -> ((dir_fd, path) -> fd or -errno)`` for Linux's openat2 with those
    resolve flags, or None if unavailable."""
    if not sys.platform.startswith("linux"):
        return None
    try:
        syscall = ctypes.CDLL(None, use_errno=True).syscall
    except (OSError, AttributeError):
        return None
    syscall.restype = ctypes.c_long

    def make(resolve: int):
        # O_NOFOLLOW is not set: the kernel follows links, but only as ``resolve`` allows.
        how = _OpenHow(_FILE_FLAGS & ~os.O_NOFOLLOW, 0, resolve)
        ref, size = ctypes.byref(how), ctypes.sizeof(how)

        def openat2(dir_fd: int, path: bytes) -> int:
            """The new descriptor, or minus the errno."""
            # 437 is openat2 on every Linux architecture (the unified syscall table).
            fd = syscall(437, dir_fd, path, ref, size)
            return fd if fd >= 0 else -ctypes.get_errno()

        return openat2

    return make


_OPENAT2 = _openat2()


def hidden(path: str) -> bool:
    """The hidden rule: whether a relative ``/``-joined path (one name, or a request's
    components joined) has a component that begins with ``.``. Requests, links' targets,
    object keys and listings ask it."""
    return path[:1] == "." or "/." in path


def normalize(requested: str, *, root_ok: bool = False) -> list[str]:
    """The components of a requested path, or an HTTPError saying why it is refused.

    Pure: touches no file. ``a/./b//c`` becomes ``[a, b, c]``; ``a/../b`` becomes ``[b]``;
    a ``..`` that would climb above the root is refused. A path naming the root itself (``""``,
    ``sub/..``) is refused unless ``root_ok`` (a directory listing may name it; a file may not).
    """
    if not requested and root_ok:
        return []
    if not requested:
        raise BadRequest("empty path", code="bad_path", paths=[requested])
    if "\x00" in requested:
        raise BadRequest("path contains a NUL byte", code="bad_path", paths=[requested])
    if "\\" in requested:
        raise BadRequest("path contains a backslash", code="bad_path", paths=[requested])
    if requested.startswith("/"):
        raise BadRequest("path must be relative to the root", code="bad_path", paths=[requested])
    try:
        requested.encode("utf-8")
    except UnicodeEncodeError:  # a lone surrogate: from JSON's \ud800, or a non-UTF-8 name
        raise BadRequest("path is not valid UTF-8", code="bad_path", paths=[requested]) from None
    if requested[0] != "." and "/." not in requested and "//" not in requested and requested[-1] != "/":
        # No empty, "." or ".." component (each would follow a "/" or start the path): the
        # components are the pieces as they are.
        parts = requested.split("/")
    else:
        parts = []
        if _walk_parts(parts, requested):
            raise Forbidden("path leaves the root", code="outside_root", paths=[requested])
    # Judged on the normalised first component, so that "./c:x" is refused as "c:x" is (and
    # normalising stays idempotent).
    first = parts[0] if parts else ""
    if len(first) >= 2 and first[1] == ":" and first[0].isascii() and first[0].isalpha():
        raise BadRequest("path must not name a drive", code="bad_path", paths=[requested])
    if not parts and not root_ok:
        raise Forbidden("path names the root itself", code="not_a_file", paths=[requested])
    return parts


def _walk_parts(stack: list[str], path: str) -> bool:
    """Push the components of ``path`` onto ``stack``; True if a ``..`` climbs above it."""
    for part in path.split("/"):
        if part == "" or part == ".":
            continue
        if part == "..":
            if not stack:
                return True
            stack.pop()
        else:
            stack.append(part)
    return False


class RootJail:
    """One root directory, held open, and the paths beneath it opened by the rules above."""

    def __init__(self, root: str | os.PathLike[str], *, allow_hidden: bool = False,
                 openat2: bool | None = None) -> None:
        self.root = os.path.realpath(os.fspath(root))
        if not os.path.isdir(self.root):
            raise ValueError(f"root is not a directory: {self.root}")
        self.allow_hidden = allow_hidden  # for the jail's life: it sets how openat2 resolves
        # Held for the jail's life: the root is this directory, even if renamed meanwhile.
        self._root_fd = os.open(self.root, _DIR_FLAGS)
        resolve = _RESOLVE_BENEATH | _RESOLVE_NO_MAGICLINKS
        if not allow_hidden:  # a link's target may name a dot-file: only the walk sees it
            resolve |= _RESOLVE_NO_SYMLINKS
        if openat2 is None:
            openat2 = environment().openat2
        self._openat2 = _OPENAT2(resolve) if _OPENAT2 is not None and openat2 else None
        probe = self._openat2(self._root_fd, b".") if self._openat2 is not None else -1
        if probe >= 0:
            os.close(probe)
        else:
            self._openat2 = None  # ENOSYS (old kernel) or EPERM (a seccomp filter): walk instead

    def __del__(self) -> None:
        fd = getattr(self, "_root_fd", -1)
        if fd >= 0:
            os.close(fd)

    def resolve(self, name: str) -> int | None:
        """A descriptor for what ``name`` (normalised, relative to the root; ``""`` the root)
        names, opened by the rules above; None if they refuse it or it cannot be opened. For
        checks that a path still names what it named (:mod:`.checked_dirs`)."""
        try:
            return self._resolve(name.split("/") if name else [], name)
        except HTTPError:
            return None

    def _resolve(self, parts: list[str], requested: str) -> int:
        """A descriptor for what ``parts`` name under the root (a file, a directory, anything),
        opened by the rules above: the hidden rule, then openat2, else the walk."""
        joined = "/".join(parts)
        if not self.allow_hidden and hidden(joined):
            raise Forbidden("hidden files are not served", code="hidden", paths=[requested])
        if not parts:  # the root: a descriptor of its own, so that no two readers share a position
            try:
                return os.open(".", _DIR_FLAGS, dir_fd=self._root_fd)
            except OSError as exc:
                raise os_error(exc, requested) from None
        fd = -1
        if self._openat2 is not None:
            try:
                fd = self._openat2(self._root_fd, joined.encode("utf-8", "surrogateescape"))
            except ValueError:  # a NUL cannot get here (normalize refused it); be safe anyway
                fd = -1
        if fd in (-errno.ENOENT, -errno.ENOTDIR):
            # Missing, before any symlink or through those the kernel followed: the walk would
            # only say so again (the error baseline, a missing file, paid for both).
            raise NotFound("no such file", paths=[requested])
        if fd < 0:
            try:
                fd = self._walk(parts, requested)
            except OSError as exc:  # os.dup of the root descriptor: out of descriptors (EMFILE)
                raise os_error(exc, requested) from None
        return fd

    def _walk(self, parts: list[str], requested: str) -> int:
        """Open the file named by ``parts`` one component at a time; return its descriptor."""
        pending = list(reversed(parts))  # components still to walk, next one last
        done: list[str] = []  # components walked, for resolving relative symlink targets
        links = 0
        # A link in last place whose target ends in "/" or "/." names a directory, as the
        # kernel reads it: the file it ends at must then be one (a file there is missing).
        must_be_dir = False
        current = os.dup(self._root_fd)
        try:
            while pending:
                part = pending.pop()
                if part == "..":  # only from symlink targets; normalize() removed the rest
                    if not done:
                        raise Forbidden("symlink leaves the root", code="outside_root", paths=[requested])
                    done.pop()
                    os.close(current)
                    current = self._reopen(done, requested)
                    continue
                last = not pending
                try:
                    fd = os.open(part, _FILE_FLAGS if last and not must_be_dir else _DIR_FLAGS, dir_fd=current)
                except OSError as exc:
                    # O_NOFOLLOW refuses a symlink with ELOOP, or ENOTDIR when O_DIRECTORY is set.
                    target = _readlink(part, current) if exc.errno in (errno.ELOOP, errno.ENOTDIR) else None
                    if target is None:
                        raise os_error(exc, requested) from None
                    # A symlink: walk its target in its place, by the same rules.
                    links += 1
                    if links > _MAX_SYMLINKS:
                        raise Forbidden("too many symlinks", code="symlink_loop", paths=[requested]) from None
                    if last and (target.endswith(("/", "/.")) or target == "."):
                        must_be_dir = True
                    if target.startswith("/"):
                        inside = os.path.relpath(target, self.root)
                        if inside == ".." or inside.startswith("../") or os.path.isabs(inside):
                            raise Forbidden(
                                "symlink leaves the root", code="outside_root", paths=[requested]
                            ) from None
                        done = []
                        os.close(current)
                        current = os.dup(self._root_fd)
                        target = inside
                    target_parts = [p for p in target.split("/") if p not in ("", ".")]
                    if not self.allow_hidden and hidden("/".join(p for p in target_parts if p != "..")):
                        # _open checked the request, this checks each target before any of it
                        # is opened: a link names its file no less than the request does.
                        raise Forbidden("hidden files are not served", code="hidden", paths=[requested])
                    pending.extend(reversed(target_parts))
                    continue
                if last:
                    os.close(current)
                    current = -1
                    return fd
                os.close(current)
                current = fd
                done.append(part)
            # A symlink's target ended on a directory already open ("." or ".."): that is what
            # the path names (a directory: refused by the caller that wants a file). Opened
            # anew: ``current`` may be a duplicate of the root's descriptor, whose directory
            # position its duplicates share.
            return os.open(".", _DIR_FLAGS, dir_fd=current)
        finally:
            if current >= 0:
                os.close(current)

    def _reopen(self, parts: list[str], requested: str) -> int:
        """A descriptor for the directory ``parts`` under the root (after a symlink's ``..``)."""
        fd = os.dup(self._root_fd)
        for part in parts:
            try:
                nxt = os.open(part, _DIR_FLAGS, dir_fd=fd)
            except OSError as exc:
                os.close(fd)
                raise os_error(exc, requested) from None
            os.close(fd)
            fd = nxt
        return fd


def _readlink(part: str, dir_fd: int) -> str | None:
    """The target of the symlink ``part``, or None if it is not a symlink (any more)."""
    try:
        return os.readlink(part, dir_fd=dir_fd)
    except OSError:
        return None


def os_error(exc: OSError, requested: str) -> HTTPError:
    """Map an ``open`` failure to the wire contract's statuses (as aiohttp does)."""
    if exc.errno in (errno.ENOENT, errno.ENOTDIR, errno.ENAMETOOLONG):
        return NotFound("no such file", paths=[requested])
    if exc.errno in (errno.EACCES, errno.EPERM):
        return Forbidden("permission denied", code="permission_denied", paths=[requested])
    if exc.errno in (errno.EMFILE, errno.ENFILE, errno.ENOMEM):
        return ServiceUnavailable("server is out of file descriptors; retry later", paths=[requested])
    return NotFound("file cannot be opened", paths=[requested])
