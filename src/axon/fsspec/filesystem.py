"""``axon://host:port/dir/file``: an Axon server as a read-only fsspec filesystem, on aiohttp.

Paths are ``host:port/dir/file``, the server's address first (as a bucket is in ``s3://``), so
one filesystem reads from any number of servers and a listing's names round-trip as URLs.

- ``cat`` / ``cat_ranges`` / ``get`` of many paths send them in batches (``POST
  /api/stream-files``), each as large as the server's ``GET /api/limits`` allows, several in
  flight, and put the parts back in order. A file the server refuses (missing, forbidden) is
  dropped from its batch, which is sent again without it; what happens to it then is fsspec's
  ``on_error``. A server without ``/api/limits`` predates slices too: ranges go to it one ranged
  GET each, whole files still in batches sized by ``axon.limits.Limits``' defaults.
- ``cat_file`` and ``open`` read ``/files/<path>`` with ``Range``.
- ``info`` is a ``HEAD`` on the file, or the listing for a directory; ``ls`` (and with it
  ``find``, ``glob``, ``walk``, ``exists``, ``isdir``) reads the JSON listing at
  ``/browse/<dir>/``, which the server offers with ``axon serve --browse``.
- With the server's ``secret``, requests carry a bearer token minted from it, and ``sign``
  makes signed ``/files/`` URLs; a ``token`` alone (``axon sign --token``) also authenticates.
"""

from __future__ import annotations

import asyncio
import contextvars
import errno
import json
import os
import time
import warnings
import weakref
from collections import defaultdict
from collections.abc import Callable, Coroutine, Iterable, Sequence
from dataclasses import dataclass
from typing import Any
from urllib.parse import quote

import aiohttp
import yarl
from fsspec.asyn import AsyncFileSystem
from fsspec.callbacks import DEFAULT_CALLBACK
from fsspec.implementations.http import HTTPFileSystem

from ..http.multipart_parser import MultipartError, parse_content_range
from ..limits import DEFAULT_LIMITS
from ..signing import mint_token, sign_url
from .batches import PartSink, body, pack, read_parts
from .file import AxonAsyncFile, AxonFile
from .slices import EMPTY, Slice, check_part, plan

__all__ = ["AxonFileSystem"]

TOKEN_LIFETIME = 3600  # seconds a bearer token minted from the secret is valid
TOKEN_MARGIN = 300  # mint a new one when less than this is left, so none expires in flight
MAX_ERROR_BODY = 1 << 20  # bytes of an error answer read at most
# Refusals a smaller batch avoids: a server with lower limits than it said, or a batch whose
# files add up to more bytes than it sends at once.
_TOO_LARGE = 413

# While ``_get`` runs fsspec's own path expansion, ``_get_file`` only collects what to fetch.
_collecting: contextvars.ContextVar[list | None] = contextvars.ContextVar("axon_fsspec_get", default=None)


@dataclass(frozen=True)
class ServerLimits:
    """What one server takes in a batch. ``slices``: it takes ``{"path", "offset", ...}`` items
    (it is a server with ``/api/limits``)."""

    max_files: int
    max_body_bytes: int
    slices: bool


@dataclass(frozen=True)
class _Want:
    netloc: str
    path: str  # relative to the server's root
    start: int | None = None
    end: int | None = None


@dataclass(frozen=True)
class _Refusal:
    """A batch the server refused: the whole batch's error, and the paths it names one by one."""

    status: int
    code: str
    message: str
    per_path: dict[str, dict]  # path -> {"status", "code", "message", "size"?}


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
        self._servers: dict[str, ServerLimits] = {}
        self._minted: tuple[str, float] | None = None

    # -- plumbing ------------------------------------------------------------------------------

    async def set_session(self) -> aiohttp.ClientSession:
        if self._session is None:
            # Bytes as sent: a file is served as it is, never re-encoded on the way.
            self._session = aiohttp.ClientSession(auto_decompress=False, **self.client_kwargs)
            if not self.asynchronous:
                weakref.finalize(self, HTTPFileSystem.close_session, self.loop, self._session)
        return self._session

    def _split(self, path: str) -> tuple[str, str]:
        """``host:port/dir/file`` (or the full URL) -> ``("host:port", "dir/file")``."""
        netloc, _, rel = self._strip_protocol(path).partition("/")
        if not netloc or "@" in netloc:
            raise ValueError(f"an axon path starts with the server's host:port (axon://host:port/dir/file), not {path!r}")
        return netloc, rel

    def _url(self, netloc: str, target: str) -> yarl.URL:
        # Encoded here, once: yarl must not re-encode (or decode) what quote() wrote.
        return yarl.URL(f"{self.scheme}://{netloc}{target}", encoded=True)

    def _file_target(self, rel: str) -> str:
        return "/files/" + quote(rel, safe="/")

    def _headers(self, **extra: str) -> dict[str, str]:
        headers = {"Accept-Encoding": "identity", **extra}
        token = self._bearer()
        if token is not None:
            headers["Authorization"] = f"Bearer {token}"
        return headers

    def _bearer(self) -> str | None:
        if self.secret is None:
            return self.token
        now = time.time()
        if self._minted is None or self._minted[1] - now < TOKEN_MARGIN:
            expires = int(now) + TOKEN_LIFETIME
            self._minted = (mint_token(self.secret, expires), expires)
        return self._minted[0]

    async def _server(self, netloc: str) -> ServerLimits:
        known = self._servers.get(netloc)
        if known is not None:
            return known
        session = await self.set_session()
        async with session.get(self._url(netloc, "/api/limits"), headers=self._headers()) as response:
            if response.status == 404:  # a server from before /api/limits (and slices)
                known = ServerLimits(DEFAULT_LIMITS.max_files, DEFAULT_LIMITS.max_body_bytes, slices=False)
            elif response.status == 200:
                data = await response.json(content_type=None)
                known = ServerLimits(int(data["max_files"]), int(data["max_body_bytes"]), slices=True)
            else:
                raise await _status_error(response, f"{netloc}/api/limits")
        self._servers[netloc] = known
        return known

    # -- reading many: batches -----------------------------------------------------------------

    async def _cat(self, path, recursive=False, on_error="raise", **kwargs):
        paths = await self._expand_path(path, recursive=recursive)
        out = await self._read_many([_Want(*self._split(p)) for p in paths])
        if on_error == "raise":
            _raise_first(out)
        if len(paths) > 1 or isinstance(path, list) or paths[0] != self._strip_protocol(path):
            return {p: r for p, r in zip(paths, out) if on_error != "omit" or not isinstance(r, BaseException)}
        return out[0]

    async def _cat_ranges(self, paths, starts, ends, max_gap=None, on_error="return", **kwargs):
        if not isinstance(paths, list):
            raise TypeError("paths is a list")
        starts = starts if isinstance(starts, (list, tuple)) else [starts] * len(paths)
        ends = ends if isinstance(ends, (list, tuple)) else [ends] * len(paths)
        if len(starts) != len(paths) or len(ends) != len(paths):
            raise ValueError("paths, starts and ends differ in length")
        out = await self._read_many([_Want(*self._split(p), s, e) for p, s, e in zip(paths, starts, ends)])
        if on_error != "return":
            _raise_first(out)
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
            _raise_first(await self._get_many(pairs, callback))

    async def _get_file(self, rpath, lpath, callback=DEFAULT_CALLBACK, **kwargs):
        rpath = self._strip_protocol(rpath)
        if rpath in self.dircache or os.path.isdir(lpath):
            os.makedirs(lpath, exist_ok=True)  # a directory of the tree being copied
            return
        collected = _collecting.get()
        if collected is not None:
            collected.append((rpath, lpath))
            return
        _raise_first(await self._get_many([(rpath, lpath)], callback))

    async def _read_many(self, wants: list[_Want]) -> list[Any]:
        """The bytes each want asks for, or the exception that stands for it, in order."""
        out: list[Any] = [None] * len(wants)

        def sink(index: int, chosen: Slice, first: int) -> PartSink:
            return _Collect(out, index, chosen, first)

        def empty(index: int) -> None:
            out[index] = b""

        for index, error in enumerate(await self._fetch(wants, sink, empty)):
            if error is not None:
                out[index] = error
        return out

    async def _get_many(self, pairs: list[tuple[str, str]], callback: Any) -> list[BaseException | None]:
        wants = [_Want(*self._split(rpath)) for rpath, _ in pairs]

        def sink(index: int, chosen: Slice, first: int) -> PartSink:
            return _FileSink(pairs[index][1], callback)

        def empty(index: int) -> None:  # pragma: no cover - a whole file is never empty before asking
            open(pairs[index][1], "wb").close()

        return await self._fetch(wants, sink, empty)

    async def _fetch(
        self,
        wants: list[_Want],
        sink: Callable[[int, Slice, int], PartSink],
        empty: Callable[[int], None],
    ) -> list[BaseException | None]:
        """Every want from its server: ``sink`` gets the parts, ``empty`` the ranges that hold no
        bytes whatever the file; the result is each want's exception, or None."""
        errors: list[BaseException | None] = [None] * len(wants)
        by_server: dict[str, list[int]] = defaultdict(list)
        for index, want in enumerate(wants):
            by_server[want.netloc].append(index)
        slots = asyncio.Semaphore(self.batch_concurrency)
        await _all(self._fetch_from(netloc, indices, wants, sink, empty, errors, slots)
                   for netloc, indices in by_server.items())
        return errors

    async def _fetch_from(self, netloc, indices, wants, sink, empty, errors, slots) -> None:
        server = await self._server(netloc)
        batched: list[tuple[int, Slice]] = []
        ranged: list[tuple[int, Slice]] = []
        for index in indices:
            want = wants[index]
            chosen = plan(want.path, want.start, want.end)
            if chosen is EMPTY:
                empty(index)
            elif isinstance(chosen.item, dict) and not server.slices:
                ranged.append((index, chosen))
            else:
                batched.append((index, chosen))
        per_batch = min(server.max_files, self.files_per_batch or server.max_files)
        groups = pack([chosen.item for _, chosen in batched], per_batch, server.max_body_bytes)
        await _all([
            *(self._run_batch(netloc, [batched[k] for k in group], wants, sink, empty, errors, slots) for group in groups),
            *(self._run_ranged(netloc, index, chosen, sink, errors, slots) for index, chosen in ranged),
        ])

    async def _run_ranged(self, netloc, index, chosen, sink, errors, slots) -> None:
        """One range from a server that takes no slices in a batch: a ranged GET."""
        async with slots:
            try:
                data, first = await self._ranged_get(netloc, chosen)
            except OSError as exc:
                errors[index] = exc
                return
        part = sink(index, chosen, first)
        part.write(data)
        part.finish()

    async def _run_batch(self, netloc, entries, wants, sink, empty, errors, slots) -> None:
        """One batch, sent again (smaller, or without the paths refused) until it is served."""
        queue = [entries]
        sized: set[str] = set()  # paths whose size a 416 told: a second 416 for one is an error
        while queue:
            entries = queue.pop()
            async with slots:
                refusal = await self._post(netloc, entries, sink)
            if refusal is None:
                continue
            if refusal.status == _TOO_LARGE and len(entries) > 1:
                half = len(entries) // 2
                queue += [entries[half:], entries[:half]]
                continue
            if refusal.per_path:
                entries = self._settle(netloc, entries, refusal, wants, sized, empty, errors)
                sized.update(p for p, f in refusal.per_path.items() if f["status"] == 416)
            else:
                for index, _ in entries:
                    errors[index] = _error(refusal.status, f"{refusal.code}: {refusal.message}", netloc)
                entries = []
            if entries:
                queue.append(entries)

    def _settle(self, netloc, entries, refusal, wants, sized, empty, errors):
        """The entries of a refused batch worth sending again: those it did not name; and the
        ranges a 416 named, planned again with the file sizes it gave. The others get their error."""
        kept = []
        for index, chosen in entries:
            path = _item_path(chosen.item)
            failure = refusal.per_path.get(path)
            if failure is None:
                kept.append((index, chosen))
                continue
            size = failure.get("size")
            if failure["status"] != 416 or not isinstance(size, int) or path in sized:
                errors[index] = _error(failure["status"], str(failure.get("message", "")), f"{netloc}/{path}")
                continue
            want = wants[index]
            again = plan(want.path, want.start, want.end, size)
            if again is EMPTY:
                empty(index)
            else:
                kept.append((index, again))
        return kept

    async def _post(self, netloc: str, entries: list[tuple[int, Slice]], sink) -> _Refusal | None:
        items = [chosen.item for _, chosen in entries]
        paths = [_item_path(item) for item in items]
        session = await self.set_session()
        headers = self._headers(**{"Content-Type": "application/json", "Accept": "multipart/mixed"})
        async with session.post(self._url(netloc, "/api/stream-files"), data=body(items), headers=headers) as response:
            if response.status != 200:
                return await _refusal(response)

            def open_sink(k: int, first: int) -> PartSink:
                index, chosen = entries[k]
                return sink(index, chosen, first)

            try:
                await read_parts(response.content.iter_any(), response.headers.get("Content-Type", ""),
                                 paths, items, open_sink)
            except MultipartError as exc:
                raise OSError(f"the batch from {netloc} does not answer what was asked: {exc}") from exc
            except aiohttp.ClientPayloadError as exc:  # cut short: fsspec's callers expect an OSError
                raise OSError(f"the batch from {netloc} was cut short: {exc}") from exc
        return None

    # -- reading one: /files/ with Range -------------------------------------------------------

    async def _cat_file(self, path, start=None, end=None, **kwargs):
        netloc, rel = self._split(path)
        chosen = plan(rel, start, end)
        if chosen is EMPTY:
            return b""
        data, first = await self._ranged_get(netloc, chosen)
        return chosen.cut(data, first)

    async def _read_range(self, path: str, start: int, end: int, etag: str | None) -> bytes:
        """``file[start:end]`` for :class:`AxonFile`, refused if the file is no longer ``etag``."""
        netloc, rel = self._split(path)
        if end <= start:
            return b""
        extra = {} if etag is None else {"If-Match": etag}
        data, _ = await self._ranged_get(netloc, Slice({"path": rel, "offset": start, "length": end - start}), extra)
        return data

    async def _ranged_get(self, netloc: str, chosen: Slice, extra: dict[str, str] | None = None) -> tuple[bytes, int]:
        """The bytes a GET on ``/files/`` answers for one slice, checked; and the first one's offset."""
        item = chosen.item
        headers = self._headers(**(extra or {}))
        if isinstance(item, dict):
            offset, length = item["offset"], item.get("length")
            last = "" if offset < 0 or length is None else str(offset + length - 1)
            headers["Range"] = f"bytes={offset}-{last}" if offset >= 0 else f"bytes={offset}"
        rel = _item_path(item)
        session = await self.set_session()
        async with session.get(self._url(netloc, self._file_target(rel)), headers=headers) as response:
            if response.status == 416:  # a range past the end holds nothing, as a Python slice
                return b"", 0
            if response.status == 412:
                raise OSError(errno.ESTALE, "the file changed while it was read", f"{netloc}/{rel}")
            if response.status not in (200, 206):
                raise await _status_error(response, f"{netloc}/{rel}")
            data = await response.read()
            value = response.headers.get("Content-Range") if response.status == 206 else None
        try:
            content_range = None if value is None else parse_content_range(value)
        except ValueError as exc:
            raise OSError(f"{netloc}/{rel}: {exc}") from None
        why = check_part(item, content_range)
        if why is not None:
            raise OSError(f"{netloc}/{rel}: {why}")
        return data, 0 if content_range is None else content_range.first

    def _open(self, path, mode="rb", block_size=None, autocommit=True, cache_type=None, cache_options=None,
              size=None, **kwargs):
        if mode != "rb":
            raise NotImplementedError("axon:// is read-only: open files with mode 'rb'")
        details = self.info(path)
        if details["type"] != "file":
            raise IsADirectoryError(errno.EISDIR, "not a file", path)
        return AxonFile(
            self, self._strip_protocol(path), etag=details.get("ETag"), size=size or details["size"],
            block_size=block_size or self.block_size, cache_type=cache_type or self.cache_type,
            cache_options=cache_options, **kwargs,
        )

    async def open_async(self, path, mode="rb", **kwargs):
        if mode != "rb":
            raise NotImplementedError("axon:// is read-only: open files with mode 'rb'")
        details = await self._info(path)
        if details["type"] != "file":
            raise IsADirectoryError(errno.EISDIR, "not a file", path)
        return AxonAsyncFile(self, self._strip_protocol(path), etag=details.get("ETag"), size=details["size"], **kwargs)

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
        session = await self.set_session()
        async with session.head(self._url(netloc, self._file_target(rel)), headers=self._headers(),
                                allow_redirects=False) as response:
            if response.status == 200:
                return {"name": path, "size": int(response.headers["Content-Length"]), "type": "file",
                        "ETag": response.headers.get("ETag"), "Last-Modified": response.headers.get("Last-Modified")}
            refused = _error(response.status, response.reason or "", path)
        try:
            self.dircache[path] = await self._list(netloc, rel, path)
        except (FileNotFoundError, NotADirectoryError):
            raise refused from None
        return directory

    async def _exists(self, path, **kwargs):
        # A path the server will not serve (a hidden name, outside the root) is not there for us.
        try:
            await self._info(path)
        except (FileNotFoundError, PermissionError):
            return False
        return True

    async def _ls(self, path, detail=True, refresh=False, **kwargs):
        path = self._strip_protocol(path)
        netloc, rel = self._split(path)
        entries = None if refresh else self.dircache.get(path)
        if entries is None:
            try:
                entries = await self._list(netloc, rel, path)
            except (FileNotFoundError, NotADirectoryError):
                entries = [await self._info(path)]  # a file lists as itself
                if entries[0]["type"] != "file":
                    raise
                return entries if detail else [path]
            self.dircache[path] = entries
        return entries if detail else [entry["name"] for entry in entries]

    async def _list(self, netloc: str, rel: str, path: str) -> list[dict]:
        target = "/browse/" + (quote(rel, safe="/") + "/" if rel else "")
        session = await self.set_session()
        headers = self._headers(Accept="application/json")
        async with session.get(self._url(netloc, target), headers=headers, allow_redirects=False) as response:
            if 300 <= response.status < 400:
                raise NotADirectoryError(errno.ENOTDIR, "not a directory", path)
            if response.status == 404:
                raise FileNotFoundError(errno.ENOENT, "no such directory (or the server lists none: axon serve --browse)", path)
            if response.status != 200:
                raise await _status_error(response, path)
            listing = await response.json(content_type=None)
        if listing.get("truncated"):
            warnings.warn(f"the server lists only part of {path!r} (its listing limit)", stacklevel=2)
        return [
            {"name": f"{path}/{entry['name']}", "type": "directory" if entry["type"] == "dir" else "file",
             "size": entry.get("size", 0), "mtime": entry.get("mtime")}
            for entry in listing["entries"]
        ]

    def ukey(self, path):
        return self.info(path).get("ETag") or super().ukey(path)

    # -- signed URLs -----------------------------------------------------------------------------

    def sign(self, path, expiration=100, **kwargs):
        """A ``/files/`` URL for ``path`` that the server accepts for ``expiration`` seconds."""
        if self.secret is None:
            raise NotImplementedError("signing needs the server's secret: AxonFileSystem(secret=...)")
        netloc, rel = self._split(path)
        url = f"{self.scheme}://{netloc}{self._file_target(rel)}"
        return sign_url(url, self.secret, int(time.time() + expiration))


class _Collect:
    """A part kept in memory, cut to the range asked (``cat``)."""

    __slots__ = ("chunks", "chosen", "first", "index", "out")

    def __init__(self, out: list, index: int, chosen: Slice, first: int) -> None:
        self.out, self.index, self.chosen, self.first = out, index, chosen, first
        self.chunks: list[bytes] = []

    def write(self, data: bytes) -> None:
        self.chunks.append(data)

    def finish(self) -> None:
        self.out[self.index] = self.chosen.cut(b"".join(self.chunks), self.first)

    def abort(self) -> None:
        self.chunks = []


class _FileSink:
    """A part written to a local file as it arrives (``get``); removed if the part is cut short."""

    def __init__(self, lpath: str, callback: Any) -> None:
        self.lpath, self.callback = lpath, callback
        self.file = open(lpath, "wb")

    def write(self, data: bytes) -> None:
        self.file.write(data)

    def finish(self) -> None:
        self.file.close()
        self.callback.relative_update(1)

    def abort(self) -> None:
        self.file.close()
        os.unlink(self.lpath)


async def _all(coroutines: Iterable[Coroutine]) -> None:
    """Run them together; if one fails, the others are cancelled before its error is raised, so
    no batch goes on writing files or filling results for a call that has already failed."""
    tasks = [asyncio.ensure_future(c) for c in coroutines]
    try:
        await asyncio.gather(*tasks)
    except BaseException:
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        raise


def _item_path(item: str | dict) -> str:
    return item if isinstance(item, str) else item["path"]


def _raise_first(results: Sequence[Any]) -> None:
    for result in results:
        if isinstance(result, BaseException):
            raise result


def _error(status: int, message: str, path: str) -> OSError:
    """The exception fsspec's callers expect for an HTTP status about ``path``."""
    if status == 404:
        return FileNotFoundError(errno.ENOENT, message, path)
    if status in (401, 403):
        return PermissionError(errno.EACCES, message, path)
    return OSError(f"{path}: the server answered {status}: {message}")


async def _error_body(response: aiohttp.ClientResponse) -> dict:
    raw = await response.content.read(MAX_ERROR_BODY)
    try:
        error = json.loads(raw)["error"]
        return error if isinstance(error, dict) else {}
    except (ValueError, KeyError, TypeError):
        return {"message": raw[:200].decode("utf-8", "replace")}


async def _status_error(response: aiohttp.ClientResponse, path: str) -> OSError:
    error = await _error_body(response)
    return _error(response.status, error.get("message") or response.reason or "", path)


async def _refusal(response: aiohttp.ClientResponse) -> _Refusal:
    error = await _error_body(response)
    status = response.status
    per_path: dict[str, dict] = {}
    for detail in error.get("details") or ():
        if isinstance(detail, dict) and isinstance(detail.get("path"), str):
            per_path[detail["path"]] = {"status": status, **detail}
    if not per_path:  # one refused path: the error itself names it
        for path in error.get("paths") or ():
            if isinstance(path, str):
                per_path[path] = {"status": status, "code": error.get("code"), "message": error.get("message", "")}
    return _Refusal(status, str(error.get("code", "")), str(error.get("message", response.reason or "")), per_path)
