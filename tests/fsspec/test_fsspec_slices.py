"""fsspec ranges as batch items, against the server's own reading of them (axon.plan.slices):
every (start, end) on files of every small size gives what a Python slice of the bytes gives."""

from __future__ import annotations

import itertools

import pytest

from axon.fsspec.slices import EMPTY, Slice, check_slice, plan
from axon.http.multipart_parser import ContentRange
from axon.plan.slices import Slice as ServerSlice
from axon.plan.slices import parse_items, resolve

BOUNDS = [None, *range(-8, 9)]


def serve(item, data: bytes):
    """What the server sends for one item: (bytes, offset of the first) or None for its 416."""
    parse_items([item])  # the server takes the item's shape (or raises its 400)
    if isinstance(item, str):
        return data, 0
    span = resolve(ServerSlice(item["offset"], item.get("length")), len(data))
    return None if span is None else (data[span[0] : span[1]], span[0])


def read(start, end, data: bytes) -> bytes:
    """The client's whole dance: plan, ask, on a 416 plan again with the size it names, cut."""
    chosen = plan("f", start, end)
    if chosen is EMPTY:
        return b""
    answer = serve(chosen.item, data)
    if answer is None:
        chosen = plan("f", start, end, len(data))
        if chosen is EMPTY:
            return b""
        answer = serve(chosen.item, data)
        assert answer is not None, "a range planned with the size was refused again"
    part, first = answer
    if isinstance(chosen.item, dict):
        assert check_slice(chosen.item, ContentRange(first, first + len(part) - 1, len(data))) is None
    return chosen.cut(part, first)


@pytest.mark.parametrize("size", range(7))
def test_every_range_reads_as_a_python_slice(size):
    data = bytes(range(65, 65 + size))
    for start, end in itertools.product(BOUNDS, BOUNDS):
        assert read(start, end, data) == data[start:end], (size, start, end)


def test_with_the_size_known_nothing_is_refused_and_nothing_is_cut():
    data = bytes(range(10))
    for start, end in itertools.product(BOUNDS, BOUNDS):
        chosen = plan("f", start, end, len(data))
        if chosen is EMPTY:
            assert data[start:end] == b""
            continue
        part, first = serve(chosen.item, data)
        assert chosen.cut_to is None and part == data[start:end]


def test_what_needs_no_size_is_asked_as_is():
    assert plan("f", None, None) == Slice("f")
    assert plan("f", 0, None) == Slice("f")
    assert plan("f", 5, None) == Slice({"path": "f", "offset": 5})
    assert plan("f", 5, 9) == Slice({"path": "f", "offset": 5, "length": 4})
    assert plan("f", -4, None) == Slice({"path": "f", "offset": -4})
    assert plan("f", 0, -2) == Slice("f", cut_to=-2)
    assert plan("f", -4, -2) == Slice({"path": "f", "offset": -4}, cut_to=-2)
    assert plan("f", 9, 5) is EMPTY and plan("f", -2, -4) is EMPTY and plan("f", -2, 0) is EMPTY


@pytest.mark.parametrize("item, content_range, why", [
    ("f", None, None),
    ("f", ContentRange(0, 3, 4), "a whole file came with a Content-Range"),
    ({"path": "f", "offset": 2}, None, "without a Content-Range"),
    ({"path": "f", "offset": 2}, ContentRange(2, 9, None), "without a Content-Range"),
    ({"path": "f", "offset": 2, "length": 3}, ContentRange(2, 4, 10), None),
    ({"path": "f", "offset": 2, "length": 30}, ContentRange(2, 9, 10), None),
    ({"path": "f", "offset": 2, "length": 3}, ContentRange(3, 5, 10), "asked offset 2, length 3"),
    ({"path": "f", "offset": 2, "length": 3}, ContentRange(2, 3, 10), "the part holds bytes 2-3/10"),
    ({"path": "f", "offset": 2}, ContentRange(2, 8, 10), "the part holds"),
    ({"path": "f", "offset": -3}, ContentRange(7, 9, 10), None),
    ({"path": "f", "offset": -30}, ContentRange(0, 9, 10), None),
    ({"path": "f", "offset": -3}, ContentRange(6, 8, 10), "the part holds"),
])  # fmt: skip
def test_check_slice(item, content_range, why):
    got = check_slice(item, content_range)
    assert got is None if why is None else why in got
