"""Segments: body length, and slicing a body by a byte range (pure)."""

from __future__ import annotations

import os

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from axon.http.segments import FileSlice, body_length, slice_segments

SETTINGS = settings(max_examples=150, deadline=None, database=None)
DATA = bytes(range(256)) * 4  # the file every FileSlice below reads


@pytest.fixture(scope="module")
def fd(tmp_path_factory):
    path = tmp_path_factory.mktemp("segments") / "data.bin"
    path.write_bytes(DATA)
    fd = os.open(path, os.O_RDONLY)
    yield fd
    os.close(fd)


def render(segments) -> bytes:
    return b"".join(s if isinstance(s, bytes) else os.pread(s.fd, s.count, s.offset) for s in segments)


def segment_lists(fd: int):
    piece = st.one_of(
        st.binary(max_size=20),
        st.integers(0, len(DATA)).flatmap(
            lambda off: st.integers(0, len(DATA) - off).map(lambda n: FileSlice(fd, off, n))
        ),
    )
    return st.lists(piece, max_size=8)


def test_file_slice_is_a_tuple():
    s = FileSlice(3, 10, 20)
    assert (s.fd, s.offset, s.count) == (3, 10, 20)
    assert tuple(s) == (3, 10, 20)
    fd_, offset, count = s
    assert (fd_, offset, count) == (3, 10, 20)


def test_body_length():
    assert body_length([]) == 0
    assert body_length([b"abc", FileSlice(0, 5, 10), b""]) == 13


def test_slice_example(fd):
    segs = [b"0123", FileSlice(fd, 100, 10), b"xyz"]
    assert slice_segments(segs, 0, 17) == segs
    assert slice_segments(segs, 2, 6) == [b"23", FileSlice(fd, 100, 2)]
    assert slice_segments(segs, 5, 15) == [FileSlice(fd, 101, 9), b"x"]
    assert slice_segments(segs, 14, 100) == [b"xyz"]
    assert slice_segments(segs, 4, 4) == []
    assert slice_segments(segs, 17, 20) == []


@SETTINGS
@given(data=st.data())
def test_slice_property(fd, data):
    segs = data.draw(segment_lists(fd))
    whole = render(segs)
    start = data.draw(st.integers(0, len(whole) + 5))
    stop = data.draw(st.integers(start, len(whole) + 10))
    out = slice_segments(segs, start, stop)
    assert render(out) == whole[start:stop]
    assert body_length(out) == len(whole[start:stop])
    for seg in out:  # no empty pieces; slices stay on the same descriptor, inside their parent
        assert (len(seg) if isinstance(seg, bytes) else seg.count) > 0
        if isinstance(seg, FileSlice):
            assert seg.fd == fd and 0 <= seg.offset and seg.offset + seg.count <= len(DATA)


def test_object_slices_are_measured_and_cut_as_file_slices_are():
    from axon.http.segments import ObjectSlice

    obj = object()
    body = [b"ab", ObjectSlice(obj, 100, 10), FileSlice(7, 0, 5)]
    assert body_length(body) == 17
    assert slice_segments(body, 1, 8) == [b"b", ObjectSlice(obj, 100, 6)]
    assert slice_segments(body, 5, 14) == [ObjectSlice(obj, 103, 7), FileSlice(7, 0, 2)]
