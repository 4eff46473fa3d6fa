"""FileStore: turns a requested path into an open, checked, regular file.

It is the local :class:`~axon.storage.Source`, and :class:`OpenFile` its :class:`~axon.storage.File`.
A FileStore is a :class:`~.jail.RootJail`, which opens a path beneath the root by the rules that
keep it safe (openat2, else the portable walk); here the descriptor is checked with ``fstat``
(only regular files are served), named by its facts, typed by its suffix and its CRC-32 kept, and
a directory is listed by the same rules.
"""

from __future__ import annotations

import mimetypes
import os
import stat

from ..errors import FileChanged, Forbidden, HTTPError, NotFound
from . import Entry
from .batch_key import derive_key
from .crc_cache import CrcCache, Version
from .file_cache import CachedDescriptor, Token
from .jail import RootJail, hidden, normalize, os_error
from ..http.batch_identity import KeptSignature
from ..http.segments import FileSlice, Segment
from ..untracked import untracked

_new_slice = tuple.__new__
#: Longer requested paths are opened without the open-file cache: its keys stay small.
MAX_CACHED_PATH = 1024


class OpenFile:
    """A checked regular file inside the root, as it was when opened. Whoever holds it closes it.

    Its descriptor is its own, or shared with other requests through the open-file cache
    (:mod:`axon.storage.shared_files`); either way ``close()`` is what gives it back. Read it with
    explicit offsets (``pread``, ``sendfile``): a shared descriptor's file position is shared too.
    A small file the cache trusts has no descriptor at all (``fd`` -1): only its ``data``.
    """

    __slots__ = ("fd", "path", "name", "device", "inode", "size", "mtime_ns", "ctime_ns", "content_type", "data",
                 "crc", "_shared", "_version")

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
        crc: int | None = None,  # the CRC-32 of ``data``, computed when they were read
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
        self.crc = crc
        self._shared = shared
        self._version: tuple[int, int, int, int, int] | None = None  # the host's, where the facts above are not

    #: The file's batch Signature when storage keeps one for its version (a TrustedFile's); None:
    #: the planner builds it (:func:`axon.plan.batch.file_signature`).
    signature = None

    def __repr__(self) -> str:
        return f"OpenFile(fd={self.fd}, path={self.path!r}, size={self.size})"

    @property
    def version(self) -> tuple[int, ...]:
        """An opaque token of the file as opened on this host: equal tokens are the same bytes,
        whatever the facts above say of a portable identity. A :class:`~.crc_cache.Version`'s facts
        in its order, as a plain tuple: made per file of every remembered head and only compared,
        where a tuple costs a fraction of a NamedTuple to build. Bytes in memory add their CRC-32
        (the open-file cache's :data:`~.file_cache.Token`): bytes rewritten under the same stat
        (through a shared ``mmap``) are another version."""
        facts = self._version or (self.device, self.inode, self.size, self.mtime_ns, self.ctime_ns)
        return facts if self.crc is None else (*facts, self.crc)

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


class TrustedFile(OpenFile):
    """A small file the open-file cache trusts (its bytes in memory, the kernel watching it for
    changes): one object per file version, made when the cache came to trust it and given to
    every request that opens the path while it stands. It has no descriptor (``fd`` -1), so
    there is nothing to give back: ``close()`` does nothing. Read it, never change it."""

    # ``version`` a plain field: a remembered head's check reads it for every file it sends.
    # ``signature`` made here, once: a batch takes it as it is (see KeptSignature).
    # ``answer``: what a server made last of this version alone, opaque here (the native
    # server's remembered head and its answer): it lives exactly as long as the version does.
    __slots__ = ("version", "signature", "answer")

    def __init__(self, path: str, version: Token, data: bytes, name: str, content_type: str) -> None:
        facts = version[:5]
        super().__init__(-1, path, name, *facts, content_type, None, data, version[5])
        self.version = version  # type: ignore[misc]
        self.signature = untracked(_new_slice(KeptSignature, (path, content_type, *facts, name, None)))  # type: ignore[misc]
        self.answer: object = None
        untracked(self)  # kept as long as the version is, by the cache and by heads: see axon.untracked

    def close(self) -> None:
        pass


def portable(f: OpenFile) -> None:
    """Name ``f`` to clients by the facts every copy of it shares (a store built with
    ``portable_identity``): its host's facts kept as its version, inode and device 0, its ctime
    its mtime."""
    f._version = (f.device, f.inode, f.size, f.mtime_ns, f.ctime_ns)
    f.inode = f.device = 0
    f.ctime_ns = f.mtime_ns


class FileStore(RootJail):
    """Opens requested paths under one root directory, and only there."""

    # The Source members a local directory has no use for: opening never waits on the network,
    # each path of a batch is opened alone, and every segment is sent as it is.
    blocking = False
    for_batch = None
    body_stream = None
    health = None
    ready_files = None

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
        super().__init__(root, allow_hidden=allow_hidden, openat2=openat2)
        self.portable_identity = portable_identity
        self._types: dict[str, str] = {}
        if not mimetypes.inited:  # init() rereads the system's tables and resets any additions
            mimetypes.init()
        self.crcs = CrcCache()

    def batch_key(self, secret: str | bytes | None) -> bytes:
        """The key of batch identities: ``secret``'s, else this host's and this root's
        (:mod:`.batch_key`)."""
        return derive_key(secret, self.root)

    def open(self, requested: str) -> OpenFile:
        """Open ``requested`` (already decoded once) as a regular file inside the root. Axon's own
        server shares descriptors between requests through :class:`~.shared_files.SharedFiles`."""
        f = self.open_here(requested)
        if self.portable_identity:
            portable(f)
        return f

    def crc32s(self, files: list[OpenFile], read: bool = True) -> list[int | None]:
        """The CRC-32 of each of ``files`` as opened: that of the bytes in memory where a file
        carries them (what its entry will hold, whatever the file on disk holds now); else kept
        per file version (:mod:`axon.storage.crc_cache`), read by offset when not known (with
        ``read`` false, None instead of reading); :class:`~axon.errors.FileChanged`, naming the
        requested path, if one changed. Pass a file once: one not known is read as often as it
        is given."""
        own = [f.crc for f in files]
        if None not in own:  # every file's bytes in memory (the open-file cache's): nothing to look up
            return own
        if any(crc is not None for crc in own):
            rest = [f for f in files if f.crc is None]
            found = iter(self.crc32s(rest, read))
            return [next(found) if crc is None else crc for crc in own]
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

    def open_here(self, requested: str) -> OpenFile:
        """Open ``requested`` as :meth:`open` does, its facts this host's own (a portable identity
        not yet put on them): for the open-file cache, which keys descriptors by them."""
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
            raise os_error(exc, requested) from None
        finally:
            os.close(fd)
        return entries, truncated

    def _entry(self, item: os.DirEntry[str], parts: list[str]) -> Entry | None:
        """``item`` as a listed entry, or None if it is not to be shown (see :meth:`list_dir`)."""
        name = item.name
        if (hidden(name) and not self.allow_hidden) or "\\" in name or not _is_utf8(name):
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
