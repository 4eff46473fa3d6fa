"""iter_chunks: exact bytes, bounded chunks, small segments coalesced, truncation detected."""

from __future__ import annotations

import math
import os

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from axon import chunks
from axon.chunks import iter_chunks, read_slice
from axon.errors import FileChanged
from axon.limits import Limits
from axon.plan.batch import plan_batch
from axon.http.segments import FileSlice

SETTINGS = settings(max_examples=150, deadline=None, database=None)
DATA = os.urandom(4096)


@pytest.fixture(scope="module")
def fd(tmp_path_factory):
    path = tmp_path_factory.mktemp("chunks") / "data.bin"
    path.write_bytes(DATA)
    fd = os.open(path, os.O_RDONLY)
    yield fd
    os.close(fd)


def _render(segments):
    return b"".join(s if isinstance(s, bytes) else os.pread(s.fd, s.count, s.offset) for s in segments)


def _segments(fd, small_bytes: bool):
    slices = st.integers(0, len(DATA)).flatmap(
        lambda off: st.integers(0, len(DATA) - off).map(lambda n: FileSlice(fd, off, n))
    )
    inline = st.binary(max_size=40 if small_bytes else 600)
    return st.lists(st.one_of(slices, inline), max_size=10)


@SETTINGS
@given(data=st.data(), chunk_size=st.integers(1, 700))
def test_exact_bytes_and_no_empty_chunks(fd, data, chunk_size):
    segs = data.draw(_segments(fd, small_bytes=False))
    out = list(iter_chunks(segs, chunk_size))
    assert b"".join(out) == _render(segs)
    assert all(out)  # never an empty chunk
    assert all(isinstance(c, bytes) for c in out)


@SETTINGS
@given(data=st.data(), chunk_size=st.integers(1, 700))
def test_file_slices_make_full_chunks(fd, data, chunk_size):
    """File slices only: every chunk is exactly chunk_size bytes but the last (coalesced)."""
    segs = [s for s in data.draw(_segments(fd, small_bytes=True)) if isinstance(s, FileSlice)]
    out = list(iter_chunks(segs, chunk_size))
    assert b"".join(out) == _render(segs)
    assert all(len(c) == chunk_size for c in out[:-1])
    assert all(0 < len(c) <= chunk_size for c in out)


@pytest.mark.parametrize("segs", [[b"x" * 100], [b"a" * 10, b"b" * 10], [b"a" * 10, b"b" * 100, b"c"],
                                  [b"a" * 15, b"b" * 15]])
def test_bytes_segments_are_bounded(segs):
    out = list(iter_chunks(segs, 16))
    assert b"".join(out) == b"".join(segs)
    assert all(0 < len(c) <= 16 for c in out), [len(c) for c in out]


def test_whole_chunk_reads_are_not_copied(fd):
    out = list(iter_chunks([FileSlice(fd, 0, 4096)], 1024))
    assert [len(c) for c in out] == [1024] * 4
    assert b"".join(out) == DATA


def test_byte_at_a_time(fd):
    segs = [FileSlice(fd, 10, 20), b"", FileSlice(fd, 0, 0), FileSlice(fd, 4000, 96)]
    out = list(iter_chunks(segs, 1))
    assert out == [bytes([b]) for b in _render(segs)]


def test_small_files_coalesce(root, store):
    """A batch of 32 small files is a handful of chunks, not one per segment."""
    for i in range(32):
        (root / f"small-{i}.bin").write_bytes(os.urandom(100))
    response = plan_batch(store, [f"small-{i}.bin" for i in range(32)], Limits())
    try:
        assert len(response.body) == 65
        out = list(iter_chunks(response.body, 64 * 1024))
        assert len(out) == 1
        assert b"".join(out) == _render(response.body)
        out = list(iter_chunks(response.body, 1024))
        assert all(len(c) >= 1024 for c in out[:-1])  # coalesced: full chunks but the last
        assert b"".join(out) == _render(response.body)
    finally:
        response.close()


def test_32_files_of_4k(root, store):
    for i in range(32):
        (root / f"four-{i}.bin").write_bytes(os.urandom(4096))
    response = plan_batch(store, [f"four-{i}.bin" for i in range(32)], Limits())
    try:
        out = list(iter_chunks(response.body, 64 * 1024))
        assert len(out) == math.ceil(response.length / (64 * 1024))
        assert b"".join(out) == _render(response.body)
    finally:
        response.close()


def test_file_truncated_after_planning(root, store):
    path = root / "shrinks.bin"
    path.write_bytes(b"z" * 10_000)
    response = plan_batch(store, ["shrinks.bin"], Limits())
    try:
        os.truncate(path, 4_000)
        received = bytearray()
        with pytest.raises(FileChanged):
            for chunk in iter_chunks(response.body, 1024):
                received += chunk
        # Never more of a part than the file still had: the part was cut, not padded.
        assert received.count(b"z") <= 4_000
    finally:
        response.close()


def test_file_truncated_to_zero(root, store):
    path = root / "gone.bin"
    path.write_bytes(b"z" * 100)
    f = store.open("gone.bin")
    try:
        os.truncate(path, 0)
        with pytest.raises(FileChanged):
            list(iter_chunks([FileSlice(f.fd, 0, 100)], 64))
        with pytest.raises(FileChanged):
            read_slice(f.fd, 0, 100)
    finally:
        f.close()
    assert issubclass(FileChanged, OSError)


def test_short_reads_are_retried(fd, monkeypatch):
    real = os.pread
    monkeypatch.setattr(chunks.os, "pread", lambda f, n, off: real(f, min(n, 7), off))
    assert read_slice(fd, 100, 1000) == DATA[100:1100]
    assert b"".join(iter_chunks([FileSlice(fd, 0, 4096)], 512)) == DATA


def test_file_grown_after_planning_sends_what_was_planned(root, store):
    path = root / "grows.bin"
    path.write_bytes(b"a" * 100)
    response = plan_batch(store, ["grows.bin"], Limits())
    try:
        with open(path, "ab") as f:
            f.write(b"b" * 100)
        body = b"".join(iter_chunks(response.body, 64))
        assert len(body) == response.length  # exactly the Content-Length promised
        content = body.split(b"\r\n\r\n", 1)[1].rsplit(b"\r\n--", 1)[0]
        assert content == b"a" * 100
    finally:
        response.close()
