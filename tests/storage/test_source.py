"""The storage interface: every source has every member it declares, and its open files too."""

from __future__ import annotations

import inspect

import pytest

from axon.storage import File, Source
from axon.storage.shared_files import SharedFiles

#: The whole Source protocol: what the App, the planners and the runtimes ask of a source.
SOURCE = {"root", "blocking", "for_batch", "body_stream", "health", "open", "crc32s", "kind", "list_dir", "batch_key",
          "ready_files"}


def _members(protocol: type) -> set[str]:
    methods = {name for name, _ in inspect.getmembers(protocol, inspect.isfunction) if not name.startswith("_")}
    return set(getattr(protocol, "__annotations__", {})) | methods


def test_the_local_store_is_a_source_and_its_files_are_files(store):
    assert _members(Source) == SOURCE
    assert {"path", "size", "mtime_ns", "segment", "close"} <= _members(File)
    assert all(hasattr(store, name) for name in SOURCE)
    f = store.open("a.txt")
    try:
        missing = [name for name in _members(File) if not hasattr(f, name)]
        assert missing == []
        assert f.segment(0, f.size).count == f.size  # a FileSlice: no open-file cache here
    finally:
        f.close()


def test_a_store_whose_files_are_shared_is_a_source(store):
    shared = SharedFiles(store, 4)
    try:
        assert [name for name in SOURCE if not hasattr(shared, name)] == []
        assert (shared.root, shared.blocking, shared.for_batch, shared.body_stream) == (store.root, False, None, None)
    finally:
        shared.close()


def test_the_object_source_declares_every_member():
    pytest.importorskip("obstore")
    from axon.storage.objects import ObjectSource

    # ``root`` is the URL each instance is built with; the rest is the class's.
    assert [name for name in SOURCE - {"root"} if not hasattr(ObjectSource, name)] == []
    assert ObjectSource.blocking is False  # on an event loop's thread, asking the store is WouldBlock
