"""axon.storage.checked_dirs: the open-file cache's revalidation with each directory resolved once
per window, through SharedFiles as the server uses it. Real files and descriptors; the cache's
clock is a counter the tests move, so that "within" and "after" the window are exact."""

from __future__ import annotations

import os
from pathlib import Path
from types import SimpleNamespace

import pytest

from axon.errors import HTTPError
from axon.storage import checked_dirs
from axon.storage.checked_dirs import CheckedDirs
from axon.storage.local import FileStore
from axon.storage.shared_files import SharedFiles
from test_file_cache import fd_targets

VALID = 5.0


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


@pytest.fixture(autouse=True)
def exact_windows(request, monkeypatch) -> None:
    """A directory's first window starts when it is resolved, so that the tests' times are exact;
    the tests of the phases (``phased``) keep them."""
    if "phased" not in request.keywords:
        monkeypatch.setattr(checked_dirs, "PHASES", 0.0)


def content(shared: SharedFiles, path: str) -> bytes:
    f = shared.open(path)
    try:
        return f.data if f.data is not None else os.pread(f.fd, f.size + 1, 0)
    finally:
        f.close()


@pytest.fixture
def root(tmp_path: Path) -> Path:
    root = Path(os.path.realpath(tmp_path)) / "root"
    (root / "sub").mkdir(parents=True)
    for name in ("x", "y", "z"):
        (root / "sub" / f"{name}.txt").write_bytes(name.upper().encode())
    (tmp_path / "outside").mkdir()
    return root


@pytest.fixture(params=[True, False], ids=["openat2", "walk"])
def shared(root: Path, request):
    clock = Clock()
    shared = SharedFiles(FileStore(root, openat2=request.param), size=64, valid=VALID, watch=False, clock=clock)
    shared.clock = clock
    yield shared
    shared.close()


def revalidate_directory(shared: SharedFiles, path: str) -> None:
    """Move past every entry's window and use ``path``: its directory is resolved now."""
    shared.clock.now += VALID + 1
    content(shared, path)


def test_a_file_checked_through_a_kept_directory_keeps_the_window_of_the_directory(shared, root) -> None:
    """A directory renamed away after it was resolved: its files are served until the window of
    that resolution ends, never until a window counted from their own later check."""
    content(shared, "sub/x.txt"), content(shared, "sub/y.txt")
    revalidate_directory(shared, "sub/y.txt")
    os.rename(root / "sub", root / "gone")
    shared.clock.now += VALID * 0.8
    assert content(shared, "sub/x.txt") == b"X"  # within the window of the directory's resolution
    shared.clock.now += VALID * 0.3  # past it, though not past a window counted from x's check
    with pytest.raises(HTTPError) as err:
        content(shared, "sub/x.txt")
    assert err.value.status == 404


def test_a_file_replaced_in_a_kept_directory_is_seen_at_its_revalidation(shared, root) -> None:
    content(shared, "sub/x.txt"), content(shared, "sub/y.txt")
    os.link(root / "sub" / "x.txt", root / "x-old")  # the old inode keeps a name: st_nlink stays 1
    revalidate_directory(shared, "sub/y.txt")
    (root / "sub" / "new").write_bytes(b"X2")
    os.rename(root / "sub" / "new", root / "sub" / "x.txt")
    assert content(shared, "sub/x.txt") == b"X2"


def test_a_directory_replaced_by_a_symlink_out_of_the_root_is_never_followed(shared, root, tmp_path) -> None:
    """The directory moves out of the root and a symlink to it takes its place: the same files,
    by a path that now leaves the root. Within the window the kept descriptor may still name
    them; nothing new is opened through it; after the window the path is refused."""
    content(shared, "sub/x.txt"), content(shared, "sub/y.txt")
    revalidate_directory(shared, "sub/y.txt")
    os.rename(root / "sub", tmp_path / "outside" / "sub")
    os.symlink(tmp_path / "outside" / "sub", root / "sub")
    (tmp_path / "outside" / "sub" / "new.txt").write_bytes(b"SECRET")
    with pytest.raises(HTTPError) as err:
        content(shared, "sub/new.txt")  # a first open walks the whole path, whatever is kept
    assert err.value.status == 403
    with pytest.raises(HTTPError) as err:
        content(shared, "sub/z.txt")  # not cached: refused as well
    assert err.value.status == 403
    shared.clock.now += VALID
    for path in ("sub/x.txt", "sub/y.txt"):
        with pytest.raises(HTTPError) as err:
            content(shared, path)
        assert err.value.status == 403
    assert not any(t.startswith(str(tmp_path / "outside")) for t in fd_targets())


def test_a_symlink_in_last_place_is_walked_by_the_rules(shared, root, tmp_path) -> None:
    os.symlink("x.txt", root / "sub" / "link")
    os.link(root / "sub" / "x.txt", tmp_path / "outside" / "x.txt")  # the same file, outside the root
    assert content(shared, "sub/link") == b"X"
    revalidate_directory(shared, "sub/link")
    assert content(shared, "sub/link") == b"X"  # a link inside the root stays served
    os.remove(root / "sub" / "link")
    os.symlink(tmp_path / "outside" / "x.txt", root / "sub" / "link")
    shared.clock.now += VALID + 1
    with pytest.raises(HTTPError) as err:
        content(shared, "sub/link")
    assert err.value.status == 403


def test_directories_kept_are_bounded_and_closed_past_their_window(root) -> None:
    clock = Clock()
    dirs = CheckedDirs(FileStore(root), VALID, 4, clock)
    entries = []
    for i in range(12):
        (root / f"d{i}").mkdir()
        (root / f"d{i}" / "f").write_bytes(b"F")
        st = os.stat(root / f"d{i}" / "f")
        entries.append(SimpleNamespace(name=f"d{i}/f", identity=(st.st_dev, st.st_ino)))
    kept = lambda: [t for t in fd_targets() if t.startswith(str(root / "d"))]  # noqa: E731
    for entry in entries:
        assert dirs.still_names(entry, clock.now) == clock.now
        assert len(dirs) <= 4
    assert sorted(kept()) == sorted(str(root / f"d{i}") for i in range(8, 12))  # the evicted ones closed
    clock.now += 1
    assert dirs.still_names(entries[11], clock.now) == clock.now - 1  # within its window: kept
    clock.now += VALID
    dirs.prune()
    assert len(dirs) == 0 and kept() == []


# -- checked ahead of the window's end (FileCache.refresh: the server's sweep) -------------------------

AHEAD = 2.0


def refresh(shared: SharedFiles) -> None:
    """The sweep's walk, whole: every entry in use whose window ends within AHEAD checked."""
    keys, start = shared.cache.keys(), 0
    while start is not None:
        start = shared.cache.refresh(keys, start, AHEAD, 1)


def test_a_file_in_use_is_checked_ahead_of_its_window_and_its_directory_resolved_anew(shared) -> None:
    content(shared, "sub/x.txt")
    revalidate_directory(shared, "sub/x.txt")  # its directory kept from now on
    entry = shared.cache.entries["sub/x.txt"]
    first = entry.checked
    assert first == shared.clock.now
    shared.clock.now += VALID - AHEAD / 2  # used again within its window, which ends within AHEAD
    assert content(shared, "sub/x.txt") == b"X"
    assert entry.checked == first  # a use checks nothing while its window is open
    refresh(shared)
    assert entry.checked == shared.clock.now  # its directory resolved now, not at its first use
    assert shared.cache.entries["sub/x.txt"] is entry


def test_only_files_used_in_their_window_are_checked_ahead(shared) -> None:
    for name in ("x", "y", "z"):
        content(shared, f"sub/{name}.txt")
    first = shared.cache.entries["sub/x.txt"].checked
    shared.clock.now += VALID - AHEAD / 2
    content(shared, "sub/y.txt")
    content(shared, "sub/z.txt")
    shared.clock.now += AHEAD / 2 + 0.5  # x was last used a window ago; y and z in theirs
    refresh(shared)
    assert shared.cache.entries["sub/x.txt"].checked == first  # left to its next request
    assert shared.cache.entries["sub/y.txt"].checked == shared.clock.now
    assert shared.cache.entries["sub/z.txt"].checked == shared.clock.now


def test_a_walk_checks_at_most_what_it_is_given_a_turn(shared) -> None:
    for name in ("x", "y", "z"):
        content(shared, f"sub/{name}.txt")
    shared.clock.now += VALID - AHEAD / 2
    for name in ("x", "y", "z"):
        content(shared, f"sub/{name}.txt")
    keys = shared.cache.keys()
    assert sorted(keys) == ["sub/x.txt", "sub/y.txt", "sub/z.txt"]
    assert shared.cache.refresh(keys, 0, AHEAD, 2) == 2  # two checked: go on from the third
    assert [shared.cache.entries[k].checked == shared.clock.now for k in keys] == [True, True, False]
    assert shared.cache.refresh(keys, 2, AHEAD, 2) is None
    assert shared.cache.entries["sub/x.txt"].checked == shared.clock.now


def test_a_file_moved_out_of_the_root_is_forgotten_by_the_check_ahead(shared, root) -> None:
    content(shared, "sub/x.txt")
    shared.clock.now += VALID - AHEAD / 2
    content(shared, "sub/x.txt")
    (root / "sub" / "x.txt").rename(root.parent / "outside" / "x.txt")
    refresh(shared)
    assert "sub/x.txt" not in shared.cache.entries
    assert str(root.parent / "outside" / "x.txt") not in fd_targets()  # its descriptor closed
    with pytest.raises(HTTPError) as err:
        content(shared, "sub/x.txt")
    assert err.value.status == 404


# -- the phases of directories first resolved together ------------------------------------------------


def tree(root: Path, dirs: int, files: int) -> list[SimpleNamespace]:
    """``dirs`` directories of ``files`` files each, as the cache's entries name them."""
    entries = []
    for d in range(dirs):
        (root / f"c{d:02d}").mkdir()
        for f in range(files):
            path = root / f"c{d:02d}" / f"{f:03d}.bin"
            path.write_bytes(b"F")
            st = os.stat(path)
            entries.append(SimpleNamespace(name=f"c{d:02d}/{f:03d}.bin", identity=(st.st_dev, st.st_ino)))
    return entries


@pytest.mark.phased
def test_directories_the_sweep_resolves_together_get_windows_that_end_apart(root) -> None:
    """Resolved by a check ahead with no record of them, each starts its window up to the look-ahead
    early, by its own phase, never later than when it was resolved; resolved again, its window
    starts then (the offset is kept). A request's resolution (no look-ahead) gets no phase."""
    clock = Clock()
    dirs = CheckedDirs(FileStore(root), VALID, 64, clock)
    entries = tree(root, 20, 1)
    since = [dirs.still_names(entry, clock.now, AHEAD) for entry in entries]
    assert all(clock.now - AHEAD <= s <= clock.now for s in since)
    assert max(since) - min(since) > AHEAD / 2  # spread, not one moment
    assert since == [dirs.still_names(entry, clock.now, AHEAD) for entry in entries]  # one resolution a window
    clock.now += VALID
    assert [dirs.still_names(entry, clock.now, AHEAD) for entry in entries] == [clock.now] * 20  # resolved anew
    dirs.close()
    assert [dirs.still_names(entry, clock.now) for entry in entries] == [clock.now] * 20  # a request's: no phase


@pytest.mark.phased
@pytest.mark.parametrize("phases", [0.0, checked_dirs.PHASES], ids=["without", "with"])
def test_files_first_seen_together_are_checked_in_steps_not_in_one_wave(root, monkeypatch, phases) -> None:
    """400 files in 20 directories, first seen in the same second and used all along, checked
    by the server's sweep once a second (its look-ahead): without phases every file comes due
    in the same sweep, window after window; with them no sweep checks more than 60% of them."""
    monkeypatch.setattr(checked_dirs, "PHASES", phases)
    clock = Clock()
    shared = SharedFiles(FileStore(root), size=1024, valid=VALID, watch=False, clock=clock)
    try:
        names = [entry.name for entry in tree(root, 20, 20)]
        for name in names:
            content(shared, name)
        cache = shared.cache
        checks = []
        for second in range(1, 25):
            clock.now = 1000.0 + second
            for entry in cache.entries.values():
                entry.used = clock.now
            shared.prune()  # as the sweep does first
            before = {name: entry.checked for name, entry in cache.entries.items()}
            keys, start = cache.keys(), 0
            while start is not None:
                start = cache.refresh(keys, start, 2.0, 32)
            checked = [entry for name, entry in cache.entries.items() if before[name] != entry.checked]
            assert all(clock.now - 2.0 <= entry.checked <= clock.now for entry in checked)  # valid - ahead left
            checks.append(len(checked))
        assert len(cache.entries) == 400
        steady = checks[8:]  # past the first windows
        assert sum(steady) > 0
        if phases:
            assert max(steady) <= 240, checks
        else:
            assert max(steady) == 400, checks
    finally:
        shared.close()
