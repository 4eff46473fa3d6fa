"""The bound of small objects' bytes kept by key and ETag: what it keeps, what it refuses, and
that its memory (payloads and per-entry overheads) never passes its capacity."""

from __future__ import annotations

import sys
import threading

import pytest

from axon.storage.object_cache import ENTRY_OVERHEAD, ObjectCache


def test_a_version_is_found_by_its_etag_only():
    cache = ObjectCache(1 << 20)
    cache.put("a", '"1"', b"one")
    assert cache.get("a", '"1"') == b"one"
    assert cache.get("a", '"2"') is None  # another version: not these bytes
    assert cache.get("a", None) is None and cache.get("b", '"1"') is None  # no ETag: nothing to match


def test_a_new_version_replaces_the_old_one():
    cache = ObjectCache(1 << 20)
    cache.put("a", '"1"', b"one")
    cache.put("a", '"2"', b"two!")
    assert cache.get("a", '"1"') is None and cache.get("a", '"2"') == b"two!"
    assert len(cache) == 1 and cache.used == 4 + 1 + ENTRY_OVERHEAD


def test_too_large_no_etag_or_no_room_is_not_kept():
    cache = ObjectCache(10_000, largest=1000)
    cache.put("big", '"1"', b"x" * 1001)
    cache.put("anon", None, b"x")
    assert len(cache) == 0 and cache.used == 0
    assert ObjectCache(0).put("a", '"1"', b"x") is None and len(ObjectCache(0)) == 0


def test_least_recently_used_go_first_and_the_bound_holds():
    entry = 100 + 1 + ENTRY_OVERHEAD
    cache = ObjectCache(3 * entry)
    for name in "abc":
        cache.put(name, '"e"', b"x" * 100)
    assert cache.get("a", '"e"')  # a is now the most recent
    cache.put("d", '"e"', b"x" * 100)
    assert [n for n in "abcd" if cache.get(n, '"e"') is not None] == ["a", "c", "d"]
    assert cache.used == 3 * entry


def test_forget():
    cache = ObjectCache(1 << 20)
    cache.put("a", '"1"', b"one")
    cache.forget("a")
    cache.forget("never")
    assert cache.get("a", '"1"') is None and cache.used == 0


def test_threads_never_pass_the_bound():
    # A switch every microsecond: a reader must find the bound kept between any two statements.
    switch = sys.getswitchinterval()
    sys.setswitchinterval(1e-6)
    try:
        _threads_work_and_the_bound_holds()
    finally:
        sys.setswitchinterval(switch)


def _threads_work_and_the_bound_holds():
    cache = ObjectCache(50 * (1000 + ENTRY_OVERHEAD + 8), largest=4096)
    seen = []

    def work(n: int) -> None:
        for i in range(2000):
            cache.put(f"k{n}-{i % 300:03d}", f'"{i}"', b"y" * (i % 1000 + 1))
            cache.get(f"k{n}-{(i * 7) % 300:03d}", f'"{i}"')
            seen.append(cache.used)

    def watch() -> None:  # a reader without the lock, as metrics are: it must never see more
        while any(t.is_alive() for t in threads):
            seen.append(cache.used)

    threads = [threading.Thread(target=work, args=(n,)) for n in range(4)]
    watcher = threading.Thread(target=watch)
    for t in threads:
        t.start()
    watcher.start()
    for t in threads:
        t.join()
    watcher.join()
    assert max(seen) <= cache.capacity
    assert cache.used == sum(len(d) + len(k) + ENTRY_OVERHEAD for k, (_, d) in cache._entries.items())


def test_negative_bounds_are_refused():
    with pytest.raises(ValueError):
        ObjectCache(-1)
