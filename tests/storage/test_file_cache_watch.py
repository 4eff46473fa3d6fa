"""The open-file cache with the kernel watching its files (axon.storage.watch, inotify): a hit
goes without an ``fstat`` until the kernel tells of a change, and ``sync`` (the server's, before
each request) takes in every change made before it. Real files, a real inotify instance.
"""

from __future__ import annotations

import gc
import mmap
import os
import time
from collections import Counter
from pathlib import Path

import pytest

from axon.errors import HTTPError
from axon.http.batch_identity import KeptSignature
from axon.plan.batch import file_signature
from axon.storage.local import FileStore
from axon.storage.shared_files import SharedFiles

VALID = 0.5  # seconds a path's resolution (and, watched, a file's stat) is trusted here


@pytest.fixture
def settled(monkeypatch):
    """Treat every file as settled, so that its bytes are kept in the cache from its first hit."""
    from axon.storage import file_cache

    monkeypatch.setattr(file_cache, "SETTLED_NS", -(10**18))


@pytest.fixture
def root(tmp_path: Path) -> Path:
    root = Path(os.path.realpath(tmp_path)) / "root"
    root.mkdir()
    for name in ("a.txt", "b.txt"):
        (root / name).write_bytes(b"version 1\n")
    return root


@pytest.fixture
def store(root: Path, settled):
    store = SharedFiles(FileStore(root), size=8, valid=VALID, inactive=60)
    if not store.cache.watched_by_kernel:
        pytest.skip("no inotify here: the cache fstats every use")
    yield store
    store.close()


def served(store: SharedFiles, name: str) -> bytes:
    store.sync()  # as the server does before each request
    f = store.open(name)
    try:
        return f.data if f.data is not None else os.pread(f.fd, f.size + 1, 0)  # a miss reads by offset
    finally:
        f.close()


def trusted(store: SharedFiles, name: str) -> None:
    """Use ``name`` until its stat is trusted (from its first hit, where its bytes can be kept)."""
    for _ in range(4):
        store.sync()
        store.open(name).close()


def watches() -> int:
    """The kernel's own count of this process's inotify watches (/proc/self/fdinfo)."""
    count = 0
    for fd in os.listdir("/proc/self/fd"):
        try:
            if os.readlink(f"/proc/self/fd/{fd}") != "anon_inode:inotify":
                continue
            with open(f"/proc/self/fdinfo/{fd}") as info:
                count += sum(line.startswith("inotify wd:") for line in info)
        except OSError:  # closed meanwhile (the listing's own descriptor)
            pass
    return count


def test_a_settled_file_is_trusted_from_its_first_hit(store, root) -> None:
    before = watches()
    store.sync()
    first = store.open("a.txt")  # the miss: opened, nothing kept, nothing watched
    assert first.fd >= 0 and first.data is None and store.cached("a.txt") is None
    first.close()
    assert watches() == before
    store.sync()
    hit = store.open("a.txt")  # the first hit: its bytes kept, the kernel watching it, trusted
    assert (hit.fd, hit.data) == (-1, b"version 1\n") and store.cached("a.txt") is hit
    assert watches() == before + 1
    with open(root / "a.txt", "r+b") as f:
        f.write(b"VERSION 2\n")  # same size, right after: only the watch can tell
    assert served(store, "a.txt") == b"VERSION 2\n"


def test_a_change_before_the_watch_is_not_trusted_over(store, root, monkeypatch) -> None:
    watcher = store.cache.watcher
    watch = watcher.watch

    def late(fd: int) -> int | None:  # the file changes after its bytes were read, before the watch
        (root / "a.txt").write_bytes(b"VERSION 2\n")
        return watch(fd)

    monkeypatch.setattr(watcher, "watch", late)
    store.sync()
    store.open("a.txt").close()
    store.sync()
    hit = store.open("a.txt")
    assert hit.data == b"version 1\n" and store.cached("a.txt") is None  # its bytes as read, not trusted
    hit.close()
    assert served(store, "a.txt") == b"VERSION 2\n"


def test_between_syncs_a_watched_file_is_not_stat_again(store, root) -> None:
    trusted(store, "a.txt")
    with open(root / "a.txt", "r+b") as f:
        f.write(b"VERSION 2\n")  # same size: only the event or an fstat can tell
    f = store.open("a.txt")  # no sync: the stat of the last use stands
    assert f.data == b"version 1\n"
    f.close()
    assert served(store, "a.txt") == b"VERSION 2\n"  # the sync took the event in


@pytest.mark.parametrize("change", ["write", "truncate", "touch", "append"])
def test_a_change_in_place_is_seen_by_the_next_request(store, root, change) -> None:
    trusted(store, "a.txt")
    path = root / "a.txt"
    if change == "write":
        st = os.stat(path)
        path.write_bytes(b"version 2\n")
        os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns))  # mtime put back: ctime still moves
        assert served(store, "a.txt") == b"version 2\n"
    elif change == "truncate":
        os.truncate(path, 3)
        assert served(store, "a.txt") == b"ver"
    elif change == "touch":
        os.utime(path, ns=(1, 1))  # the bytes stay; the Last-Modified and ETag must not
        store.sync()
        f = store.open("a.txt")
        assert f.mtime_ns == 1
        f.close()
    else:
        with open(path, "ab") as f:
            f.write(b"more\n")
        assert served(store, "a.txt") == b"version 1\nmore\n"


def test_a_watched_file_deleted_or_renamed_over_is_seen_by_the_next_request(store, root) -> None:
    trusted(store, "a.txt")
    trusted(store, "b.txt")
    (root / "new.txt").write_bytes(b"replaced\n")
    os.rename(root / "new.txt", root / "a.txt")
    assert served(store, "a.txt") == b"replaced\n"
    os.remove(root / "b.txt")
    store.sync()
    with pytest.raises(HTTPError) as refused:
        store.open("b.txt")
    assert refused.value.status == 404


def test_a_lost_event_queue_makes_every_file_stat_again(store, root) -> None:
    trusted(store, "a.txt")
    trusted(store, "b.txt")
    with open("/proc/sys/fs/inotify/max_queued_events") as f:
        limit = int(f.read())
    fd = os.open(root / "b.txt", os.O_WRONLY)
    try:
        for _ in range(limit // 2 + 10):  # the queue overflows and later events are lost
            os.pwrite(fd, b"v", 0)  # a modify, then an attrib: the kernel merges only repeats
            os.fchmod(fd, 0o644)
    finally:
        os.close(fd)
    (root / "a.txt").write_bytes(b"VERSION 9\n")  # its event is lost with the overflow
    assert served(store, "a.txt") == b"VERSION 9\n"


def test_a_write_inotify_cannot_see_is_seen_within_the_validity_window(store, root) -> None:
    trusted(store, "a.txt")
    with open(root / "a.txt", "r+b") as f, mmap.mmap(f.fileno(), 0) as mapped:
        mapped[:7] = b"MAPPED!"  # writes through a shared mapping make no inotify event
        mapped.flush()
    deadline = time.monotonic() + VALID * 4
    while served(store, "a.txt") != b"MAPPED! 1\n":
        assert time.monotonic() < deadline, "an unseen change outlived the validity window"
        time.sleep(0.05)


def test_a_second_write_through_one_mapping_is_seen_at_the_revalidation_as_a_new_version(store, root) -> None:
    """The second write through the same shared mapping moves no time (the page is already dirty
    and writable): the revalidation reads the kept bytes again, and what is given for them is a
    new version, with the CRC-32 of exactly those bytes."""
    import zlib

    with open(root / "a.txt", "r+b") as f, mmap.mmap(f.fileno(), 0) as mapped:
        mapped[:7] = b"FIRST 1"  # moves the times: seen as any write is
        trusted(store, "a.txt")
        first = store.cached("a.txt")
        assert first.data == b"FIRST 1 1\n" and first.crc == zlib.crc32(first.data)
        before = os.stat(root / "a.txt")
        mapped[:7] = b"AGAIN 2"
        after = os.stat(root / "a.txt")
        if (after.st_mtime_ns, after.st_ctime_ns) != (before.st_mtime_ns, before.st_ctime_ns):
            pytest.skip("the kernel wrote the page back between the two writes")
        assert served(store, "a.txt") == b"FIRST 1 1\n"  # within the window: the kept bytes
        time.sleep(VALID)
        assert served(store, "a.txt") == b"AGAIN 2 1\n"  # the revalidation compared the bytes
    trusted(store, "a.txt")
    again = store.cached("a.txt")
    assert again is not first and again.data == b"AGAIN 2 1\n" and again.crc == zlib.crc32(again.data)
    assert again.version[:5] == first.version[:5] and again.version != first.version  # same stat, new token
    assert store.crc32s([again]) == [zlib.crc32(b"AGAIN 2 1\n")]


def test_the_kernel_watches_at_most_what_the_cache_holds(store, root) -> None:
    before = watches()
    for i in range(20):
        (root / f"f{i}.txt").write_bytes(b"%d\n" % i)
    for i in range(20):
        trusted(store, f"f{i}.txt")
        assert watches() - before <= 8  # the cache's size: evicted entries take their watch along
    assert watches() - before == 8
    store.close()  # and the watcher's descriptor with it: no watch is left behind
    assert watches() == before


def test_a_use_while_another_thread_takes_events_in_waits_for_them(store, root, monkeypatch) -> None:
    """Pool threads open files too (blocking handlers): one that comes while another thread is
    reading the kernel's queue must not trust the stat that queue is about to clear."""
    import threading

    trusted(store, "a.txt")
    with open(root / "a.txt", "r+b") as f:
        f.write(b"VERSION 2\n")
    watcher = store.cache.watcher  # held open mid-read, the only way to widen the window
    inside, release = threading.Event(), threading.Event()
    real_read = type(watcher).read

    def slow_read(self):
        events = real_read(self)
        inside.set()
        release.wait(10)
        return events

    monkeypatch.setattr(type(watcher), "read", slow_read)
    store.sync()
    first: list[bytes] = []
    second: list[bytes] = []
    a = threading.Thread(target=lambda: first.append(served_now(store)))
    a.start()
    assert inside.wait(10)
    b = threading.Thread(target=lambda: second.append(served_now(store)))
    b.start()
    b.join(0.3)  # it waits for the take-in (without the wait it would be done, with stale bytes)
    release.set()
    a.join(10)
    b.join(10)
    assert first == second == [b"VERSION 2\n"]


def served_now(store: SharedFiles) -> bytes:
    """The bytes a use gives without a sync of its own (another thread's request is in flight)."""
    f = store.open("a.txt")
    try:
        return f.data if f.data is not None else os.pread(f.fd, f.size + 1, 0)
    finally:
        f.close()


def test_a_trusted_file_is_known_without_opening_it_until_it_changes(store, root) -> None:
    assert store.cached("a.txt") is None  # never opened
    trusted(store, "a.txt")
    f = store.open("a.txt")
    version = f.version
    f.close()
    # What a remembered head sends, and what opening it gives: no descriptor, only the bytes, in
    # one object per version that every request shares (a close gives nothing back).
    known = store.cached("a.txt")
    assert (known.fd, known.data, known.version) == (-1, b"version 1\n", version)
    assert (known.path, known.name, known.content_type, known.size) == ("a.txt", "a.txt", "text/plain; charset=utf-8", 10)
    # Its batch signature too, made once: the facts a plain one would hold, in one kept object.
    assert type(known.signature) is KeptSignature and file_signature(known) is known.signature
    assert tuple(known.signature) == ("a.txt", "text/plain; charset=utf-8", *version[:5], "a.txt", None)
    assert store.cached_all(["a.txt", "b.txt", "a.txt"]) == [known, None, known]
    for _ in range(2):
        opened = store.open("a.txt")
        assert opened is known
        opened.close()
    assert (known.fd, known.data, known.version) == (-1, b"version 1\n", version)
    with open(root / "a.txt", "r+b") as changed:
        changed.write(b"VERSION 2\n")
    store.sync()  # the next request
    assert store.cached("a.txt") is None  # changed: opened (and fstat-ed) again
    opened = store.open("a.txt")
    assert opened.fd >= 0 and opened.version != version
    opened.close()
    assert store.cache.entries["a.txt"].made is None  # the old bytes are let go with the new read
    trusted(store, "a.txt")
    again = store.cached("a.txt")
    assert again is not known and again.data == b"VERSION 2\n" and again.version == opened.version
    assert known.data == b"version 1\n"  # a response still sending the old version keeps its bytes
    time.sleep(VALID)
    checked = store.cache.entries["a.txt"].checked
    assert store.cached("a.txt") is again  # past the validity window: checked, unchanged, the same object
    assert store.cache.entries["a.txt"].checked > checked  # (and its signature) again, for another window
    # The old version's bytes are no longer held by the cache beside the new ones it counts.
    entry = store.cache.entries["a.txt"]  # what the byte budget counts
    assert entry.made is again and again.data is entry.small[1]
    assert store.cache.small_total == len(b"VERSION 2\n")


@pytest.mark.parametrize("portable", [False, True])
def test_a_batch_opens_its_trusted_files_as_open_would(root, settled, portable) -> None:
    """A batch (plan/batch.py's open_all) takes the trusted files of the shared store in one
    call: the same objects ``open`` gives, the others opened; a portable identity's are made anew."""
    from axon.plan.batch import open_all

    store = SharedFiles(FileStore(root, portable_identity=portable), size=8, valid=VALID, inactive=60)
    if not store.cache.watched_by_kernel:
        pytest.skip("no inotify here: the cache fstats every use")
    try:
        trusted(store, "a.txt")
        store.sync()
        opened = open_all(store, ["a.txt", "b.txt", "a.txt"])
        assert list(opened) == ["a.txt", "b.txt"]
        a, b = opened["a.txt"], opened["b.txt"]
        assert (a is store.cached("a.txt")) is not portable and a.data == b"version 1\n"
        if portable:  # named by the facts every copy shares, as open names it
            assert (a.inode, a.device, a.ctime_ns) == (0, 0, a.mtime_ns)
        assert b.fd >= 0 and b.shared  # not trusted yet: opened through the cache
        for f in opened.values():
            f.close()
    finally:
        store.close()


def test_a_trusted_file_leaves_the_collector_nothing_to_walk(root, settled) -> None:
    """Each cached file would cost every collection of the old generation its tracked objects
    (and their references): a trusted one holds its entry, its TrustedFile and that file's kept
    signature, each made untracked (axon.untracked), and nothing else the collector tracks (no
    pair of the version and what was made, no list of the watch's entries)."""
    names = [f"n{i}.bin" for i in range(200)]
    for name in names:
        (root / name).write_bytes(name.encode())
    store = SharedFiles(FileStore(root), size=len(names), valid=60, inactive=60)
    if not store.cache.watched_by_kernel:
        pytest.skip("no inotify here: nothing is trusted")
    try:
        for name in names:
            trusted(store, name)
        assert all(store.cached(name) is not None for name in names)
        gc.collect()
        gc.collect()  # a tuple is let go once its items are: (size, times) inside the kept bytes' tuple
        before = Counter(type(o).__name__ for o in gc.get_objects())
        store.cache.clear()
        gc.collect()
        left = before - Counter(type(o).__name__ for o in gc.get_objects())
        assert sum(left.values()) <= 40, left  # a few of the cache's own, none a file
    finally:
        store.close()


def test_a_trusted_file_checked_ahead_of_its_window_keeps_what_was_made_of_it(store) -> None:
    """The sweep's check ahead (FileCache.refresh) is a use's check: the same file version stays
    trusted, so what was made of it (a remembered head's answer) still stands."""
    trusted(store, "a.txt")
    entry = store.cache.entries["a.txt"]
    known, first = entry.known, entry.checked
    assert known is not None
    time.sleep(VALID / 2)
    served(store, "a.txt")  # used in its window
    assert store.cache.refresh(store.cache.keys(), 0, VALID, 8) is None
    assert entry.checked > first and entry.known is known


def test_a_write_inotify_cannot_see_is_found_by_the_check_ahead(store, root) -> None:
    trusted(store, "a.txt")
    known = store.cache.entries["a.txt"].known
    with open(root / "a.txt", "r+b") as f, mmap.mmap(f.fileno(), 0) as mapped:
        mapped[:7] = b"MAPPED!"  # no inotify event
        mapped.flush()
    time.sleep(VALID / 2)
    store.cache.refresh(store.cache.keys(), 0, VALID, 8)
    assert store.cache.entries["a.txt"].known is not known
    assert served(store, "a.txt") == b"MAPPED! 1\n"
