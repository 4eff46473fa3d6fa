"""FileStore.list_dir and FileStore.kind: a directory listed by the rules files are served by.

Nothing outside the root is listed; dot-names are never shown unless hidden files are allowed;
a symlink is shown, as what its target is, only when that target resolves inside the root by the
same rules; FIFOs and devices are left out; the number of entries is capped. Both ways of
resolving (openat2 and the portable walk) give the same answers.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from axon.errors import HTTPError
from axon.storage import Entry
from axon.storage.local import FileStore


@pytest.fixture
def tree(tmp_path: Path) -> Path:
    """``tmp_path/root`` (listed) beside ``tmp_path/outside`` (never to be listed)."""
    base = Path(os.path.realpath(tmp_path))
    root = base / "root"
    (root / "sub" / "deeper").mkdir(parents=True)
    (root / "a.txt").write_bytes(b"A" * 10)
    (root / "sub" / "c.txt").write_bytes(b"C" * 3)
    (root / ".hidden").write_bytes(b"H" * 7)
    (root / ".hid").mkdir()
    (root / ".hid" / "x.txt").write_bytes(b"X")
    (root / "ünï cödé.txt").write_bytes(b"U")
    (root / 'q"<&>\r\n.txt').write_bytes(b"Q")
    (root / "back\\slash").write_bytes(b"B")  # no request can name it: never listed
    os.mkfifo(root / "fifo")
    fd = os.open(bytes(root) + b"/bad-\xff.txt", os.O_CREAT | os.O_WRONLY, 0o644)  # not UTF-8
    os.close(fd)
    (base / "outside" / "dir").mkdir(parents=True)
    (base / "outside" / "secret.txt").write_bytes(b"SECRET")
    links = {
        "in_file": "a.txt",
        "in_abs": root / "a.txt",
        "in_dir": "sub",
        "sub/up": "../a.txt",
        "out_abs": base / "outside" / "secret.txt",
        "out_rel": "../outside/secret.txt",
        "out_dir": "../outside",
        "etc": "/etc",
        "null": "/dev/null",
        "to_fifo": "fifo",
        "to_hidden": ".hidden",
        "to_hid_dir": ".hid",
        "through_hid": ".hid/../a.txt",
        "dangling": "nope.txt",
        "loop1": "loop2",
        "loop2": "loop1",
        "rootlink": ".",
    }
    for name, target in links.items():
        os.symlink(target, root / name)
    return root


@pytest.fixture(params=["openat2", "walk"])
def mode(request) -> str:
    return request.param


def make_store(root: Path, mode: str, **kwargs) -> FileStore:
    if mode == "walk":
        return FileStore(root, openat2=False, **kwargs)
    store = FileStore(root, **kwargs)
    if store._openat2 is None:
        pytest.skip("openat2 is not available here")
    return store


def listed(store: FileStore, path: str = "", limit: int = 1000) -> dict[str, Entry]:
    entries, truncated = store.list_dir(path, limit)
    assert not truncated
    assert len({e.name for e in entries}) == len(entries)
    return {e.name: e for e in entries}


def test_root_listing(tree, mode, open_fds):
    store = make_store(tree, mode)
    before = open_fds()
    got = listed(store)
    assert open_fds() <= before  # every descriptor opened to list is closed again
    assert set(got) == {"sub", "a.txt", "ünï cödé.txt", 'q"<&>\r\n.txt', "in_file", "in_abs", "in_dir", "rootlink"}
    a = os.stat(tree / "a.txt")
    assert got["a.txt"] == Entry("a.txt", "file", 10, a.st_mtime_ns)
    # A symlink is listed as its target: its kind, size and time.
    assert got["in_file"] == Entry("in_file", "file", 10, a.st_mtime_ns)
    assert got["in_abs"] == got["in_file"]._replace(name="in_abs")
    assert got["in_dir"].kind == "dir" and got["sub"].kind == "dir"
    assert got["rootlink"].kind == "dir"  # "." stays inside the root


def test_never_listed(tree, mode):
    """Outside the root, hidden (the name or the target's), dangling, loops, FIFOs, devices,
    names no request could carry: none of them is shown."""
    got = listed(make_store(tree, mode))
    for name in ("out_abs", "out_rel", "out_dir", "etc", "null", "fifo", "to_fifo", ".hidden", ".hid",
                 "to_hidden", "to_hid_dir", "through_hid", "dangling", "loop1", "loop2", "back\\slash"):
        assert name not in got, name
    assert not any(name.startswith("bad-") for name in got)


def test_hidden_listed_when_allowed(tree, mode):
    got = listed(make_store(tree, mode, allow_hidden=True))
    assert {".hidden", ".hid", "to_hidden", "to_hid_dir", "through_hid"} <= set(got)
    assert got["to_hidden"] == Entry("to_hidden", "file", 7, os.stat(tree / ".hidden").st_mtime_ns)
    assert got["to_hid_dir"].kind == "dir"
    for name in ("out_abs", "out_rel", "out_dir", "etc", "null", "fifo", "to_fifo"):
        assert name not in got, name  # the jail does not move with the hidden rule
    assert set(listed(make_store(tree, mode, allow_hidden=True), ".hid/")) == {"x.txt"}


def test_subdirectories(tree, mode):
    store = make_store(tree, mode)
    assert set(listed(store, "sub/")) == {"c.txt", "deeper", "up"}
    assert listed(store, "sub/")["up"].size == 10  # ../a.txt, inside the root
    assert set(listed(store, "in_dir/")) == {"c.txt", "deeper", "up"}  # a symlinked directory
    assert listed(store, "sub/deeper/") == {}
    assert set(listed(store, "sub/..")) == set(listed(store))  # the root, named another way
    assert set(listed(store, "rootlink/")) == set(listed(store))


@pytest.mark.parametrize(
    "path, status, code",
    [
        ("out_dir/", 403, "outside_root"),
        ("etc/", 403, "outside_root"),
        ("../", 403, "outside_root"),
        (".hid/", 403, "hidden"),
        ("to_hid_dir/", 403, "hidden"),
        ("a.txt/", 404, "not_found"),  # a file is not a directory
        ("fifo/", 404, "not_found"),
        ("missing/", 404, "not_found"),
        ("dangling/", 404, "not_found"),
        ("loop1/", 403, "symlink_loop"),
        ("sub\\x/", 400, "bad_path"),
        ("/etc/", 400, "bad_path"),
    ],
)
def test_refused(tree, mode, path, status, code, open_fds):
    store = make_store(tree, mode)
    before = open_fds()
    with pytest.raises(HTTPError) as caught:
        store.list_dir(path, 1000)
    assert (caught.value.status, caught.value.code) == (status, code)
    assert open_fds() <= before


@pytest.mark.parametrize(
    "path, kind",
    [("", "dir"), ("sub", "dir"), ("in_dir", "dir"), ("a.txt", "file"), ("in_file", "file"), ("sub/up", "file")],
)
def test_kind(tree, mode, path, kind):
    assert make_store(tree, mode).kind(path) == kind


@pytest.mark.parametrize(
    "path, status", [("fifo", 403), ("out_dir", 403), ("out_abs", 403), (".hid", 403), ("nope", 404), ("null", 403)]
)
def test_kind_refused(tree, mode, path, status):
    with pytest.raises(HTTPError) as caught:
        make_store(tree, mode).kind(path)
    assert caught.value.status == status


def test_cap(tmp_path, mode):
    """At most ``limit`` entries, and ``truncated`` exactly when there were more (hidden ones
    and those never shown do not count)."""
    root = tmp_path / "many"
    root.mkdir()
    for i in range(5):
        (root / f"f{i}").write_bytes(b"x")
    (root / ".h1").write_bytes(b"h")
    os.symlink("/etc", root / "out")
    store = make_store(root, mode)
    assert store.list_dir("", 5)[1] is False and len(store.list_dir("", 5)[0]) == 5
    entries, truncated = store.list_dir("", 4)
    assert truncated is True and len(entries) == 4
    assert {e.name for e in entries} < {f"f{i}" for i in range(5)}
    entries, truncated = store.list_dir("", 1)
    assert truncated is True and len(entries) == 1


def test_unreadable_directory_is_403(tree, mode):
    if os.geteuid() == 0:
        pytest.skip("root reads every directory")
    locked = tree / "sub" / "deeper"
    locked.chmod(0)
    try:
        with pytest.raises(HTTPError) as caught:
            make_store(tree, mode).list_dir("sub/deeper/", 10)
        assert caught.value.status == 403
    finally:
        locked.chmod(0o755)

