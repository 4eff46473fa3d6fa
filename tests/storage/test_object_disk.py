"""The objects' disk tier on a real directory (no store: a filler writes the bytes): hits after a
fill, one fill per object across processes, versions by ETag, fills that fail leave nothing, the
bound under a flood, a full disk."""

from __future__ import annotations

import asyncio
import hashlib
import logging
import os
import subprocess
import sys
import time

import pytest

from axon.storage import object_disk
from axon.storage.object_disk import DiskTier, md5_of_etag
from axon.storage.object_disk_space import LOW_WATER, TEMP

KiB = 1024


def etag_of(data: bytes) -> str:
    return f'"{hashlib.md5(data).hexdigest()}"'


def writer(data: bytes, calls: list | None = None, delay: float = 0.0):
    async def fill(fd, md5):
        if calls is not None:
            calls.append(1)
        if delay:
            await asyncio.sleep(delay)
        if md5 is not None:
            md5.update(data)
        return os.pwrite(fd, data, 0)
    return fill


def fetch(tier: DiskTier, key: str, data: bytes, calls: list | None = None, etag: str | None = None) -> bytes | None:
    held = asyncio.run(tier.fetch(key, etag or etag_of(data), len(data), writer(data, calls)))
    if held is None:
        return None
    try:
        return os.pread(held.fd, len(data) + 1, 0)
    finally:
        held.close()


def files_in(directory) -> list[str]:
    return sorted(os.path.relpath(os.path.join(d, f), directory) for d, _, fs in os.walk(directory) for f in fs
                  if not f.startswith("."))


def disk_bytes(directory) -> int:
    """The blocks of the objects' files (the directories, ``.usage`` and ``.journal`` are beside the bound)."""
    return sum(os.lstat(os.path.join(d, f)).st_blocks * 512 for d, _, fs in os.walk(directory) for f in fs
               if not f.startswith("."))


def test_a_fill_then_hits(tmp_path):
    tier = DiskTier(str(tmp_path), 1 << 20)
    data, calls = os.urandom(10 * KiB), []
    assert fetch(tier, "a/b.bin", data, calls) == data
    assert fetch(tier, "a/b.bin", data, calls) == data
    assert len(calls) == 1
    assert tier.counts() == {"object_disk_hits": 1, "object_disk_misses": 1, "object_disk_bytes_filled": len(data),
                             "object_disk_evictions": 0, "object_disk_fill_failures": 0}
    assert [f for f in files_in(tmp_path) if f.endswith((".lock", TEMP))] == []  # only the object stays


def test_a_restart_finds_what_is_whole(tmp_path):
    data, calls = os.urandom(5 * KiB), []
    fetch(DiskTier(str(tmp_path), 1 << 20), "k", data, calls)
    assert fetch(DiskTier(str(tmp_path), 1 << 20), "k", data, calls) == data
    assert len(calls) == 1


def test_a_new_etag_is_another_file_and_drops_the_old(tmp_path):
    tier = DiskTier(str(tmp_path), 1 << 20)
    old, new = b"o" * 5000, b"n" * 5000
    fetch(tier, "k", old)
    before = files_in(tmp_path)
    assert fetch(tier, "k", new) == new
    after = files_in(tmp_path)
    assert len(before) == len(after) == 1 and before != after
    assert tier.open("k", etag_of(old), len(old)) is None


def test_a_fill_that_fails_leaves_nothing_and_is_counted(tmp_path, caplog):
    tier = DiskTier(str(tmp_path), 1 << 20)

    async def broken(fd, md5):
        os.pwrite(fd, b"half", 0)
        raise RuntimeError("the store went away")

    with caplog.at_level(logging.WARNING, "axon.storage"):
        assert asyncio.run(tier.fetch("k", '"x-1"', 100, broken)) is None
    assert files_in(tmp_path) == []
    assert tier.counts()["object_disk_fill_failures"] == 1 and "the store went away" in caplog.text
    assert tier.space.used() == 0  # the reservation given back


def test_bytes_that_disagree_with_an_md5_etag_are_not_kept(tmp_path, caplog):
    tier = DiskTier(str(tmp_path), 1 << 20)
    data = b"x" * 1000
    with caplog.at_level(logging.WARNING, "axon.storage"):
        assert fetch(tier, "k", data, etag=etag_of(b"y" * 1000)) is None
    assert files_in(tmp_path) == [] and "MD5" in caplog.text
    assert md5_of_etag('"0123456789abcdef0123456789ABCDEF"') == "0123456789abcdef0123456789abcdef"
    assert md5_of_etag('"0123456789abcdef0123456789abcdef-3"') is None  # a multipart upload's


def test_a_short_fill_is_not_kept(tmp_path):
    tier = DiskTier(str(tmp_path), 1 << 20)
    assert asyncio.run(tier.fetch("k", '"v1"', 2000, writer(b"z" * 1000))) is None
    assert files_in(tmp_path) == []


def test_a_dead_fills_temporary_file_is_removed_at_start(tmp_path):
    tier = DiskTier(str(tmp_path), 1 << 20)
    path = tier.path_of("k", '"v"')
    os.makedirs(os.path.dirname(path), exist_ok=True)
    dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True)
    temp = f"{path}.{int(dead.stdout)}.4096{TEMP}"
    with open(temp, "wb") as f:
        f.write(b"partial")
    assert tier.open("k", '"v"', 7) is None  # never served
    DiskTier(str(tmp_path), 1 << 20)
    assert not os.path.exists(temp)


def test_one_fill_for_many_at_once_in_a_process(tmp_path):
    tier = DiskTier(str(tmp_path), 1 << 20)
    data, calls = os.urandom(3000), []

    async def many():
        fds = await asyncio.gather(*[tier.fetch("k", etag_of(data), len(data), writer(data, calls, 0.05))
                                     for _ in range(50)])
        for held in fds:
            assert os.pread(held.fd, 4000, 0) == data
            held.close()

    asyncio.run(many())
    assert len(calls) == 1


def test_a_fetch_that_waits_for_another_fill_says_so_first(tmp_path):
    # What lets a fill's opening stream go rather than sit idle (object_tiered's lead): the
    # fetches that wait (for this process's fill, or another process's lock) call ``waiting``
    # before they wait; the one that fills does not.
    import fcntl

    from axon.storage.object_disk_fill import LOCK

    tier = DiskTier(str(tmp_path), 1 << 20)
    data, calls, waited = os.urandom(3000), [], []

    async def many():
        fds = await asyncio.gather(*[tier.fetch("k", etag_of(data), len(data), writer(data, calls, 0.05),
                                                waiting=lambda i=i: waited.append(i)) for i in range(10)])
        for held in fds:
            held.close()

    asyncio.run(many())
    assert len(calls) == 1 and sorted(waited) == list(range(1, 10))

    other, waited = os.urandom(3000), []
    path = tier.path_of("o", etag_of(other))
    os.makedirs(os.path.dirname(path), exist_ok=True)

    async def behind_another_process():
        holder = os.open(path + LOCK, os.O_RDWR | os.O_CREAT)
        fcntl.flock(holder, fcntl.LOCK_EX)  # another process fills it
        fetching = asyncio.ensure_future(tier.fetch("o", etag_of(other), len(other), writer(other, calls),
                                                    waiting=lambda: waited.append("o")))
        await asyncio.sleep(0.2)
        assert waited == ["o"]  # said at once, and once, while it polls
        os.unlink(path + LOCK)
        os.close(holder)  # that process failed: this one fills
        (await fetching).close()

    asyncio.run(behind_another_process())
    assert waited == ["o"] and len(calls) == 2


CHILD = """
import asyncio, os, sys
from axon.storage.object_disk import DiskTier
directory, count_file = sys.argv[1], sys.argv[2]
data = b"q" * 100000
async def fill(fd, md5):
    with open(count_file, "a") as f:
        f.write("fill\\n")
    await asyncio.sleep(0.3)
    return os.pwrite(fd, data, 0)
tier = DiskTier(directory, 1 << 20)
held = asyncio.run(tier.fetch("shared", '"v1"', len(data), fill))
assert os.pread(held.fd, len(data) + 1, 0) == data
"""


@pytest.mark.slow
def test_one_fill_across_processes(tmp_path):
    cache, count = tmp_path / "cache", tmp_path / "fills"
    cache.mkdir()
    procs = [subprocess.Popen([sys.executable, "-c", CHILD, str(cache), str(count)]) for _ in range(6)]
    assert [p.wait(30) for p in procs] == [0] * 6
    assert count.read_text().count("fill") == 1


def test_a_flood_never_passes_the_bound(tmp_path):
    bound = 256 * KiB
    tier = DiskTier(str(tmp_path), bound)
    for i in range(200):
        data = os.urandom(3 * KiB + i * 37)
        assert fetch(tier, f"flood/{i}", data) == data
        assert disk_bytes(tmp_path) <= bound
    assert tier.counts()["object_disk_evictions"] > 0
    assert disk_bytes(tmp_path) >= bound * LOW_WATER * 0.8  # still used, not emptied
    assert tier.open("flood/0", "x", 1) is None


def test_fills_at_once_never_pass_the_bound_and_the_count_is_what_is_there(tmp_path):
    bound = 1 << 20
    tier = DiskTier(str(tmp_path), bound)

    async def one(i: int) -> None:
        data = os.urandom(90 * KiB)

        async def fill(fd, md5):
            await asyncio.sleep(0.01)  # the others reserve (and scan) meanwhile
            assert disk_bytes(tmp_path) <= bound
            return os.pwrite(fd, data, 0)

        held = await tier.fetch(f"k{i}", f'"v{i}"', len(data), fill)
        if held is not None:
            held.close()

    async def rounds() -> None:
        for start in range(0, 80, 20):
            await asyncio.gather(*[one(i) for i in range(start, start + 20)])
            assert disk_bytes(tmp_path) <= bound
            assert tier.space.used() == disk_bytes(tmp_path)

    asyncio.run(rounds())
    assert tier.counts()["object_disk_evictions"] > 0


def test_the_least_recently_used_go_first(tmp_path):
    tier = DiskTier(str(tmp_path), 64 * KiB)  # eight files of 8 KiB; room is made down to 90%
    first = os.urandom(8 * KiB)
    fetch(tier, "first", first)
    others = [os.urandom(8 * KiB) for _ in range(10)]
    for i in range(5):
        fetch(tier, f"other/{i}", others[i])
    now = time.time()
    for d, _, fs in os.walk(tmp_path):  # the others last used a minute ago, the first before them
        for f in fs:
            age = 120 if f.startswith(os.path.basename(tier.path_of("first", etag_of(first)))) else 60
            os.utime(os.path.join(d, f), (now - age, now - age))
    tier.open("first", etag_of(first), len(first)).close()  # a hit: the first is now the last used
    # A file's times come from the kernel's coarse clock (a tick of up to 4 ms): the fills below
    # come a tick later, so that they are newer than the hit.
    time.sleep(0.05)
    for i in range(5, 10):
        fetch(tier, f"other/{i}", others[i])
    kept = [tier.open(f"other/{i}", etag_of(others[i]), 8 * KiB) for i in range(5)]
    for held in kept:
        if held is not None:
            held.close()
    gone = [held for held in kept if held is None]
    assert gone, "nothing was evicted: the test does not test the order"
    held = tier.open("first", etag_of(first), len(first))
    assert held is not None  # without the hit's touch it was the oldest, the first to go
    held.close()


def test_too_large_for_the_bound_is_not_kept(tmp_path):
    tier = DiskTier(str(tmp_path), 64 * KiB)
    assert not tier.fits(40 * KiB) and tier.fits(32 * KiB)


def test_a_full_disk_is_a_log_line_not_a_failure(small_disk, caplog):
    tier = DiskTier(str(small_disk), 100 << 20)  # the bound is larger than the disk
    with caplog.at_level(logging.WARNING, "axon.storage"):
        kept = fetch(tier, "a", os.urandom(600 * KiB))
        assert kept is not None
        assert fetch(tier, "b", os.urandom(600 * KiB)) is None  # no room: served from the store
    assert "no space left" in caplog.text
    assert tier.counts()["object_disk_fill_failures"] == 1
    assert [f for f in files_in(small_disk) if f.endswith(TEMP)] == []


def test_a_directory_that_fails_is_a_fill_failure_not_an_error(tmp_path, caplog):
    tier = DiskTier(str(tmp_path), 1 << 20)
    data = b"d" * 100
    with open(os.path.dirname(tier.path_of("k", etag_of(data))), "wb"):
        pass  # a file where the object's subdirectory would be
    with caplog.at_level(logging.WARNING, "axon.storage"):
        assert fetch(tier, "k", data) is None
    assert tier.counts()["object_disk_fill_failures"] == 1 and "not kept" in caplog.text


def keep_all(tier: DiskTier, data: dict[str, bytes]) -> int:
    """Each object queued by keep_later at once (as a batch's openings do), all written; the
    writes that were queued."""

    async def burst() -> int:
        for key, body in data.items():
            tier.keep_later(key, etag_of(body), body)
        queued = len(tier._flights)
        await asyncio.gather(*list(tier._flights.values()))
        return queued

    return asyncio.run(burst())


def test_a_burst_of_small_objects_is_kept_whole(tmp_path):
    # Small objects fetched whole are queued for a few threads: a batch's burst of them all ends
    # up on disk (none is dropped because many arrived at once).
    tier = DiskTier(str(tmp_path), 10 << 20)
    data = {f"k{i:03d}": os.urandom(4 * KiB) for i in range(100)}
    assert keep_all(tier, data) == 100
    assert [k for k, body in data.items() if tier.open(k, etag_of(body), len(body)) is None] == []
    assert tier._queued == 0


def test_bytes_waiting_to_be_written_are_bounded(tmp_path, monkeypatch):
    # Past KEEP_QUEUE_BYTES waiting, an object is not kept this time (its bytes are not queued
    # in memory behind the disk without end).
    monkeypatch.setattr(object_disk, "KEEP_QUEUE_BYTES", 10 * KiB)
    tier = DiskTier(str(tmp_path), 1 << 20)
    data = {f"k{i}": os.urandom(4 * KiB) for i in range(5)}
    assert keep_all(tier, data) == 2
    kept = [key for key, body in data.items() if tier.open(key, etag_of(body), len(body)) is not None]
    assert kept == ["k0", "k1"]


def test_hits_share_one_descriptor_and_a_deleted_files_only_until_the_sweep(tmp_path):
    tier = DiskTier(str(tmp_path), 1 << 20)
    tier.share_files(size=100, valid=5.0, inactive=60.0)
    data = os.urandom(6000)
    assert fetch(tier, "k", data) == data

    async def hits() -> None:
        before = len(os.listdir("/proc/self/fd"))
        first = await tier.lookup("k", etag_of(data), len(data))
        second = await tier.lookup("k", etag_of(data), len(data))
        assert first.fd == second.fd and os.pread(second.fd, 7000, 0) == data  # one open for both
        first.close()
        second.close()
        assert len(os.listdir("/proc/self/fd")) == before  # the one the fill's hit cached stays open
        path = tier.path_of("k", etag_of(data))
        # Deleted (evicted): a name is a version, so the cached descriptor still holds that
        # version's bytes; the sweep that sees the deletion drops it, and the name is then missed.
        tier.space.release([path])
        third = await tier.lookup("k", etag_of(data), len(data))
        assert os.pread(third.fd, 7000, 0) == data
        third.close()
        tier._sweep()
        assert await tier.lookup("k", etag_of(data), len(data)) is None

    asyncio.run(hits())


def test_a_hit_within_the_window_stats_nothing(tmp_path, monkeypatch):
    # A kept file never changes under its name: the open-file cache trusts its last fstat for
    # its window, as it trusts a watched file's, instead of one fstat a hit.
    tier = DiskTier(str(tmp_path), 1 << 20)
    tier.share_files(size=100, valid=60.0, inactive=60.0)
    data = os.urandom(6000)
    assert fetch(tier, "k", data) == data
    tier.open("k", etag_of(data), len(data)).close()  # cached, its stat taken
    stats = []
    real_fstat = os.fstat
    monkeypatch.setattr(os, "fstat", lambda fd: stats.append(fd) or real_fstat(fd))
    for _ in range(50):
        held = tier.open("k", etag_of(data), len(data))
        assert os.pread(held.fd, 7000, 0) == data
        held.close()
    assert stats == []


def test_a_small_kept_file_is_read_once_then_sent_from_memory(tmp_path, monkeypatch):
    # As a local small file's in the open-file cache, but at once: a name is one version, so
    # its bytes need not settle first (and a hit's touch keeps moving its ctime).
    tier = DiskTier(str(tmp_path), 1 << 20)
    tier.share_files(size=100, valid=60.0, inactive=60.0, small_bytes=1 << 20)
    small, large = os.urandom(6000), os.urandom(100 * KiB)
    assert fetch(tier, "small", small) == small and fetch(tier, "large", large) == large
    reads = []
    real_pread = os.pread
    monkeypatch.setattr(os, "pread", lambda *a: reads.append(a) or real_pread(*a))
    for _ in range(20):
        held = tier.open("small", etag_of(small), len(small))
        assert held.data == small
        held.close()
    assert len(reads) <= 1
    held = tier.open("large", etag_of(large), len(large))
    assert held.data is None  # past the small size: read by offset as it is sent
    held.close()


def test_hits_from_handler_threads_wake_the_store_loop_once_for_a_sweep(tmp_path):
    import threading

    tier = DiskTier(str(tmp_path), 1 << 20)
    tier.share_files(size=100, valid=60.0, inactive=60.0)
    data = os.urandom(6000)
    assert fetch(tier, "k", data) == data
    loop = asyncio.new_event_loop()
    tier.loop = loop
    busy, wakeups = threading.Event(), []
    real = loop.call_soon_threadsafe
    loop.call_soon_threadsafe = lambda *a: wakeups.append(a) or real(*a)
    thread = threading.Thread(target=loop.run_forever)
    thread.start()
    try:
        real(busy.wait, 5)  # the store loop is busy while the hits come
        for _ in range(50):
            tier.open("k", etag_of(data), len(data)).close()
        busy.set()
        assert len(wakeups) == 1
    finally:
        busy.set()
        real(loop.stop)
        thread.join(5)
        loop.close()


def test_descriptors_of_deleted_files_are_closed_by_the_next_sweep(tmp_path, monkeypatch):
    monkeypatch.setattr(object_disk, "SWEEP", 0.05)
    tier = DiskTier(str(tmp_path), 1 << 20)
    tier.share_files(size=100, valid=5.0, inactive=60.0)
    other = DiskTier(str(tmp_path), 1 << 20)  # another process's
    kept = {f"k{i}": os.urandom(5000) for i in range(3)}
    for key, data in kept.items():
        fetch(tier, key, data)

    def held_deleted() -> int:
        return sum(_link(fd).startswith(str(tmp_path)) and _link(fd).endswith("(deleted)")
                   for fd in os.listdir("/proc/self/fd"))

    async def sweep() -> None:
        for key, data in kept.items():
            (await tier.lookup(key, etag_of(data), len(data))).close()
        other.space.release([tier.path_of("k0", etag_of(kept["k0"]))])  # evicted by the other process
        assert held_deleted() == 1  # held until the sweep
        await asyncio.sleep(0.2)
        assert held_deleted() == 0
        held = await tier.lookup("k1", etag_of(kept["k1"]), len(kept["k1"]))  # the others open anew
        assert os.pread(held.fd, 6000, 0) == kept["k1"]
        held.close()

    asyncio.run(sweep())


def _link(fd: str) -> str:
    """What this process's descriptor ``fd`` names ("" once closed)."""
    try:
        return os.readlink(f"/proc/self/fd/{fd}")
    except OSError:
        return ""


def test_etags_that_prove_not_to_be_md5s_are_checked_by_length(tmp_path, caplog):
    tier = DiskTier(str(tmp_path), 1 << 20)
    kms = {f"k{i}": (os.urandom(2000), f'"{os.urandom(16).hex()}"') for i in range(5)}  # MD5-looking, not MD5s
    with caplog.at_level(logging.WARNING, "axon.storage"):
        kept = [fetch(tier, key, data, etag=etag) is not None for key, (data, etag) in kms.items()]
    assert kept == [False, False, False, True, True]  # the three that disagreed were not kept
    assert "not the MD5 of the bytes" in caplog.text
    assert fetch(tier, "short", b"s" * 100, etag=f'"{os.urandom(16).hex()}"') is not None
    assert asyncio.run(tier.fetch("short2", '"ab"', 200, writer(b"z" * 100))) is None  # the length, always


def test_a_store_whose_etags_were_md5s_stays_checked(tmp_path):
    tier = DiskTier(str(tmp_path), 1 << 20)
    good = os.urandom(2000)
    assert fetch(tier, "good", good) == good  # an MD5 that agreed
    for i in range(5):
        assert fetch(tier, f"bad{i}", os.urandom(2000), etag=etag_of(b"other")) is None
