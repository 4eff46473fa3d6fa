"""FileStore(portable_identity=True): the facts that name a file are those every copy of the
tree shares (path, size, mtime), while the store's own caches still go by inode and ctime."""

from __future__ import annotations

import os
import shutil
import zlib
from pathlib import Path

import pytest

from axon.errors import FileChanged
from axon.storage.local import FileStore
from axon.storage.shared_files import SharedFiles

MTIME_NS = 1_700_000_000_123_456_789


def _copy(root: Path, dest: Path) -> Path:
    """A copy of ``root`` (new inodes, new ctimes) with every file's mtime set alike."""
    shutil.copytree(root, dest)
    for tree in (root, dest):
        for path in tree.rglob("*"):
            if path.is_file():
                os.utime(path, ns=(MTIME_NS, MTIME_NS))
    return dest


def _facts(f) -> tuple:
    return (f.path, f.name, f.size, f.mtime_ns, f.ctime_ns, f.inode, f.device, f.content_type)


@pytest.mark.parametrize("cache", [0, 16])
def test_copies_have_the_same_facts(root: Path, tmp_path: Path, cache: int) -> None:
    copy = _copy(root, tmp_path / "copy")
    stores = [FileStore(r, portable_identity=True) for r in (root, copy)]
    if cache:
        stores = [SharedFiles(store, cache) for store in stores]
    for _ in range(2):  # the second round comes from the open-file cache when it is on
        a, b = (s.open("sub/c.json") for s in stores)
        try:
            assert _facts(a) == _facts(b)
            assert (a.inode, a.device, a.ctime_ns) == (0, 0, MTIME_NS)
        finally:
            a.close()
            b.close()


def test_without_it_copies_differ(root: Path, tmp_path: Path) -> None:
    copy = _copy(root, tmp_path / "copy")
    a, b = (FileStore(r).open("a.txt") for r in (root, copy))
    assert a.inode != b.inode
    a.close()
    b.close()


def test_crc_goes_by_the_real_file(root: Path) -> None:
    # Two files of one size and mtime share every portable fact but their path: a CRC kept
    # under those facts would give the second file the first one's.
    (root / "x.bin").write_bytes(b"x" * 100)
    (root / "y.bin").write_bytes(b"y" * 100)
    for name in ("x.bin", "y.bin"):
        os.utime(root / name, ns=(MTIME_NS, MTIME_NS))
    store = FileStore(root, portable_identity=True)
    for name in ("x.bin", "y.bin"):
        f = store.open(name)
        assert store.crc32s([f]) == [zlib.crc32((root / name).read_bytes())]
        f.close()


def test_crc_of_a_file_changed_since_it_was_opened(root: Path) -> None:
    store = FileStore(root, portable_identity=True)
    f = store.open("a.txt")
    (root / "a.txt").write_bytes(b"longer than it was when opened\n")
    with pytest.raises(FileChanged):
        store.crc32s([f])
    f.close()
