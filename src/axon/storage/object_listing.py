"""A batch's objects named by listings rather than one request each: their sizes and ETags from
S3's ListObjectsV2 (up to :data:`PAGE` keys an answer), before any status line.

Opening an object is a request to the store, and a store answers a few thousand a second; a
listing page is one request that names a thousand keys with their size, ETag and date. So a
batch of many keys is listed first: its keys, sorted, are cut into *runs* of at most
:data:`PAGE` keys (by directory: :func:`plan_runs`), each listed from just before its first key (``start-after``, obstore's
``offset``) under the directory its keys share, until a listed key passes its last one or after
:data:`PAGES_PER_RUN` pages. Runs are listed concurrently. A batch whose keys are dense in their
directories is named by a page per thousand keys; a sparse one costs at most that many pages
more than before. Whatever a listing did not name (a key not there, past where the run
stopped, or named in another spelling) is opened one by one as before, so a missing key is still
a 404 naming it: a listing is only ever a shortcut, never the word that a key is absent.

What the listing gives is trusted as a ``GET`` would be: its ETag is the store's ETag of the
same object (the tests compare them on SeaweedFS, quotes included), and the bytes are then
fetched with ``If-Match`` on it (:mod:`.object_stream`), or sent from the bytes kept for that
ETag (:mod:`.object_cache`). A listing is as fresh as the store makes it; S3's has been strongly
consistent since 2020, as SeaweedFS's filer is.

A listing may be trusted for a while (``--object-listing-valid SECONDS``, as nginx's
``proxy_cache_valid`` trusts a cached answer): :class:`ListedKeys` keeps what listings named, key
-> (entry, time listed), and :meth:`ListedKeys.current` is the freshness rule, the one place it
is decided: an entry listed at most ``valid`` seconds before a batch began stands for the
store's current version. With 0 (the default) nothing is kept and every batch lists.

:func:`plan_runs` is pure (keys in, runs out); :func:`list_runs` does the requests.
"""

from __future__ import annotations

import asyncio
import logging
import threading
from collections import OrderedDict
from dataclasses import dataclass
from itertools import groupby
from os.path import commonprefix
from typing import Any

import obstore
from obstore.exceptions import NotSupportedError, PermissionDeniedError, UnauthenticatedError

log = logging.getLogger("axon.storage")

#: The most keys one ListObjectsV2 answer names (S3's ``max-keys`` default and ceiling).
PAGE = 1000
#: Fewer distinct keys than this are opened as before: a listing page costs the store what
#: some tens of ranged GETs cost (BENCHMARKS.md), and for a few keys their GETs overlap anyway.
LIST_MIN = 16
#: Pages one run may read: its keys may be spread over twice a page of other keys.
PAGES_PER_RUN = 2
#: Listing entries a process keeps for the validity window, at most, and the bytes they may
#: take: each is charged its key, its ETag and ENTRY_OVERHEAD (the entry's dict, date and node).
LISTED_KEYS = 65536
LISTED_BYTES = 48 << 20
ENTRY_OVERHEAD = 512


class ListingRefused(Exception):
    """The store does not let these credentials list (or does not list at all): open instead."""


def refused(exc: Exception) -> bool:
    """Whether ``exc`` says the store will not list for us, rather than that it failed once.
    object_store reports S3's 403 on a listing as a generic error: its status is in the text."""
    if isinstance(exc, (PermissionDeniedError, UnauthenticatedError, NotSupportedError)):
        return True
    text = str(exc)
    return "status code: 403" in text or "status code: 401" in text


@dataclass(frozen=True)
class Run:
    """Consecutive keys of a batch (sorted) and the one listing that may name them."""

    prefix: str  # the directory the keys share ("" for the source's own prefix)
    offset: str | None  # listed from just after this: strictly before the first key
    last: str  # a listed key past this ends the run
    keys: frozenset[str]
    pages: int = PAGES_PER_RUN


def plan_runs(keys: list[str], list_min: int = LIST_MIN, page: int = PAGE) -> list[Run]:
    """The runs that list ``keys`` (jailed keys, any order, repeats allowed); none for fewer
    than ``list_min`` distinct keys. Keys of one directory stay together; a directory of fewer
    than ``list_min`` keys joins its neighbours (shards of a few keys each, listed as one
    stretch of their parent), one of more starts a run of its own once the current one could
    stand alone (two far-apart directories are not listed as one stretch of everything between
    them). A run of more than ``page`` keys is cut into equal runs of at most ``page``."""
    distinct = sorted(set(keys))
    if len(distinct) < max(list_min, 1):
        return []
    stretches: list[list[str]] = []
    current: list[str] = []
    for _, group in groupby(distinct, key=lambda k: k.rpartition("/")[0]):
        members = list(group)
        alone = len(current) >= list_min and len(members) >= list_min
        if current and (alone or len(current) + len(members) > page):
            stretches.append(current)
            current = []
        current.extend(members)
    stretches.append(current)
    runs = []
    for stretch in stretches:
        count = -(-len(stretch) // page)
        size = -(-len(stretch) // count)
        for i in range(0, len(stretch), size):
            runs.append(_run(stretch[i : i + size]))
    return runs


def _run(chunk: list[str]) -> Run:
    first, last = chunk[0], chunk[-1]
    common = commonprefix([first, last])
    prefix = common[: common.rfind("/")] if "/" in common else ""
    # A proper prefix of the first key sorts before it (start-after excludes the offset).
    return Run(prefix, first[:-1] or None, last, frozenset(chunk))


async def list_runs(store: Any, runs: list[Run], concurrency: int, timeout: float) -> dict[str, dict[str, Any]]:
    """Each key the listings of ``runs`` named, the runs' own and the others on their pages:
    key -> obstore's ObjectMeta (path, size, e_tag, last_modified). A run that fails names what
    it listed before (its other keys are opened instead); :class:`ListingRefused` when the
    store refuses to list."""
    found: dict[str, dict[str, Any]] = {}
    gate = asyncio.Semaphore(concurrency)

    async def one(run: Run) -> None:
        async with gate:
            pages = 0
            stream = obstore.list(store, run.prefix or None, offset=run.offset, chunk_size=PAGE)
            async for chunk in stream:
                for meta in chunk:
                    found[meta["path"]] = meta
                pages += 1
                # Leaving the loop drops the stream: no further page is asked for.
                if not chunk or chunk[-1]["path"] >= run.last or pages >= run.pages:
                    break

    async def guarded(run: Run) -> str | None:
        try:
            await asyncio.wait_for(one(run), timeout)
        except Exception as exc:  # noqa: BLE001 - the keys are opened one by one instead
            said = str(exc).strip().split("\n", 1)[0] or type(exc).__name__
            if refused(exc):
                return said
            log.warning("listing %r failed, opening its keys instead: %s", run.prefix, said)
        return None

    refusals = [r for r in await asyncio.gather(*map(guarded, runs)) if r is not None]
    if refusals:
        raise ListingRefused(refusals[0])
    return found


class ListedKeys:
    """What listings named, for ``valid`` seconds: key -> (entry, time listed), least recently
    used out first beyond ``keys`` entries or ``capacity`` bytes (:data:`ENTRY_OVERHEAD` each
    beside its key and ETag). A process's own: its store loop notes listings while handler
    threads ask it for a batch's entries (:meth:`current`), so each call holds a lock."""

    def __init__(self, valid: float, keys: int | None = None, capacity: int | None = None) -> None:
        keys = LISTED_KEYS if keys is None else keys
        capacity = LISTED_BYTES if capacity is None else capacity
        if valid < 0 or keys < 0 or capacity < 0:
            raise ValueError("the listing's validity, keys and bytes must not be negative")
        self.valid = valid
        self.keys = keys
        self.capacity = capacity
        self.used = 0  # bytes charged: always <= capacity
        self._entries: OrderedDict[str, tuple[dict[str, Any], float, int]] = OrderedDict()
        self._lock = threading.Lock()

    def __len__(self) -> int:
        return len(self._entries)

    def current(self, keys: list[str], started: float) -> dict[str, dict[str, Any]]:
        """The freshness rule: the entries of ``keys`` listed at most ``valid`` seconds before
        ``started`` (the monotonic time a batch began). A key absent here is listed or opened:
        the table never says that a key is not there."""
        entries, since = self._entries, started - self.valid
        found = {}
        with self._lock:
            for key in keys:
                kept = entries.get(key)
                if kept is not None:
                    if kept[1] >= since:
                        found[key] = kept[0]
                        entries.move_to_end(key)
                    else:
                        self._drop(key)
        return found

    def note(self, named: dict[str, dict[str, Any]], listed: float, wanted: list[str]) -> None:
        """Keep what a listing sent at monotonic time ``listed`` named (key -> entry): the
        ``wanted`` keys (a batch's) last, so that they stay longest when the bound is reached."""
        if not self.valid:
            return
        entries, capacity = self._entries, self.capacity
        asked = {key: named[key] for key in wanted if key in named}
        with self._lock:  # once for a page: a handler thread's current() waits for one note at most
            for key, meta in [*((k, m) for k, m in named.items() if k not in asked), *asked.items()]:
                cost = len(key) + len(meta.get("e_tag") or "") + ENTRY_OVERHEAD
                if cost > capacity:
                    continue
                self._drop(key)
                entries[key] = (meta, listed, cost)
                self.used += cost
                while self.used > capacity or len(entries) > self.keys:
                    _, (_, _, gone) = entries.popitem(last=False)
                    self.used -= gone

    def forget(self, key: str) -> None:
        """Drop ``key`` (the key was found deleted)."""
        with self._lock:
            self._drop(key)

    def _drop(self, key: str) -> None:
        """Drop ``key`` (expired, deleted, or noted anew), the lock held."""
        old = self._entries.pop(key, None)
        if old is not None:
            self.used -= old[2]
