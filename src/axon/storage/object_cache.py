"""Small objects' bytes kept in memory by (key, ETag): a repeated batch costs the store no GET.

An object store answers a few thousand requests a second (SeaweedFS on a small machine: ~2,500),
so a batch of 1,000 small objects is bound by its 1,000 GETs, however close the store. A
listing names up to 1,000 keys' ETags in one request (:mod:`.object_listing`); an object whose
bytes are kept here under the ETag the listing gives now is sent from memory. Freshness is the
listing's, asked on every batch, never a time to live: an object overwritten since it was kept
has another ETag and is fetched again (its new bytes then replace the old ones).

One version per key is kept (a key seen with a new ETag drops the old bytes at once, whoever
holds them); only objects of at most ``largest`` bytes (what opening brings whole), least
recently used out first. The bound ``capacity`` counts each entry's bytes plus
:data:`ENTRY_OVERHEAD` for its key, tuple and dict node, so it bounds the memory, not only the
payload. Per process: each worker keeps its own (``axon serve`` forks after building the App;
an empty cache is what is shared). Thread-safe: the store's loop thread fills it while handler
threads read it.
"""

from __future__ import annotations

import threading
from collections import OrderedDict

#: Bytes an entry costs beside its payload (key string, tuple, dict node), counted in the bound.
ENTRY_OVERHEAD = 256
#: The largest object kept by default: the size that opening brings whole (objects.OPEN_READ).
LARGEST = 64 * 1024


class ObjectCache:
    """A bounded LRU of small objects' bytes: ``key -> (etag, bytes)``."""

    def __init__(self, capacity: int, largest: int = LARGEST) -> None:
        if capacity < 0 or largest < 0:
            raise ValueError("capacity and largest must not be negative")
        self.capacity = capacity
        self.largest = largest
        self.used = 0  # bytes charged, payloads plus overheads: always <= capacity
        self._entries: OrderedDict[str, tuple[str, bytes]] = OrderedDict()
        self._lock = threading.Lock()

    def __len__(self) -> int:
        return len(self._entries)

    def get(self, key: str, etag: str | None) -> bytes | None:
        """The bytes of ``key`` at version ``etag``, if kept; None otherwise."""
        if etag is None:
            return None
        with self._lock:
            found = self._entries.get(key)
            if found is None or found[0] != etag:
                return None
            self._entries.move_to_end(key)
            return found[1]

    def put(self, key: str, etag: str | None, data: bytes) -> None:
        """Keep ``data`` as ``key`` at version ``etag`` (replacing any other version of it);
        nothing for an object without an ETag or larger than ``largest``."""
        cost = _cost(key, data)
        if etag is None or len(data) > self.largest or cost > self.capacity:
            return
        with self._lock:
            old = self._entries.pop(key, None)
            if old is not None:
                self.used -= _cost(key, old[1])
            # Room first, then the entry: ``used`` is read without the lock (metrics, tests), so
            # it must never pass the bound, not even between two statements.
            while self.used + cost > self.capacity:
                gone, (_, payload) = self._entries.popitem(last=False)
                self.used -= _cost(gone, payload)
            self._entries[key] = (etag, data)
            self.used += cost

    def forget(self, key: str) -> None:
        """Drop ``key`` (it was found deleted)."""
        with self._lock:
            old = self._entries.pop(key, None)
            if old is not None:
                self.used -= _cost(key, old[1])


def _cost(key: str, data: bytes) -> int:
    """What an entry is charged against the bound: its bytes, its key and ENTRY_OVERHEAD."""
    return len(data) + len(key) + ENTRY_OVERHEAD
