"""axon.storage.shared_files: a local store's files with their descriptors shared between requests,
the source an App built for Axon's server serves through (the cache itself: test_file_cache.py)."""

from __future__ import annotations

import gc
import os
import weakref

import pytest

from axon.storage import Source
from axon.storage.local import FileStore
from axon.storage.shared_files import SharedFiles
from axon.storage.sources import share_open_files


def test_sharing_wraps_a_file_store_and_leaves_it_as_it_was(tmp_path):
    (tmp_path / "a.txt").write_bytes(b"A")
    store = FileStore(tmp_path)
    shared = share_open_files(store, 8)
    assert isinstance(shared, SharedFiles) and shared.store is store
    try:
        first = shared.open("a.txt")
        fd = first.fd
        first.close()
        again = shared.open("a.txt")
        assert again.shared and again.fd == fd  # the descriptor kept
        again.close()
        own = store.open("a.txt")
        assert not own.shared  # the store itself shares nothing
        own.close()
        assert share_open_files(shared, 8) is shared  # shared once: one cache, not two
    finally:
        shared.close()
    assert share_open_files(store, 0) is None


def test_every_member_of_a_source_is_declared_none_forwarded(tmp_path):
    """A Source's members are SharedFiles' own, answering as the store's; nothing is reached
    through __getattr__ (an undeclared member is an AttributeError, as for any class)."""
    (tmp_path / "d").mkdir()
    (tmp_path / "d" / "a.txt").write_bytes(b"A")
    store = FileStore(tmp_path)
    shared = SharedFiles(store, 8)
    try:
        members = [name for name in vars(Source) if not name.startswith("_")] + list(Source.__annotations__)
        assert {"open", "crc32s", "kind", "list_dir", "batch_key", "ready_files", "root", "blocking"} <= set(members)
        for name in members:
            assert hasattr(shared, name), name
        assert "__getattr__" not in vars(SharedFiles)
        with pytest.raises(AttributeError):
            shared.crcs  # the store's own member: reach it as shared.store.crcs  # noqa: B018
        assert shared.kind("d") == store.kind("d") == "dir"
        assert shared.list_dir("d/", 10) == store.list_dir("d/", 10)
        assert shared.batch_key(b"k") == store.batch_key(b"k") and shared.root == store.root
        f = shared.open("d/a.txt")
        assert shared.crc32s([f]) == store.crc32s([f])
        f.close()
    finally:
        shared.close()


def test_a_forked_process_starts_a_cache_of_its_own(tmp_path):
    """An App built before the fork (axon serve's supervisor) shares nothing with its workers:
    the child's cache is new and empty, the parent's keeps its descriptors; in the child the
    parent's cache is let go and freed (its entries, kept out of the collector's walk, name it)."""
    (tmp_path / "a.txt").write_bytes(b"A")
    shared = SharedFiles(FileStore(tmp_path), 8)
    try:
        shared.open("a.txt").close()
        parent_cache = shared.cache
        assert len(parent_cache) == 1
        read, write = os.pipe()
        pid = os.fork()
        if pid == 0:  # the child: report, then leave at once
            try:
                fresh = shared.cache is not parent_cache and len(shared.cache) == 0
                left = weakref.ref(parent_cache)
                del parent_cache
                gc.collect()
                fresh = fresh and left() is None
                f = shared.open("a.txt")
                works = os.pread(f.fd, 1, 0) == b"A" and len(shared.cache) == 1
                f.close()
                os.write(write, b"1" if fresh and works else b"0")
            finally:
                os._exit(0)
        os.close(write)
        said = os.read(read, 1)
        os.close(read)
        os.waitpid(pid, 0)
        assert said == b"1"
        assert shared.cache is parent_cache and len(parent_cache) == 1
    finally:
        shared.close()


def test_a_portable_identity_keeps_no_ready_files_and_names_files_portably(tmp_path):
    (tmp_path / "a.txt").write_bytes(b"A")
    shared = SharedFiles(FileStore(tmp_path, portable_identity=True), 8)
    try:
        assert shared.ready_files is None and shared.portable_identity
        f = shared.open("a.txt")
        assert (f.inode, f.device, f.ctime_ns) == (0, 0, f.mtime_ns) and f.shared
        assert f.version[1] == os.stat(tmp_path / "a.txt").st_ino  # the host's facts kept as its version
        f.close()
    finally:
        shared.close()


def test_closed_it_gives_its_descriptors_back_and_still_serves(tmp_path):
    (tmp_path / "a.txt").write_bytes(b"A")
    shared = SharedFiles(FileStore(tmp_path), 8)
    shared.open("a.txt").close()
    assert len(shared.cache) == 1
    shared.close()
    assert len(shared.cache) == 0
    f = shared.open("a.txt")
    assert os.pread(f.fd, 1, 0) == b"A"
    f.close()
    shared.close()
