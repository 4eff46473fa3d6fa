"""``axon://host:port/dir/file``: an Axon server as a read-only fsspec filesystem, on aiohttp.

Paths are ``host:port/dir/file``, the server's address first (as a bucket is in ``s3://``), so
one filesystem reads from any number of servers and a listing's names round-trip as URLs.

- ``cat`` / ``cat_ranges`` / ``get`` of many paths send them in batches (``POST
  /api/stream-files``), each as large as the server's ``GET /api/limits`` allows, several in
  flight, and put the parts back in order (:mod:`.transfer`). A file the server refuses
  (missing, forbidden) is dropped from its batch, which is sent again without it; what happens
  to it then is fsspec's ``on_error``. An Axon server without ``/api/limits`` (its JSON 404)
  predates slices too: ranges go to it one ranged GET each, whole files still in batches sized
  by ``axon.limits.Limits``' defaults. A server whose ``/api/limits`` is not Axon's (an HTML
  page) is :class:`~.errors.NotAxonServer` from every call, never a missing file.
- ``cat_file`` and ``open`` read ``/files/<path>`` with ``Range``.
- ``info`` is a ``HEAD`` on the file, or the listing for a directory; ``ls`` (and with it
  ``find``, ``glob``, ``walk``, ``exists``, ``isdir``) reads the JSON listing at
  ``/browse/<dir>/``, which the server offers with ``axon serve --browse``. A server without it
  (its ``/api/limits`` says ``"browse": null``) gets :class:`~.errors.ListingOff` from every call
  that needs the listing, never an empty answer: ``ls``, ``find``, ``glob``, ``walk``, and
  ``info``, ``exists``, ``isdir`` of a path that is there but is not a file (a directory).
  A file needs no listing: ``info``, ``exists``, ``open`` and ``cat`` of one work either way.
- With the server's ``secret``, requests carry a bearer token minted from it, and ``sign``
  makes signed ``/files/`` URLs; a ``token`` alone (``axon sign --token``) also authenticates.
"""

from __future__ import annotations

import contextvars
import errno
import functools
import os
import time
import warnings
import weakref
from datetime import datetime, timezone
from email.utils import parsedate_to_datetime
from collections.abc import Callable
from typing import Any
from urllib.parse import quote

import aiohttp
import fsspec.asyn
from fsspec.asyn import AsyncFileSystem, sync
from fsspec.callbacks import DEFAULT_CALLBACK
from fsspec.implementations.http import HTTPFileSystem

from ..signing import sign_url
from .batches import PartSink
from .errors import ListingOff, error_body, error_for, listing_off, status_error
from .file import AxonAsyncFile, AxonFile, RangeReader
from .servers import ServerLimits, Servers
from .slices import EMPTY, Slice, plan
from .transfer import Collect, FileSink, SinkFactory, Transfer, Want, raise_first

__all__ = ["AxonFileSystem"]

# While ``_get`` runs fsspec's own path expansion, ``_get_file`` only collects what to fetch.
_collecting: contextvars.ContextVar[list | None] = contextvars.ContextVar("axon_fsspec_get", default=None)


class AxonFileSystem(AsyncFileSystem):
    """Read files from Axon servers: ``fsspec.filesystem("axon")``, ``fsspec.open("axon://host:port/a.bin")``.

    Options (``storage_options``): ``scheme`` ("http" or "https"), ``secret`` (the server's,
    to authenticate and to ``sign``), ``token`` (a bearer token instead of the secret),
    ``batch_concurrency`` (batches in flight at once, default 4), ``files_per_batch`` (at most
    this many items a batch, below the server's own limit), ``block_size`` and ``cache_type`` for
    ``open``, ``client_kwargs`` for ``aiohttp.ClientSession``, and fsspec's listing-cache options.
    """

    protocol = ("axon",)
    root_marker = ""
    sep = "/"

    def __init__(
        self,
        *,
        scheme: str = "http",
        secret: str | bytes | None = None,
        token: str | None = None,
        batch_concurrency: int = 4,
        files_per_batch: int | None = None,
        block_size: int | None = None,
        cache_type: str = "bytes",
        client_kwargs: dict | None = None,
        asynchronous: bool = False,
        loop: Any = None,
        **storage_options: Any,
    ) -> None:
        if scheme not in ("http", "https"):
            raise ValueError(f"scheme is 'http' or 'https', not {scheme!r}")
        if batch_concurrency < 1 or (files_per_batch is not None and files_per_batch < 1):
            raise ValueError("batch_concurrency and files_per_batch are at least 1")
        super().__init__(asynchronous=asynchronous, loop=loop, **storage_options)
        self.scheme = scheme
        self.secret = secret or None
        self.token = token
        self.batch_concurrency = batch_concurrency
        self.files_per_batch = files_per_batch
        self.block_size = block_size
        self.cache_type = cache_type
        self.client_kwargs = client_kwargs or {}
        self._session: aiohttp.ClientSession | None = None
        # How each server is addressed, authenticated and what it takes: handed to the transfers
        # and the open files, which need nothing else of the filesystem.
        self._servers = Servers(scheme, self.secret, token, self.set_session)

    # -- plumbing ------------------------------------------------------------------------------

    async def set_session(self) -> aiohttp.ClientSession:
        if self._session is None:
            # Bytes as sent: a file is served as it is, never re-encoded on the way.
            self._session = aiohttp.ClientSession(auto_decompress=False, **self.client_kwargs)
            _WITH_SESSIONS.add(self)
            if self.loop is fsspec.asyn.loop[0]:  # fsspec's own loop, run by its IO thread
                _LOOPS.add(self.loop)
            if not self.asynchronous:
                weakref.finalize(self, _close_session, os.getpid(), self.loop, self._session)
        return self._session

    def close(self) -> None:
        """Close the connections this filesystem keeps (its aiohttp session); the next request
        opens new ones. For a filesystem of one's own (``skip_instance_cache=True``): fsspec
        hands its cached instance to every caller with the same options."""
        session, self._session = self._session, None
        if session is not None and not session.closed:
            sync(self.loop, session.close)

    @classmethod
    def _strip_protocol(cls, path):
        # fsspec's own, without its generic steps for a plain string naming no protocol (they cost
        # half a microsecond per path, 10,000 times before a cat of 10,000 files sends anything):
        # for such a string fsspec's gives the path without trailing slashes.
        if type(path) is str and not path.startswith("axon:"):
            return path.rstrip("/")
        return super()._strip_protocol(path)

    def _split(self, path: str) -> tuple[str, str]:
        """``host:port/dir/file`` (or the full URL) -> ``("host:port", "dir/file")``."""
        return self._split_stripped(self._strip_protocol(path))

    def _split_stripped(self, path: str) -> tuple[str, str]:
        """:meth:`_split` of a path already through ``_strip_protocol``, as fsspec's ``_expand_path``
        returns them: a ``cat`` of many files strips each path once, not twice."""
        netloc, _, rel = path.partition("/")
        if not netloc or "@" in netloc:
            raise ValueError(f"an axon path starts with the server's host:port (axon://host:port/dir/file), not {path!r}")
        return netloc, rel

    # -- reading many: batches -----------------------------------------------------------------

    async def _cat(self, path, recursive=False, on_error="raise", **kwargs):
        paths = await self._expand_path(path, recursive=recursive)
        out = await self._read_many([Want(*self._split_stripped(p)) for p in paths])
        if on_error == "raise":
            raise_first(out)
        if len(paths) > 1 or isinstance(path, list) or paths[0] != self._strip_protocol(path):
            return {p: r for p, r in zip(paths, out) if on_error != "omit" or not isinstance(r, BaseException)}
        return out[0]

    async def _cat_ranges(self, paths, starts, ends, max_gap=None, on_error="return", one_batch=False, **kwargs):
        """fsspec's ``cat_ranges``; ``one_batch=True`` sends the list in as few batches as the
        server's limits allow, never spread over connections (a reader's batch is one request)."""
        if not isinstance(paths, list):
            raise TypeError("paths is a list")
        starts = starts if isinstance(starts, (list, tuple)) else [starts] * len(paths)
        ends = ends if isinstance(ends, (list, tuple)) else [ends] * len(paths)
        if len(starts) != len(paths) or len(ends) != len(paths):
            raise ValueError("paths, starts and ends differ in length")
        out = await self._read_many([Want(*self._split(p), s, e) for p, s, e in zip(paths, starts, ends)],
                                    spread=not one_batch)
        if on_error != "return":
            raise_first(out)
        return out

    async def _get(self, rpath, lpath, recursive=False, callback=DEFAULT_CALLBACK, maxdepth=None, **kwargs):
        # fsspec's _get expands globs and directories and chooses the local names; we keep all of
        # that and replace only the transfer: its calls to _get_file are collected, then batched.
        pairs: list[tuple[str, str]] = []
        collecting = _collecting.set(pairs)
        try:
            await super()._get(rpath, lpath, recursive=recursive, maxdepth=maxdepth, **kwargs)
        finally:
            _collecting.reset(collecting)
        callback.set_size(len(pairs))
        if pairs:
            raise_first(await self._get_many(pairs, callback))

    async def _get_file(self, rpath, lpath, callback=DEFAULT_CALLBACK, **kwargs):
        rpath = self._strip_protocol(rpath)
        if rpath in self.dircache or os.path.isdir(lpath):
            os.makedirs(lpath, exist_ok=True)  # a directory of the tree being copied
            return
        collected = _collecting.get()
        if collected is not None:
            collected.append((rpath, lpath))
            return
        raise_first(await self._get_many([(rpath, lpath)], callback))

    async def _read_many(self, wants: list[Want], spread: bool = True) -> list[Any]:
        """The bytes each want asks for, or the exception that stands for it, in order."""
        out: list[Any] = [None] * len(wants)

        def sink(index: int, chosen: Slice, first: int) -> PartSink:
            return Collect(out, index, chosen, first)

        def empty(index: int) -> None:
            out[index] = b""

        for index, error in enumerate(await self._transfer(wants, sink, empty, spread).run()):
            if error is not None:
                out[index] = error
        return out

    async def _get_many(self, pairs: list[tuple[str, str]], callback: Any) -> list[BaseException | None]:
        wants = [Want(*self._split_stripped(rpath)) for rpath, _ in pairs]  # stripped by _get_file

        def sink(index: int, chosen: Slice, first: int) -> PartSink:
            return FileSink(pairs[index][1], callback)

        def empty(index: int) -> None:  # pragma: no cover - a whole file is never empty before asking
            open(pairs[index][1], "wb").close()

        return await self._transfer(wants, sink, empty).run()

    def _transfer(self, wants: list[Want], sink: SinkFactory, empty: Callable[[int], None],
                  spread: bool = True) -> Transfer:
        """One call's reads, handed what they need of the filesystem and nothing else."""
        return Transfer(self._servers, wants, sink, empty, concurrency=self.batch_concurrency,
                        files_per_batch=self.files_per_batch, spread=spread)


    async def _cat_file(self, path, start=None, end=None, **kwargs):
        netloc, rel = self._split(path)
        chosen = plan(rel, start, end)
        if chosen is EMPTY:
            return b""
        data, first = await self._servers.ranged_get(netloc, chosen)
        return chosen.cut(data, first)

    def _open(self, path, mode="rb", block_size=None, autocommit=True, cache_type=None, cache_options=None,
              size=None, **kwargs):
        if mode != "rb":
            raise NotImplementedError("axon:// is read-only: open files with mode 'rb'")
        details = self.info(path)
        if details["type"] != "file":
            raise IsADirectoryError(errno.EISDIR, "not a file", path)
        path = self._strip_protocol(path)
        return AxonFile(
            self, path, self._range_reader(path), etag=details.get("ETag"), size=size or details["size"],
            block_size=block_size or self.block_size, cache_type=cache_type or self.cache_type,
            cache_options=cache_options, **kwargs,
        )

    async def open_async(self, path, mode="rb", **kwargs):
        if mode != "rb":
            raise NotImplementedError("axon:// is read-only: open files with mode 'rb'")
        details = await self._info(path)
        if details["type"] != "file":
            raise IsADirectoryError(errno.EISDIR, "not a file", path)
        path = self._strip_protocol(path)
        return AxonAsyncFile(self, path, self._range_reader(path), etag=details.get("ETag"), size=details["size"],
                             **kwargs)

    def _range_reader(self, path: str) -> RangeReader:
        """What an open file calls for ``path[start:end]`` (``If-Match: etag``): one ranged GET."""
        return functools.partial(self._servers.read_range, *self._split_stripped(path))

    # -- what is there: HEAD and the listing ---------------------------------------------------

    async def _info(self, path, **kwargs):
        path = self._strip_protocol(path)
        netloc, rel = self._split(path)
        directory = {"name": path, "size": 0, "type": "directory"}
        if not rel or path in self.dircache:
            return directory
        cached = self._ls_from_cache(path)  # FileNotFoundError if the parent's listing lacks it
        if cached:
            return cached[0]
        async with self._servers.request("HEAD", netloc, Servers.file_target(rel), headers=self._servers.headers(),
                                         allow_redirects=False) as response:
            if response.status == 200:
                return {"name": path, "size": int(response.headers["Content-Length"]), "type": "file",
                        "ETag": response.headers.get("ETag"), "Last-Modified": response.headers.get("Last-Modified")}
        # Not a file: a directory if the listing says so, else the server's reason for refusing it.
        try:
            self.dircache[path] = await self._list(netloc, rel, path)
        except ListingOff:
            refused, code = await self._refusal(netloc, rel, path)
            if code == "not_a_file":
                raise  # something is there that only the listing could describe: a directory
            raise refused from None
        except (FileNotFoundError, NotADirectoryError):
            raise (await self._refusal(netloc, rel, path))[0] from None
        return directory

    async def _refusal(self, netloc: str, rel: str, path: str) -> tuple[Exception, str | None]:
        """Why the server does not serve ``rel`` as a file: the exception, and the error's code.
        A GET, since the answer to a HEAD has no body to say it ("Forbidden" alone says nothing)."""
        headers = self._servers.headers(Range="bytes=0-0")  # a file made since the HEAD: one byte of it, not all
        async with self._servers.request("GET", netloc, Servers.file_target(rel), headers=headers,
                                         allow_redirects=False) as response:
            if response.status < 400:
                return FileNotFoundError(errno.ENOENT, "no such file (one appeared as it was looked up)", path), None
            error = await error_body(response)
        return error_for(response.status, str(error.get("message") or response.reason or ""), path), error.get("code")

    async def _exists(self, path, **kwargs):
        # A path the server will not serve (a hidden name, outside the root) is not there for us.
        # A directory on a server that lists none raises: it is there, but whether it holds
        # anything only the listing could say, and False would make a pipeline skip it silently.
        try:
            await self._info(path)
        except ListingOff:
            raise
        except (FileNotFoundError, PermissionError):
            return False
        return True

    async def _isdir(self, path):
        try:
            return (await self._info(path))["type"] == "directory"
        except ListingOff:
            raise  # as in _exists: False would be a guess
        except (FileNotFoundError, PermissionError):  # missing or refused is no directory; a server
            return False  # that is down or not Axon is an error, as in _exists

    async def _walk(self, path, maxdepth=None, on_error="omit", **kwargs):
        # fsspec's walk omits any OSError of a listing by default, which read "the server lists
        # nothing" or "the server failed" as an empty directory (so find and glob gave []). Only
        # a directory that is not there or not ours to read is omitted, as on a local disk.
        def omit(error: BaseException) -> None:
            if isinstance(error, ListingOff) or not isinstance(error, (FileNotFoundError, PermissionError)):
                raise error
            if callable(on_error):
                on_error(error)

        async for found in super()._walk(path, maxdepth, on_error="raise" if on_error == "raise" else omit, **kwargs):
            yield found

    async def _ls(self, path, detail=True, refresh=False, **kwargs):
        path = self._strip_protocol(path)
        netloc, rel = self._split(path)
        entries = None if refresh else self.dircache.get(path)
        if entries is None:
            try:
                entries = await self._list(netloc, rel, path)
            except (FileNotFoundError, NotADirectoryError, ListingOff):
                entries = [await self._info(path)]  # a file lists as itself, with the listing or not
                if entries[0]["type"] != "file":
                    raise
                return entries if detail else [path]
            self.dircache[path] = entries
        return entries if detail else [entry["name"] for entry in entries]

    async def _list(self, netloc: str, rel: str, path: str) -> list[dict]:
        if (await self._servers.limits(netloc)).browse is False:
            raise listing_off(netloc, path)  # without asking: its /api/limits said "browse": null
        target = "/browse/" + (quote(rel, safe="/") + "/" if rel else "")
        headers = self._servers.headers(Accept="application/json")
        async with self._servers.request("GET", netloc, target, headers=headers, allow_redirects=False) as response:
            if 300 <= response.status < 400:
                raise NotADirectoryError(errno.ENOTDIR, "not a directory", path)
            if response.status == 404:
                error = await error_body(response)
                if error.get("code") == "no_route":  # no /browse/ at all (a server that does not say)
                    raise listing_off(netloc, path)
                raise FileNotFoundError(errno.ENOENT, str(error.get("message") or "no such directory"), path)
            if response.status != 200:
                raise await status_error(response, path)
            listing = await response.json(content_type=None)
        if listing.get("truncated"):
            warnings.warn(f"the server lists only part of {path!r} (its listing limit)", stacklevel=2)
        return [
            {"name": f"{path}/{entry['name']}", "type": "directory" if entry["type"] == "dir" else "file",
             "size": entry.get("size", 0), "mtime": entry.get("mtime")}
            for entry in listing["entries"]
        ]

    def server_limits(self, netloc: str) -> ServerLimits:
        """What the server at ``host:port`` takes in a batch (its ``/api/limits``, asked once);
        :class:`~.errors.NotAxonServer` if it is not Axon."""
        return sync(self.loop, self._servers.limits, netloc)

    def known_limits(self) -> dict[str, ServerLimits]:
        """The servers' limits this filesystem has asked so far, by ``host:port`` (to hand to
        another process's filesystem with :meth:`learn_limits`)."""
        return self._servers.known_limits()

    def learn_limits(self, known: dict[str, ServerLimits]) -> None:
        """Take servers' limits asked elsewhere: this filesystem will not ask them again."""
        self._servers.learn_limits(known)

    def ukey(self, path):
        return self.info(path).get("ETag") or super().ukey(path)

    def modified(self, path):
        """When the file last changed, in UTC (DuckDB asks before it reads a file): the listing's
        mtime if the listing was read, else the ``Last-Modified`` of the HEAD."""
        details = self.info(path)
        if details.get("mtime") is not None:
            return datetime.fromtimestamp(details["mtime"], tz=timezone.utc)
        if details.get("Last-Modified"):
            return parsedate_to_datetime(details["Last-Modified"])
        raise NotImplementedError(f"the server gives no modification time for {path!r}: {details['type']}")

    # -- signed URLs -----------------------------------------------------------------------------

    def sign(self, path, expiration=100, **kwargs):
        """A ``/files/`` URL for ``path`` that the server accepts for ``expiration`` seconds."""
        if self.secret is None:
            raise NotImplementedError("signing needs the server's secret: AxonFileSystem(secret=...)")
        netloc, rel = self._split(path)
        url = f"{self.scheme}://{netloc}{Servers.file_target(rel)}"
        return sign_url(url, self.secret, int(time.time() + expiration))


#: Filesystems that opened a session, the event loops they run on, and, in a forked child (a
#: ``DataLoader`` worker), the sessions it inherited. A child shares its parent's sockets and the
#: epoll set of the parent's loop: an inherited session closed there (or any aiohttp connection
#: collected there, whose transport takes its descriptor off the loop) would take the parent's
#: kept connections off that set, and the parent's next read on one of them would wait for ever.
_WITH_SESSIONS: weakref.WeakSet = weakref.WeakSet()
_LOOPS: set = set()
_INHERITED: list = []


def _after_fork_in_child() -> None:
    """The child keeps what it inherited, untouched, for its life; its own reads open their own
    (fsspec gives a forked process a new loop). The parent's loops' epoll descriptors are made
    ``/dev/null`` in the child, so a cleanup there cannot reach the parent's epoll set (asyncio
    ignores the error a selector gets then). Only fsspec's own loop is: its thread is not in the
    child, so nothing there runs it; a loop of the user's may still run in the child."""
    for fs in list(_WITH_SESSIONS):
        if fs._session is not None:
            _INHERITED.append(fs._session)
            fs._session = None
        fs._servers.forget_asking()
    for loop in _LOOPS:
        selector = getattr(loop, "_selector", None)  # asyncio's selector loops (fsspec's own)
        if selector is not None and not loop.is_closed():
            devnull = os.open(os.devnull, os.O_RDONLY | os.O_CLOEXEC)
            os.dup2(devnull, selector.fileno(), inheritable=False)
            os.close(devnull)
    _LOOPS.clear()


os.register_at_fork(after_in_child=_after_fork_in_child)


def _close_session(pid: int, loop: Any, session: aiohttp.ClientSession) -> None:
    """fsspec's closing of a dropped filesystem's session, in the process that opened it only
    (see :data:`_INHERITED`)."""
    if os.getpid() == pid:
        HTTPFileSystem.close_session(loop, session)
