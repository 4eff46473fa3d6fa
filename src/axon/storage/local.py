"""FileStore: the root jail. Turns a requested path into an open, checked, regular file.

It is the local :class:`~axon.storage.Source`, and :class:`OpenFile` its :class:`~axon.storage.File`.

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
import mimetypes
import os
import stat
import sys

from ..config import environment
from ..errors import BadRequest, FileChanged, Forbidden, HTTPError, NotFound, ServiceUnavailable
from . import Entry
from .batch_key import derive_key
from .crc_cache import CrcCache, Version
from .file_cache import CachedDescriptor
from ..http.segments import FileSlice, Segment

_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
# O_NONBLOCK: opening a FIFO that sits in the root must not hang the worker; it is refused after
# fstat like any other non-regular file.
_FILE_FLAGS = os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NONBLOCK | os.O_NOCTTY
_MAX_SYMLINKS = 40  # as the kernel's own limit
_new_slice = tuple.__new__
#: Longer requested paths are opened without the open-file cache: its keys stay small.
MAX_CACHED_PATH = 1024


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


class OpenFile:
    """A checked regular file inside the root, as it was when opened. Whoever holds it closes it.

    Its descriptor is its own, or shared with other requests through the open-file cache
    (:mod:`axon.storage.shared_files`); either way ``close()`` is what gives it back. Read it with
    explicit offsets (``pread``, ``sendfile``): a shared descriptor's file position is shared too.
    """

    __slots__ = ("fd", "path", "name", "device", "inode", "size", "mtime_ns", "ctime_ns", "content_type", "data",
                 "_shared", "_version")

    def __init__(
        self,
        fd: int,
        path: str,  # the path as requested (decoded once), for headers and error messages
        name: str,  # the normalized path relative to the root
        device: int,  # the five facts of a Version (crc_cache), in its order
        inode: int,
        size: int,
        mtime_ns: int,
        ctime_ns: int,  # changes on every write and utime: what mtime alone cannot promise
        content_type: str,
        shared: CachedDescriptor | None = None,
        data: bytes | None = None,  # the whole content, when the open-file cache holds it
    ) -> None:
        self.fd = fd
        self.path = path
        self.name = name
        self.device = device
        self.inode = inode
        self.size = size
        self.mtime_ns = mtime_ns
        self.ctime_ns = ctime_ns
        self.content_type = content_type
        self.data = data
        self._shared = shared
        self._version: tuple[int, int, int, int, int] | None = None  # the host's, where the facts above are not

    def __repr__(self) -> str:
        return f"OpenFile(fd={self.fd}, path={self.path!r}, size={self.size})"

    @property
    def version(self) -> tuple[int, int, int, int, int]:
        """An opaque token of the file as opened on this host: equal tokens are the same bytes,
        whatever the facts above say of a portable identity. A :class:`~.crc_cache.Version`'s facts
        in its order, as a plain tuple: made per file of every remembered head and only compared,
        where a tuple costs a fraction of a NamedTuple to build."""
        return self._version or (self.device, self.inode, self.size, self.mtime_ns, self.ctime_ns)

    @property
    def shared(self) -> bool:
        """Whether the descriptor is the open-file cache's: never close it or hand it over."""
        return self._shared is not None

    def segment(self, start: int, stop: int) -> Segment:
        """Bytes ``[start, stop)`` of the file as a body segment: from memory when the cache
        holds the file, else a slice of the descriptor."""
        if self.data is not None:
            return self.data if start == 0 and stop == self.size else self.data[start:stop]
        return _new_slice(FileSlice, (self.fd, start, stop - start))  # FileSlice(...) without its Python-level __new__

    def close(self) -> None:
        """Give the descriptor back; only the first call does anything."""
        shared, self._shared = self._shared, None
        if shared is not None:
            shared.release()
        elif self.fd >= 0:
            try:
                os.close(self.fd)
            except OSError:
                pass
        self.fd = -1


def portable(f: OpenFile) -> None:
    """Name ``f`` to clients by the facts every copy of it shares (a store built with
    ``portable_identity``): its host's facts kept as its version, inode and device 0, its ctime
    its mtime."""
    f._version = (f.device, f.inode, f.size, f.mtime_ns, f.ctime_ns)
    f.inode = f.device = 0
    f.ctime_ns = f.mtime_ns


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
    parts: list[str] = []
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


class FileStore:
    """Opens requested paths under one root directory, and only there."""

    # The Source members a local directory has no use for: opening never waits on the network,
    # each path of a batch is opened alone, and every segment is sent as it is.
    blocking = False
    for_batch = None
    body_stream = None

    def __init__(
        self, root: str | os.PathLike[str], *, allow_hidden: bool = False, openat2: bool | None = None,
        portable_identity: bool = False,
    ) -> None:
        """``openat2=False`` forces the portable walk (default: ``AXON_NO_OPENAT2`` unset).

        ``portable_identity=True`` is for a root that other hosts serve copies of (behind one load
        balancer): a file's identity is then what every copy shares, its path, size and mtime.
        Its :class:`OpenFile` reports inode and device 0 and its ctime as its mtime, so that
        ETags and batch identities (which hash those) agree on every host; what is lost is
        that a file replaced, or rewritten in place with its size and mtime put back, keeps
        its identity (docs/design-notes.md, "Several nodes"). The open-file cache and
        the CRCs still go by the real inode and ctime."""
        self.root = os.path.realpath(os.fspath(root))
        self.portable_identity = portable_identity
        if not os.path.isdir(self.root):
            raise ValueError(f"root is not a directory: {self.root}")
        self.allow_hidden = allow_hidden  # for the store's life: it sets how openat2 resolves
        self._types: dict[str, str] = {}
        if not mimetypes.inited:  # init() rereads the system's tables and resets any additions
            mimetypes.init()
        # Held for the store's life: the root is this directory, even if renamed meanwhile.
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
        self.crcs = CrcCache()

    def __del__(self) -> None:
        fd = getattr(self, "_root_fd", -1)
        if fd >= 0:
            os.close(fd)

    def batch_key(self, secret: str | bytes | None) -> bytes:
        """The key of batch identities: ``secret``'s, else this host's and this root's
        (:mod:`.batch_key`)."""
        return derive_key(secret, self.root)

    def _names(self, entry: CachedDescriptor) -> bool:
        """For the open-file cache (:mod:`.shared_files`): whether the path ``entry`` was opened by
        still resolves, by every rule a request is opened by (a symlink put in a directory's place
        is walked, and refused if it leaves the root), to the same regular file."""
        try:
            fd = self._resolve(entry.name.split("/"), entry.name)
        except HTTPError:
            return False
        try:
            st = os.fstat(fd)
        finally:
            os.close(fd)
        return (st.st_dev, st.st_ino) == entry.identity and stat.S_ISREG(st.st_mode)

    def open(self, requested: str) -> OpenFile:
        """Open ``requested`` (already decoded once) as a regular file inside the root. Axon's own
        server shares descriptors between requests through :class:`~.shared_files.SharedFiles`."""
        f = self._open(requested)
        if self.portable_identity:
            portable(f)
        return f

    def crc32s(self, files: list[OpenFile], read: bool = True) -> list[int | None]:
        """The CRC-32 of each of ``files`` as opened: kept per file version
        (:mod:`axon.storage.crc_cache`), read by offset when not known (with ``read`` false, None
        instead of reading); :class:`~axon.errors.FileChanged`, naming the requested
        path, if one changed. Pass a file once: one not known is read as often as it is given."""
        cache = self.crcs
        if self.portable_identity:
            versions = [self._host_version(f) for f in files]
        else:
            versions = [Version(f.device, f.inode, f.size, f.mtime_ns, f.ctime_ns) for f in files]
        crcs = cache.lookup(versions)
        if None in crcs:
            for i, f in enumerate(files):
                if crcs[i] is None:
                    try:
                        crcs[i] = cache.crc32(f.fd, versions[i], f.data, read)
                    except FileChanged:
                        raise FileChanged(f.path) from None
        return crcs

    @staticmethod
    def _host_version(f: OpenFile) -> Version:
        """A portable file's facts name no version on this host (every file has inode 0): its
        CRC is kept under the descriptor's own, if that is still the size and mtime opened."""
        st = os.fstat(f.fd)
        if (st.st_size, st.st_mtime_ns) != (f.size, f.mtime_ns):
            raise FileChanged(f.path)
        return Version(st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns)

    def _open(self, requested: str) -> OpenFile:
        parts = normalize(requested)
        fd = self._resolve(parts, requested)
        try:
            st = os.fstat(fd)
            if not stat.S_ISREG(st.st_mode):
                raise Forbidden("not a regular file", code="not_a_file", paths=[requested])
            if requested.endswith(("/", "/.")):
                # A trailing slash names a directory (as the kernel and nginx read it): a file
                # there is missing, or a browser resolves the page's relative links wrongly and
                # caches keep two URLs for one file.
                raise NotFound("no such file: a file's path does not end in '/'", paths=[requested])
        except BaseException:
            os.close(fd)
            raise
        name = "/".join(parts)
        return OpenFile(
            fd, requested, name, st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns,
            self.content_type(name),
        )

    def _resolve(self, parts: list[str], requested: str) -> int:
        """A descriptor for what ``parts`` name under the root (a file, a directory, anything),
        opened by the rules above: the hidden rule, then openat2, else the walk."""
        if not self.allow_hidden and any(p.startswith(".") for p in parts):
            raise Forbidden("hidden files are not served", code="hidden", paths=[requested])
        if not parts:  # the root: a descriptor of its own, so that no two readers share a position
            try:
                return os.open(".", _DIR_FLAGS, dir_fd=self._root_fd)
            except OSError as exc:
                raise _os_error(exc, requested) from None
        fd = -1
        if self._openat2 is not None:
            try:
                fd = self._openat2(self._root_fd, "/".join(parts).encode("utf-8", "surrogateescape"))
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
                raise _os_error(exc, requested) from None
        return fd

    # -- listing directories (the opt-in listing, axon.plan.listing) -------------------------------

    def kind(self, requested: str) -> str:
        """``"dir"`` or ``"file"``: what ``requested`` names under the root (``""`` is the root),
        resolved by the rules files are opened by; anything else is refused as serving refuses it."""
        fd = self._resolve(normalize(requested, root_ok=True), requested)
        try:
            mode = os.fstat(fd).st_mode
        finally:
            os.close(fd)
        if stat.S_ISDIR(mode):
            return "dir"
        if stat.S_ISREG(mode):
            return "file"
        raise Forbidden("not a regular file", code="not_a_file", paths=[requested])

    def list_dir(self, requested: str, limit: int) -> tuple[list[Entry], bool]:
        """The entries of the directory ``requested`` names (``""``: the root), in the
        directory's own order, and whether it holds more than ``limit`` (then only the first
        ``limit`` are read: the work is bounded, whatever the directory holds).

        The directory is opened by the rules files are opened by, and read with ``scandir`` on
        its descriptor, so nothing outside the root is listed. An entry is listed only if it
        could be served or listed itself: regular files and directories; a symlink as what its
        target is, only if the target resolves inside the root by those rules (not hidden, not
        outside, not dangling); never a dot-name unless hidden files are allowed, nor a name a
        request could not carry (not UTF-8, or with a backslash). FIFOs, sockets and devices
        are left out, as serving refuses them.
        """
        parts = normalize(requested, root_ok=True)
        fd = self._resolve(parts, requested)
        entries: list[Entry] = []
        truncated = False
        try:
            if not stat.S_ISDIR(os.fstat(fd).st_mode):
                raise NotFound("no such directory", paths=[requested])
            with os.scandir(fd) as found:  # scandir reads a duplicate of fd, closed with it
                for item in found:
                    entry = self._entry(item, parts)
                    if entry is None:
                        continue
                    if len(entries) == limit:
                        truncated = True
                        break
                    entries.append(entry)
        except OSError as exc:
            raise _os_error(exc, requested) from None
        finally:
            os.close(fd)
        return entries, truncated

    def _entry(self, item: os.DirEntry[str], parts: list[str]) -> Entry | None:
        """``item`` as a listed entry, or None if it is not to be shown (see :meth:`list_dir`)."""
        name = item.name
        if (name.startswith(".") and not self.allow_hidden) or "\\" in name or not _is_utf8(name):
            return None
        try:
            if item.is_symlink():
                return self._link_entry(name, parts)
            st = item.stat(follow_symlinks=False)
        except OSError:  # gone since the directory was read, or not ours to stat
            return None
        return _entry_of(name, st)

    def _link_entry(self, name: str, parts: list[str]) -> Entry | None:
        """A symlink, listed as its target, if the target resolves by the rules (else None)."""
        path = [*parts, name]
        try:
            fd = self._resolve(path, "/".join(path))
        except HTTPError as exc:
            if exc.status >= 500:  # out of descriptors: not a fact about this link
                raise
            return None  # outside the root, hidden, dangling, a loop: never shown
        try:
            st = os.fstat(fd)
        finally:
            os.close(fd)
        return _entry_of(name, st)

    def content_type(self, name: str) -> str:
        dot = name.rfind(".")
        suffix = name[dot:].lower() if dot > name.rfind("/") else ""
        found = self._types.get(suffix)
        if found is None:
            guessed, encoding = mimetypes.guess_type("x" + suffix, strict=False)
            # A compressed file is served as the bytes it is, not as what it would decompress to.
            found = "application/octet-stream" if guessed is None or encoding else guessed
            if found.startswith("text/") or found in ("application/json", "application/javascript"):
                found += "; charset=utf-8"
            if len(self._types) < 1024:
                self._types[suffix] = found
        return found

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
                        raise _os_error(exc, requested) from None
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
                    if not self.allow_hidden and any(p.startswith(".") and p != ".." for p in target_parts):
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
                raise _os_error(exc, requested) from None
            os.close(fd)
            fd = nxt
        return fd


def _entry_of(name: str, st: os.stat_result) -> Entry | None:
    if stat.S_ISREG(st.st_mode):
        return Entry(name, "file", st.st_size, st.st_mtime_ns)
    if stat.S_ISDIR(st.st_mode):
        return Entry(name, "dir", 0, st.st_mtime_ns)
    return None


def _is_utf8(name: str) -> bool:
    """Whether a name read from disk is valid UTF-8 (else it holds surrogate escapes, and no
    request could name it: :func:`normalize` refuses such a path)."""
    try:
        name.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def _readlink(part: str, dir_fd: int) -> str | None:
    """The target of the symlink ``part``, or None if it is not a symlink (any more)."""
    try:
        return os.readlink(part, dir_fd=dir_fd)
    except OSError:
        return None


def _os_error(exc: OSError, requested: str) -> HTTPError:
    """Map an ``open`` failure to the wire contract's statuses (as aiohttp does)."""
    if exc.errno in (errno.ENOENT, errno.ENOTDIR, errno.ENAMETOOLONG):
        return NotFound("no such file", paths=[requested])
    if exc.errno in (errno.EACCES, errno.EPERM):
        return Forbidden("permission denied", code="permission_denied", paths=[requested])
    if exc.errno in (errno.EMFILE, errno.ENFILE, errno.ENOMEM):
        return ServiceUnavailable("server is out of file descriptors; retry later", paths=[requested])
    return NotFound("file cannot be opened", paths=[requested])
