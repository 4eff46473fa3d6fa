"""Objects of an S3-compatible store (S3, SeaweedFS, MinIO; GCS and Azure by their URLs) served
as files: the object-store :class:`~axon.storage.Source`.

``App("s3://bucket/prefix")`` or ``axon serve s3://bucket/prefix``: a request's path is a key
under the prefix, jailed as a path is under a local root (the same :func:`~.jail.normalize`:
no ``..`` above the prefix, no absolute path, no dot-named component unless hidden files are
allowed). It uses obstore (Rust's ``object_store``; the ``axon-stream[s3]`` extra); the library
core never imports this module unless a source URL asks for it.

Opening an object asks for its size, ETag and modification time before any status line, so a
missing key is a JSON 404 naming it and every ``Content-Length`` is exact. It is a ranged ``GET``
of the first :data:`OPEN_READ` bytes rather than a ``HEAD``: the answer carries the same facts,
and a small object arrives whole with them (one request to the store, not two), a larger one's
first bytes, sent from memory (a batch holds at most the source's ``prefetch_bytes`` of them). A
batch's objects are opened concurrently (:meth:`ObjectSource.for_batch`, at most ``concurrency``
at a time). Its bytes are fetched later, with ``If-Match`` on that ETag, by
:mod:`.object_stream`: an object replaced since it was opened fails its ``GET`` and the
connection is cut, never serving another version's bytes.

A batch of many keys is listed first (:mod:`.object_listing`: a page of the store's listing names
a thousand keys' sizes and ETags in one request; :mod:`.object_batch`). A listed object larger
than ``OPEN_READ`` is then not opened at all; a small one whose bytes are kept for the listed ETag
(:mod:`.object_cache`, ``cache_bytes``) is sent from memory; any other is opened as above, which
keeps its bytes for the next batch. With ``listing_valid`` seconds, a listing's entries stand for
that long for the objects whose bytes are kept (:class:`~.object_listing.ListedKeys`).

obstore's calls run on one event loop per process, in a thread of its own: the synchronous
callers (a handler in a thread, a WSGI body) wait on it, async runtimes await it, and no
runtime's loop ever runs a request to the store (nor waits for one: there :meth:`ObjectSource.run`
raises :class:`~axon.errors.WouldBlock`, and the App runs the handler again in its thread pool). It is started lazily in the process that
uses it (``axon serve`` forks its workers after building the App: a loop or connections made
before the fork would be shared, broken, by every worker).

A store that refuses the server's credentials, or has no such bucket, is a setting to fix, not
an outage: :meth:`ObjectSource.check` asks at start; a refusal later is a 502 or a 403, never
the 503 of a store that did not answer (:mod:`.object_store`). Each request's outcome is noted
(:mod:`.object_health`): ``/api/health`` says what the store last did.
"""

from __future__ import annotations

import asyncio
import logging
import os
import threading
import time
import zlib
from collections import OrderedDict
from typing import Any, Coroutine, TypeVar

import obstore
from obstore.exceptions import (
    NotFoundError, NotModifiedError, PermissionDeniedError, PreconditionError, UnauthenticatedError,
)

from ..config import ObjectStoreEnvironment, environment, must_be, object_store_environment
from ..errors import FileChanged, Forbidden, HTTPError, NotFound, WouldBlock
from ..http.segments import ObjectSlice, Segment
from . import Entry
from .batch_key import derive_url_key
from .jail import hidden, normalize
from .local import FileStore
from .object_batch import BatchSource
from .object_cache import ObjectCache
from .object_disk import DiskTier
from .object_file import ObjectFile
# OPEN_READ: bytes of an object read when it is opened, a smaller object then held whole.
from .object_tiered import FILL_PIECE, OPEN_READ, Lead, TieredSource, keep_on_disk
from .object_health import StoreHealth
from .object_listing import ListedKeys
from .object_store import NoCredentials, StoreMisconfigured  # noqa: F401 - raised from here, named here
from .object_store import connect, refused, require_credentials, unavailable
from .object_store import check as check_store

T = TypeVar("T")
log = logging.getLogger("axon.storage")

#: Opening requests in flight at once for one batch: enough to hide each one's round trip, few
#: enough that one batch of thousands does not flood the store.
CONCURRENCY = 64
#: Checksums kept, by (key, ETag): a zip of the same objects is read once for its CRC-32s.
CRC_CACHE = 65536
#: The key a health check opens: one that is not there (a 404 is the store answering).
HEALTH_KEY = "axon-health-check"


class ObjectSource(BatchSource, TieredSource):
    """Serves the objects under ``url`` (``s3://bucket/prefix``; ``gs://``, ``az://`` as obstore
    reads them). Connection settings come from ``env`` (default: the ``AWS_*`` variables,
    :func:`~axon.config.object_store_environment`) and the arguments. ``timeout`` (default
    ``$AXON_STORE_TIMEOUT``, else 30) is the seconds one request to the store may take, its
    retries included, before the object counts as unavailable: a 503 before the status line,
    a cut connection after it. ``cache_bytes`` (default ``$AXON_OBJECT_CACHE`` MiB, else 64
    MiB; 0 for none) bounds the memory each process keeps small objects' bytes in
    (:mod:`.object_cache`); ``listing`` false (default: not ``$AXON_NO_OBJECT_LISTING``) opens
    every key of a batch one by one; ``listing_valid`` (default ``$AXON_OBJECT_LISTING_VALID``,
    else 0) is the seconds a listing's entries are trusted for objects whose bytes are kept, so
    that a batch of them lists nothing (an object may then be served that much older than the
    store's current version; 0: every batch lists). ``disk_cache`` (default ``$AXON_OBJECT_DISK_CACHE``; None for
    none) is a directory where objects are kept as files, shared by the node's workers, at most
    ``disk_size`` bytes on disk (default ``$AXON_OBJECT_DISK_SIZE``, else 10 GiB;
    :mod:`.object_disk`)."""

    #: Opening that must ask the store is never done on an event loop's thread: there :meth:`run`
    #: raises WouldBlock and the App runs the handler again in its thread pool. So a batch (or a
    #: key) that this process holds within the listing's window is answered on the server's loop,
    #: as local files are, and everything else in the pool.
    blocking = False
    ready_files = None  # each batch's objects are opened together (for_batch), none kept ready
    # The local store's suffix -> media type rule, shared: an object is typed by its key's suffix.
    content_type = FileStore.content_type

    def __init__(
        self, url: str, *, allow_hidden: bool = False, env: ObjectStoreEnvironment | None = None,
        timeout: float | None = None, concurrency: int = CONCURRENCY, prefetch_bytes: int | None = None,
        cache_bytes: int | None = None, listing: bool | None = None, store: Any = None, check: bool = True,
        disk_cache: str | None = None, disk_size: int | None = None, listing_valid: float | None = None,
    ) -> None:
        from .object_stream import PREFETCH_BYTES

        scheme, sep, rest = url.partition("://")
        if not sep or not rest.split("/", 1)[0]:
            raise ValueError(f"an object store URL names a bucket: s3://bucket/prefix, not {url!r}")
        given = environment()
        timeout = given.store_timeout if timeout is None else timeout
        cache_bytes = given.object_cache_mib << 20 if cache_bytes is None else cache_bytes
        listing = given.object_listing if listing is None else listing
        listing_valid = given.object_listing_valid if listing_valid is None else listing_valid
        disk_cache = given.object_disk_cache if disk_cache is None else disk_cache
        disk_size = given.object_disk_size if disk_size is None else disk_size
        if timeout <= 0 or concurrency < 1 or cache_bytes < 0 or must_be(listing_valid) is not None:
            raise ValueError("timeout must be positive, concurrency at least 1, cache_bytes and listing_valid "
                             "not negative")
        self.root = url.rstrip("/")
        self.scheme = scheme.lower()
        self.allow_hidden = allow_hidden
        self.timeout = timeout
        self.concurrency = concurrency
        self.prefetch_bytes = PREFETCH_BYTES if prefetch_bytes is None else prefetch_bytes
        self.cache_bytes = cache_bytes
        self.listing = listing
        self.listing_valid = listing_valid
        #: The node's disk tier (made here, before the workers fork: its start scan runs once).
        self.tier = DiskTier(disk_cache, disk_size, wait=timeout) if disk_cache else None
        self._cache: ObjectCache | None = None  # made per process, with the loop
        self._listings = ListedKeys(listing_valid)  # likewise
        self._openings = {}  # likewise (object_batch)
        self._listing_off_until = 0.0
        self._made = {}  # a listing entry's facts, made once (object_batch)
        self._env = env if env is not None else object_store_environment()
        if store is None:
            require_credentials(self.root, self.scheme, self._env)
        self._given_store = store
        self._store: Any = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._pid = -1
        self._lock = threading.Lock()
        self._types: dict[str, str] = {}
        self._crcs: OrderedDict[tuple[str, str], int] = OrderedDict()
        #: What the store last did in this process (its requests note it): what health reports.
        self.store_health = StoreHealth()
        if check and store is None:
            self.check()

    def __repr__(self) -> str:
        return f"ObjectSource({self.root!r})"


    @property
    def store(self) -> Any:
        self._ensure()
        return self._store

    @property
    def cache(self) -> ObjectCache | None:
        """This process's small objects' bytes (None when ``cache_bytes`` is 0)."""
        self._ensure()
        return self._cache

    def _ensure(self) -> asyncio.AbstractEventLoop:
        if self._pid != os.getpid():
            with self._lock:
                if self._pid != os.getpid():
                    self._store = (self._given_store if self._given_store is not None
                                   else connect(self.root, self.scheme, self._env, self.timeout))
                    # A worker's own: one made before a fork would start as the parent's copy.
                    self._cache = ObjectCache(self.cache_bytes, OPEN_READ) if self.cache_bytes else None
                    self._listings = ListedKeys(self.listing_valid)
                    self._openings = {}
                    loop = asyncio.new_event_loop()
                    threading.Thread(target=loop.run_forever, name="axon-objects", daemon=True).start()
                    self._loop, self._pid = loop, os.getpid()
                    self.store_health.asking = False  # a check under way in the parent is not this one's
                    if self.tier is not None:
                        self.tier.forked()
                        self.tier.loop = loop
        return self._loop  # type: ignore[return-value]

    def health(self) -> HTTPError | None:
        """None while the store answered last, else the 503 saying what failed (:mod:`.object_health`):
        never a request made here; a note too old is checked in the background, once."""
        if self.store_health.stale():
            self.store_health.asking = True
            asyncio.run_coroutine_threadsafe(self._check_health(), self._ensure())
        return self.store_health.report()

    async def _check_health(self) -> None:
        try:
            await self._open(HEALTH_KEY)  # notes what the store did, as every opening does
        finally:
            self.store_health.asking = False

    def check(self) -> None:
        """Ask the store at once whether it takes this server's settings
        (:func:`.object_store.check`): :class:`StoreMisconfigured` if not."""
        check_store(self.root, self.scheme, self._env, self.timeout)

    def run(self, coro: Coroutine[Any, Any, T]) -> T:
        """Run ``coro`` on this process's store loop and wait for it (from any other thread).
        On a thread that runs an event loop (a handler called on the server's loop) the wait would
        stall that loop for the store's round trip: :class:`~axon.errors.WouldBlock` instead, and
        the App runs the handler again in its thread pool, where this waits."""
        if asyncio._get_running_loop() is not None:
            coro.close()
            raise WouldBlock("the object store must be asked")
        return asyncio.run_coroutine_threadsafe(coro, self._ensure()).result()

    def submit(self, coro: Coroutine[Any, Any, T]) -> asyncio.Future[T]:
        """Start ``coro`` on the store loop; await the result from another event loop."""
        return asyncio.wrap_future(asyncio.run_coroutine_threadsafe(coro, self._ensure()))

    # -- opening -----------------------------------------------------------------------------------

    def key(self, requested: str, *, root_ok: bool = False) -> str:
        """The key ``requested`` names under the prefix, or the HTTPError saying why not."""
        parts = normalize(requested, root_ok=root_ok)
        if not self.allow_hidden and hidden("/".join(parts)):
            raise Forbidden("hidden files are not served", code="hidden", paths=[requested])
        if not root_ok and requested.endswith(("/", "/.")):
            raise NotFound("no such object: an object's key does not end in '/'", paths=[requested])
        return "/".join(parts)

    def open(self, requested: str) -> ObjectFile:
        self._ensure()
        held = self.open_held(requested)
        if held is not None:
            return held
        found = self.run(self._open_kept(requested))
        if isinstance(found, HTTPError):
            raise found
        return found

    async def _open(self, requested: str, room: list[int] | None = None,
                    unless: str | None = None, leads: list[Lead] | None = None) -> ObjectFile | HTTPError | None:
        """Open with a ranged GET of the first :data:`OPEN_READ` bytes: its answer names the
        object's size and ETag as a HEAD's would, and a small object comes whole with it, so it
        costs the store one request, not two. Its bytes are kept while ``room`` (a batch's
        budget, taken from) allows; a single object is kept if small. With ``unless`` (an ETag
        whose bytes the caller has), None when that is the object's ETag now (the store's 304).
        With ``leads`` (a disk tier that may fill the object), the GET asks for its first
        :data:`~.object_tiered.FILL_PIECE` bytes, and its stream, the first ``OPEN_READ`` read,
        is appended there for the fill to go on with (:class:`~.object_tiered.Lead`)."""
        try:
            key = self.key(requested)
        except HTTPError as exc:
            return exc
        data = None
        options: dict[str, Any] = {"range": (0, OPEN_READ if leads is None else FILL_PIECE)}
        if unless is not None:
            options["if_none_match"] = unless
        sent = time.monotonic()
        try:
            try:
                result = await obstore.get_async(self._store, key, options=options)
                meta = result.meta
                if leads is None:
                    data = await result.bytes_async()
                else:
                    lead = await Lead.read(result, OPEN_READ)
                    data = lead.first[:OPEN_READ]
                    leads.append(lead)
            except NotModifiedError:
                self.store_health.answered()
                return None
            except (NotFoundError, FileNotFoundError, PreconditionError, PermissionDeniedError, UnauthenticatedError):
                raise
            except Exception:  # noqa: BLE001 - an empty object has no range to give: ask its HEAD
                meta = await obstore.head_async(self._store, key)
        except (NotFoundError, FileNotFoundError) as exc:
            if self._cache is not None:
                self._cache.forget(key)
            self._listings.forget(key)
            return self.store_health.outcome(refused(exc, self.root, requested)
                                             or NotFound("no such object", paths=[requested]))
        except Exception as exc:  # noqa: BLE001 - the store's failure is the client's 503
            return self.store_health.outcome(refused(exc, self.root, requested) or unavailable(exc, requested))
        self.store_health.answered()
        # The store's version now, as a listing would have named it: trusted as one for the window.
        self._listings.note({key: meta}, sent, ())
        size = meta["size"]
        if data is not None and 0 < size == len(data):
            data = bytes(data)
            if self._cache is not None:
                self._cache.put(key, meta.get("e_tag"), data)  # the next batch's listing finds it
            keep_on_disk(self.tier, key, meta.get("e_tag"), data)
        if data is not None and (room is None or room[0] >= len(data)):
            data = bytes(data)  # the object, or its first OPEN_READ bytes: sent without a request
            if room is not None:
                room[0] -= len(data)
        else:
            data = b"" if size == 0 else None
        whole = data is not None and len(data) == size
        return ObjectFile(
            self, key, meta.get("e_tag"), requested, key, size,
            int(meta["last_modified"].timestamp()) * 1_000_000_000, self.content_type(key),
            data if whole else None, None if whole else data,
        )

    # -- checksums ----------------------------------------------------------------------------------

    def crc32s(self, files: list[ObjectFile], read: bool = True) -> list[int | None]:
        """The CRC-32 of each of ``files``, as :meth:`crc32`; with ``read`` false, None for one
        that would have to be fetched (the batch routes of an object source run in the thread
        pool, so that is asked only of objects already in memory or known)."""
        return [self.crc32(f, read) for f in files]

    def crc32(self, f: ObjectFile, read: bool = True) -> int | None:
        """The CRC-32 of ``f`` as opened, for a zip entry: S3 keeps no CRC-32 of a whole object
        (its checksums are per part, or absent), so the object is read once (``If-Match``) and
        its CRC kept by (key, ETag); :class:`~axon.errors.FileChanged` if it was replaced. With
        ``read`` false, None rather than a request to the store."""
        if f.data is not None:
            return zlib.crc32(f.data)
        crc = self._crc_on_disk(f) if read else None
        if crc is not None:
            return crc
        kept = self._cache.get(f.key, f.etag) if self._cache is not None else None
        if kept is not None and len(kept) == f.size:
            return zlib.crc32(kept)
        version = (f.key, f.etag) if f.etag is not None else None
        if version is not None:
            with self._lock:
                known = self._crcs.get(version)
            if known is not None:
                return known
        if not read:
            return None
        crc = self.run(self._read_crc(f))
        if version is not None:
            with self._lock:
                self._crcs[version] = crc
                if len(self._crcs) > CRC_CACHE:
                    self._crcs.popitem(last=False)
        return crc

    async def _read_crc(self, f: ObjectFile) -> int:
        if not f.size:
            return 0
        options: dict[str, Any] = {"range": (0, f.size)}
        if f.etag is not None:
            options["if_match"] = f.etag
        crc = seen = 0
        try:
            result = await obstore.get_async(self._store, f.key, options=options)
            async for chunk in result.stream(min_chunk_size=1 << 20):
                crc = zlib.crc32(chunk, crc)
                seen += len(chunk)
        except (PreconditionError, NotFoundError, FileNotFoundError):
            raise FileChanged(f.path) from None
        except Exception as exc:  # noqa: BLE001
            raise self.store_health.outcome(refused(exc, self.root, f.path) or unavailable(exc, f.path)) from None
        if seen != f.size:
            raise FileChanged(f.path)
        return crc

    # -- listing --------------------------------------------------------------------------------

    def kind(self, requested: str) -> str:
        """``"dir"`` or ``"file"``: a key is a file, a prefix that holds keys a directory."""
        key = self.key(requested, root_ok=True)
        if not key:
            return "dir"
        found = self.run(self._open(requested))
        if isinstance(found, ObjectFile):
            return "file"
        if found.status != 404:
            raise found
        prefixes, objects = self.run(self._list(key))
        if prefixes or objects:
            return "dir"
        raise NotFound("no such object or directory", paths=[requested])

    def list_dir(self, requested: str, limit: int) -> tuple[list[Entry], bool]:
        """The keys and common prefixes directly under ``requested`` (one delimited listing),
        hidden names left out unless allowed; truncated after ``limit``."""
        key = self.key(requested, root_ok=True)
        prefixes, objects = self.run(self._list(key))
        if not prefixes and not objects and key:
            raise NotFound("no such directory", paths=[requested])
        entries: list[Entry] = []
        for prefix in prefixes:
            name = prefix.rstrip("/").rsplit("/", 1)[-1]
            entries.append(Entry(name, "dir", 0, None))  # a prefix has no time of its own
        for meta in objects:
            name = meta["path"].rsplit("/", 1)[-1]
            if name:
                entries.append(Entry(name, "file", meta["size"], int(meta["last_modified"].timestamp()) * 10**9))
        entries = [e for e in entries if self.allow_hidden or not hidden(e.name)]
        return entries[:limit], len(entries) > limit

    async def _list(self, prefix: str) -> tuple[list[str], list[dict[str, Any]]]:
        # object_store lists by path: "sub" lists what is under "sub/", never "subway".
        try:
            found = await obstore.list_with_delimiter_async(self._store, prefix or None)
        except Exception as exc:  # noqa: BLE001
            raise self.store_health.outcome(refused(exc, self.root, prefix) or unavailable(exc, prefix)) from None
        self.store_health.answered()
        return found["common_prefixes"], found["objects"]

    # -- what the App asks of a source beside opening ---------------------------------------------

    def batch_key(self, secret: str | bytes | None) -> bytes:
        """The key of batch identities: from the secret, else from this host and the URL (a
        bucket has no inode to tie it to; see :mod:`.batch_key`)."""
        return derive_url_key(secret, self.root)

    def body_stream(self, segments: list[Segment], chunk_size: int) -> Any:
        """A body holding object slices as the stream the runtimes send (:mod:`.object_stream`),
        or None for a body of bytes only."""
        from .object_stream import ObjectBody

        if not any(type(s) is ObjectSlice for s in segments):
            return None  # bytes only (a listing): sent as they are
        return ObjectBody(self, segments, chunk_size)

