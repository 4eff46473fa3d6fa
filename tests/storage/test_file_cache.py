"""The open-file cache (axon.storage.file_cache) behind SharedFiles.open: shared descriptors, and
exactly when a change on disk is seen. Real files, real descriptors; no clock is faked (the
validity window is made short instead).
"""

from __future__ import annotations

import gc
import os
import threading
import time
import weakref
from pathlib import Path

import pytest

from axon.errors import HTTPError
from axon.storage.file_cache import FileCache
from axon.storage.local import FileStore
from axon.storage.shared_files import SharedFiles

VALID = 0.2  # seconds a path's resolution is trusted in these tests
INACTIVE = 0.6  # seconds an unused entry stays


def fd_targets() -> list[str]:
    out = []
    for name in os.listdir("/proc/self/fd"):
        try:
            out.append(os.readlink(f"/proc/self/fd/{name}"))
        except OSError:
            pass
    return out


def read(f) -> bytes:
    """What a request would send of ``f``: its bytes (a trusted file has no descriptor), else read."""
    return f.data if f.fd < 0 else os.pread(f.fd, f.size + 1, 0)


@pytest.fixture
def root(tmp_path: Path) -> Path:
    root = Path(os.path.realpath(tmp_path)) / "root"
    (root / "sub").mkdir(parents=True)
    (root / "a.txt").write_bytes(b"version 1\n")
    (root / "b.txt").write_bytes(b"B")
    (root / "c.txt").write_bytes(b"C")
    (root / "sub" / "x.txt").write_bytes(b"X")
    (root / "sub" / "y.txt").write_bytes(b"Y")
    (root / ".hidden").write_bytes(b"H")
    (tmp_path / "outside.txt").write_bytes(b"SECRET")
    return root


class Requests(SharedFiles):
    """Shared files used as the server uses them: each open is a new request's, after its sync."""

    def open(self, requested: str):
        self.sync()
        return super().open(requested)


@pytest.fixture(params=["watched", "fstat"])
def store(root: Path, request):
    """The cache as axon serve makes it (the kernel watching its files where it can), and with
    an ``fstat`` every use (no inotify): the same behaviour either way."""
    store = Requests(FileStore(root), size=64, valid=VALID, inactive=INACTIVE, watch=request.param == "watched")
    yield store
    store.close()


def test_a_hit_shares_the_descriptor_and_closing_keeps_it_open(store) -> None:
    first = store.open("a.txt")
    fd = first.fd
    first.close()
    first.close()  # a second close gives nothing back twice
    os.fstat(fd)  # still open: the cache holds it
    second = store.open("a.txt")
    assert second.fd == fd and read(second) == b"version 1\n"
    third = store.open("a.txt")
    assert third.fd == fd  # two users at once
    second.close()
    third.close()
    os.fstat(fd)


def test_closing_the_cache_closes_idle_descriptors(store) -> None:
    f = store.open("a.txt")
    fd = f.fd
    f.close()
    store.close()
    with pytest.raises(OSError):
        os.fstat(fd)


def test_in_place_edits_are_seen_at_once(store, root) -> None:
    f = store.open("a.txt")
    before = (f.size, f.mtime_ns, f.ctime_ns)
    f.close()
    (root / "a.txt").write_bytes(b"version two, longer\n")  # same inode, rewritten
    g = store.open("a.txt")
    assert read(g) == b"version two, longer\n" and g.size == 20
    assert (g.size, g.mtime_ns, g.ctime_ns) != before
    g.close()
    os.truncate(root / "a.txt", 3)
    h = store.open("a.txt")
    assert h.size == 3 and read(h) == b"ver"
    h.close()


def test_a_rename_over_the_file_is_seen_at_once(store, root) -> None:
    old = store.open("a.txt")  # a response still streaming the old file
    (root / "a.new").write_bytes(b"replaced")
    os.replace(root / "a.new", root / "a.txt")
    new = store.open("a.txt")
    assert read(new) == b"replaced" and new.inode != old.inode and new.fd != old.fd
    assert read(old) == b"version 1\n"  # the old reader keeps its bytes
    assert f"{root}/a.txt (deleted)" in fd_targets()
    old.close()  # the last user of the replaced file: its descriptor is closed now
    assert f"{root}/a.txt (deleted)" not in fd_targets()
    new.close()


def test_a_deleted_file_is_404_at_once(store, root) -> None:
    store.open("a.txt").close()
    os.remove(root / "a.txt")
    with pytest.raises(HTTPError) as err:
        store.open("a.txt")
    assert err.value.status == 404
    assert not [t for t in fd_targets() if t.startswith(f"{root}/a.txt")]  # the cached descriptor was dropped


def test_failures_are_not_cached(store, root) -> None:
    with pytest.raises(HTTPError) as err:
        store.open("new.txt")
    assert err.value.status == 404
    (root / "new.txt").write_bytes(b"N")
    f = store.open("new.txt")
    assert read(f) == b"N"
    f.close()
    for bad in (".hidden", "../outside.txt", "/etc/passwd", "sub"):
        for _ in range(2):
            with pytest.raises(HTTPError):
                store.open(bad)


def test_a_repointed_symlink_is_seen_after_the_validity_window(store, root) -> None:
    os.symlink("sub/x.txt", root / "link")
    f = store.open("link")
    assert read(f) == b"X"
    f.close()
    os.remove(root / "link")
    os.symlink("sub/y.txt", root / "link")
    g = store.open("link")
    assert read(g) == b"X"  # the documented window: which file a path names is trusted VALID s
    g.close()
    time.sleep(VALID * 1.5)
    h = store.open("link")
    assert read(h) == b"Y"
    h.close()


def test_a_symlink_swapped_to_leave_the_root_never_opens_outside(store, root, tmp_path) -> None:
    os.symlink("sub/x.txt", root / "link")
    store.open("link").close()
    os.remove(root / "link")
    os.symlink(tmp_path / "outside.txt", root / "link")
    within = store.open("link")
    assert read(within) == b"X"  # the file it named when it was resolved, inside the root
    within.close()
    time.sleep(VALID * 1.5)
    with pytest.raises(HTTPError) as err:
        store.open("link")
    assert err.value.status == 403
    assert os.path.realpath(tmp_path / "outside.txt") not in fd_targets()


def test_a_directory_moved_out_and_linked_back_is_refused_after_the_validity_window(store, root, tmp_path) -> None:
    """The directory a cached file is in is moved out of the root and a symlink to it left in its
    place: the same file, by a path that now leaves the root. The check every ``valid`` seconds
    walks the path by the rules, so it is refused, as a fresh open would be."""
    store.open("sub/x.txt").close()
    os.rename(root / "sub", tmp_path / "moved")
    os.symlink(tmp_path / "moved", root / "sub")
    time.sleep(VALID * 1.5)
    with pytest.raises(HTTPError) as err:
        store.open("sub/x.txt")
    assert err.value.status == 403
    assert str(tmp_path / "moved" / "x.txt") not in fd_targets()


def test_a_symlink_swapped_to_a_dot_file_is_refused_after_the_validity_window(store, root) -> None:
    os.symlink("sub/x.txt", root / "link")
    store.open("link").close()
    os.remove(root / "link")
    os.symlink(".hidden", root / "link")
    within = store.open("link")
    assert read(within) == b"X"  # the file it named when it was resolved, a visible one
    within.close()
    time.sleep(VALID * 1.5)
    for _ in range(2):  # refused, so never cached
        with pytest.raises(HTTPError) as err:
            store.open("link")
        assert (err.value.status, err.value.code) == (403, "hidden")
    assert str(root / ".hidden") not in fd_targets()


def test_the_least_recently_used_entry_is_evicted_and_closed_when_idle(root) -> None:
    store = SharedFiles(FileStore(root), size=2, valid=60)
    a = store.open("a.txt")  # held: evicted later, closed only when released
    store.open("b.txt").close()
    store.open("b.txt").close()  # b is now more recent than a
    c = store.open("c.txt")  # evicts a (least recently used)
    assert len(store.cache) == 2
    assert read(a) == b"version 1\n"  # still readable by its user

    def cached() -> list[str]:
        return sorted(t.rsplit("/", 1)[-1] for t in fd_targets() if t.startswith(f"{root}/"))

    assert cached() == ["a.txt", "b.txt", "c.txt"]
    a.close()
    assert cached() == ["b.txt", "c.txt"]
    store.open("sub/x.txt").close()  # evicts b, idle: closed at once
    assert cached() == ["c.txt", "x.txt"]
    c.close()
    store.close()


def test_threads_sharing_the_cache_leak_nothing(root) -> None:
    store = SharedFiles(FileStore(root), size=3, valid=0.01)  # constant eviction and expiry
    paths = ["a.txt", "b.txt", "c.txt", "sub/x.txt", "sub/y.txt"]
    expected = {p: (root / p).read_bytes() for p in paths}
    errors: list[BaseException] = []

    def work(seed: int) -> None:
        try:
            for i in range(2000):
                p = paths[(seed + i) % len(paths)]
                f = store.open(p)
                try:
                    assert read(f) == expected[p]
                finally:
                    f.close()
        except BaseException as exc:  # noqa: BLE001 - reported below
            errors.append(exc)

    threads = [threading.Thread(target=work, args=(n,)) for n in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors, errors[0]
    open_files = [t for t in fd_targets() if t.startswith(str(root)) and t.endswith(".txt")]
    assert len(open_files) == len(store.cache) <= 3
    store.close()
    assert not [t for t in fd_targets() if t.startswith(str(root)) and t.endswith(".txt")]


# -- small files: their bytes kept too -------------------------------------------------------------


@pytest.fixture
def settled(monkeypatch):
    """Treat every file as settled (its last change long enough ago to trust its stat)."""
    from axon.storage import file_cache

    monkeypatch.setattr(file_cache, "SETTLED_NS", -(10**18))


def test_a_small_settled_file_is_served_from_memory(store, root, settled) -> None:
    store.open("a.txt").close()  # the miss opens it
    first = store.open("a.txt")  # the first hit reads it
    assert first.data == b"version 1\n" and first.segment(0, first.size) == b"version 1\n"
    assert first.segment(2, 5) == b"rsi"
    first.close()
    os.truncate(root / "a.txt", 0)
    os.truncate(root / "a.txt", 10)  # same size, new bytes (zeros), new ctime
    second = store.open("a.txt")
    assert second.data == b"\0" * 10
    second.close()
    for _ in range(3):  # (watched) the stat trusted
        store.open("a.txt").close()
    os.truncate(root / "a.txt", 4)
    third = store.open("a.txt")
    assert third.data == b"\0" * 4
    third.close()


def test_a_rewrite_that_restores_size_and_mtime_is_still_seen(store, root, settled) -> None:
    for _ in range(5):  # cached bytes, "version 1\n", and (watched) the stat trusted
        store.open("a.txt").close()
    st = os.stat(root / "a.txt")
    with open(root / "a.txt", "r+b") as f:
        f.write(b"VERSION 1\n")
    os.utime(root / "a.txt", ns=(st.st_atime_ns, st.st_mtime_ns))  # mtime put back; ctime moves on
    f = store.open("a.txt")
    assert f.data == b"VERSION 1\n" and os.pread(f.fd, 20, 0) == b"VERSION 1\n"
    f.close()


def test_recently_changed_and_large_files_are_read_by_offset(store, root) -> None:
    (root / "big.bin").write_bytes(b"x" * (64 * 1024))
    for name in ("a.txt", "big.bin"):  # a.txt was just written: its stat is not to be trusted yet
        store.open(name).close()
        f = store.open(name)
        assert f.data is None and f.segment(0, f.size) == (f.fd, 0, f.size)
        f.close()


def test_prune_closes_what_was_not_used_for_the_idle_time(store, root) -> None:
    held = store.open("b.txt")  # in use while pruned: closed when its user is done
    store.open("a.txt").close()
    os.remove(root / "a.txt")  # deleted, and nobody asks for it again
    time.sleep(VALID * 1.5)
    store.prune()  # past the validity, not the idle time: kept
    assert len(store.cache) == 2
    time.sleep(INACTIVE)
    store.prune()
    assert len(store.cache) == 0
    assert f"{root}/a.txt (deleted)" not in fd_targets()  # its space is given back
    assert f"{root}/b.txt" in fd_targets() and read(held) == b"B"
    held.close()
    assert f"{root}/b.txt" not in fd_targets()


def test_a_path_past_its_validity_is_checked_not_opened_again(store, root) -> None:
    """As nginx's open_file_cache_valid: once the window passed, the path is checked (a stat), and
    the same file keeps its descriptor; a file used now and then stays open, not one open a use."""
    f = store.open("sub/x.txt")
    fd = f.fd
    f.close()
    for _ in range(3):
        time.sleep(VALID * 1.2)
        store.prune()
        g = store.open("sub/x.txt")
        assert g.fd == fd and read(g) == b"X"
        g.close()
    assert fd_targets().count(f"{root}/sub/x.txt") == 1


def test_a_pool_larger_than_the_bound_holds_at_most_size_descriptors(root) -> None:
    (root / "pool").mkdir()
    for i in range(50):
        (root / "pool" / f"{i}.bin").write_bytes(b"%d" % i)
    store = SharedFiles(FileStore(root), size=10, valid=VALID, inactive=INACTIVE)
    try:
        for round_ in range(3):
            for i in range(50):
                f = store.open(f"pool/{i}.bin")
                assert read(f) == b"%d" % i
                f.close()
        assert len(store.cache) == 10
        assert sum(t.startswith(f"{root}/pool/") for t in fd_targets()) == 10
    finally:
        store.close()
    assert not any(t.startswith(f"{root}/pool/") for t in fd_targets())


def test_small_files_bytes_stay_within_their_budget(root, settled) -> None:
    (root / "pool").mkdir()
    for i in range(20):
        (root / "pool" / f"{i}.bin").write_bytes(bytes([i]) * 1000)
    store = SharedFiles(FileStore(root), size=64, valid=VALID, inactive=INACTIVE, small_bytes=5000)
    try:
        kept = 0
        for i in range(20):
            store.open(f"pool/{i}.bin").close()  # the miss opens it, a hit may keep its bytes
            f = store.open(f"pool/{i}.bin")
            kept += f.data is not None
            assert read(f) == bytes([i]) * 1000
            f.close()
        assert kept == 5 and store.cache.small_total == 5000
        store.close()  # dropped entries give their bytes back
    finally:
        store.close()


def test_a_descriptor_closed_by_someone_else_is_forgotten_not_reused(store, root, caplog) -> None:
    f = store.open("a.txt")
    os.close(f.fd)  # a handler's mistake: the number may now go to any file
    other = os.open(root / "b.txt", os.O_RDONLY)  # likely the same number
    try:
        g = store.open("a.txt")
        assert read(g) == b"version 1\n" and g.fd != other
        g.close()
        f.close()  # the view's release must not close what is now someone else's
        os.fstat(other)
        assert "closed by someone else" in caplog.text
    finally:
        os.close(other)


def test_long_paths_are_not_cached(store, root) -> None:
    from axon.storage.local import MAX_CACHED_PATH

    long = "./" * MAX_CACHED_PATH + "a.txt"
    f = store.open(long)
    assert read(f) == b"version 1\n" and not f.shared
    f.close()
    assert len(store.cache) == 0


def test_an_immutable_cache_trusts_kept_bytes_at_the_use_that_keeps_them(tmp_path: Path) -> None:
    """A cache of files whose names never change bytes (the objects' disk tier) needs no watch: the
    use that keeps a small file's bytes trusts them, and peek gives them from then on, nothing held."""
    from axon.storage.file_cache import FileCache

    path = tmp_path / "kept"
    path.write_bytes(b"one version")
    cache = FileCache(10, 60.0, immutable=True)
    fd = os.open(path, os.O_RDONLY)
    st = os.fstat(fd)
    entry = cache.add(str(path), fd, (st.st_dev, st.st_ino), str(path), "")
    assert cache.peek(str(path)) is None
    assert entry.content(st)[1] == b"one version"
    known = cache.admit(str(path), entry, st)
    entry.release()
    assert known is not None and known.data == b"one version"
    assert cache.peek(str(path)) is known
    cache.clear()
    assert cache.peek(str(path)) is None


def test_an_immutable_cache_trusts_kept_bytes_again_after_their_window(tmp_path: Path) -> None:
    """Past its window a kept file is checked (its name still names it) and trusted again as the
    same object, by a use or by the sweep's check ahead: a tier's hit stays one lookup."""
    from axon.storage.file_cache import FileCache

    path = tmp_path / "kept"
    path.write_bytes(b"one version")
    cache = FileCache(10, 0.2, immutable=True, recheck=lambda entry, now, ahead: now)
    fd = os.open(path, os.O_RDONLY)
    st = os.fstat(fd)
    entry = cache.add(str(path), fd, (st.st_dev, st.st_ino), str(path), "")
    entry.content(st)
    known = cache.admit(str(path), entry, st)
    entry.release()
    assert known is not None
    time.sleep(0.25)
    assert cache.peek(str(path)) is known  # checked again by this use, trusted as before
    time.sleep(0.1)
    assert cache.refresh(cache.keys(), 0, 0.2, 8) is None
    assert entry.known is known and cache.peek(str(path)) is known
    cache.clear()


def test_a_cache_let_go_is_freed_though_its_entries_are_not_walked(tmp_path):
    """Its entries name it and are kept out of the cycle collector's walk (axon.untracked): a
    cache closed, or abandoned (a forked child's parent's), lets them go, and is freed."""
    (tmp_path / "a").write_bytes(b"A")
    for let_go in (FileCache.close, FileCache.abandon):
        cache = FileCache(4)
        fd = os.open(tmp_path / "a", os.O_RDONLY)
        cache.add("a", fd, (0, 0), "a", "text/plain").release()
        let_go(cache)
        left = weakref.ref(cache)
        del cache
        gc.collect()
        assert left() is None, let_go
        if let_go is FileCache.abandon:
            os.close(fd)  # abandoned: closed by nobody (the parent's, in a forked child)


def test_a_walked_cache_is_freed_by_the_collector_when_what_it_trusts_leads_back_to_it(tmp_path):
    """``walked``: what ``trusted`` makes may name the cache's owner (the disk tier's kept
    versions name what a source sent, and the source its tier): a cycle the collector frees."""
    (tmp_path / "a").write_bytes(b"A")
    cache = FileCache(4, walked=True)
    fd = os.open(tmp_path / "a", os.O_RDONLY)
    entry = cache.add("a", fd, (0, 0), "a", "text/plain")
    assert gc.is_tracked(entry)
    entry.made = [cache]  # what leads back to the cache
    left = weakref.ref(cache)
    del cache, entry
    gc.collect()
    assert left() is None
    os.close(fd)
