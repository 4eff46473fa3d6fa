"""The storage interface: the local store and its open files have every member it declares."""

from __future__ import annotations

import inspect

from axon.storage import File, Source


def _members(protocol: type) -> set[str]:
    methods = {name for name, _ in inspect.getmembers(protocol, inspect.isfunction) if not name.startswith("_")}
    return set(getattr(protocol, "__annotations__", {})) | methods


def test_the_local_store_is_a_source_and_its_files_are_files(store):
    assert _members(Source) == {"open", "crc32s"}
    assert {"path", "size", "mtime_ns", "segment", "close"} <= _members(File)
    assert all(hasattr(store, name) for name in _members(Source))
    f = store.open("a.txt")
    try:
        missing = [name for name in _members(File) if not hasattr(f, name)]
        assert missing == []
        assert f.segment(0, f.size).count == f.size  # a FileSlice: no open-file cache here
    finally:
        f.close()
