"""axon.batchclient.parts: each part checked against what was asked, before a byte of it is kept
(the checks alone; tests/batchclient/test_batchclient_reader.py runs them inside the reader)."""

from __future__ import annotations

import pytest

from axon.batchclient.errors import UnsafePathError
from axon.batchclient.parts import AnyOrder, InOrder, check_slice, item_path
from axon.http.multipart_parser import ContentRange, MultipartError, PartStart


def start(index: int, length: int | None = 3) -> PartStart:
    return PartStart(index=index, headers=(() if length is None else (("Content-Length", str(length)),)))


def test_any_order_takes_each_path_asked_once_in_any_order():
    due = AnyOrder(["b", "a", "a"])
    assert [due.admit(start(i), p, None) for i, p in enumerate(["a", "b", "a"])] == ["a", "b", "a"]
    due.finish()
    with pytest.raises(MultipartError, match="not requested"):
        due.admit(start(3), "a", None)  # a third "a": asked twice only


@pytest.mark.parametrize("path, length, error", [
    (None, 3, "no Content-Location"), ("a", None, "no Content-Length"), ("c", 3, "not requested"),
])  # fmt: skip
def test_any_order_refuses_a_part_it_cannot_place(path, length, error):
    with pytest.raises(MultipartError, match=error):
        AnyOrder(["a"]).admit(start(0, length), path, None)


def test_any_order_refuses_a_hostile_name_before_anything_else():
    with pytest.raises(UnsafePathError):
        AnyOrder(["../x"]).admit(start(0), "../x", None)  # asked or not, never written


def test_any_order_counts_what_a_resume_has_already_and_names_what_never_came():
    due = AnyOrder(["a", "b", "c"])
    due.take("a")
    with pytest.raises(ValueError, match="not in this batch"):
        due.take("a")
    due.admit(start(0), "b", None)
    with pytest.raises(MultipartError, match=r"did not send 1 requested file\(s\): \['c'\]"):
        due.finish()


def test_in_order_places_part_k_as_item_k():
    items = ["a", {"path": "b", "offset": 2, "length": 3}]
    due = InOrder(items)
    assert due.admit(start(0), "a", None) == 0
    assert due.admit(start(1), "b", ContentRange(2, 4, 10)) == 1
    due.finish()
    with pytest.raises(MultipartError, match="more parts than the 2 items"):
        due.admit(start(2), "a", None)
    assert [item_path(i) for i in items] == ["a", "b"]


def test_in_order_refuses_a_part_out_of_place_or_short():
    with pytest.raises(MultipartError, match="names 'b', not 'a'"):
        InOrder(["a", "b"]).admit(start(0), "b", None)
    short = InOrder(["a", "b"])
    short.admit(start(0), "a", None)
    with pytest.raises(MultipartError, match="1 parts for the 2 items"):
        short.finish()


@pytest.mark.parametrize("item, content_range, why", [
    ("a", None, None),
    ("a", ContentRange(0, 9, 10), "a whole file came with a Content-Range"),
    ({"path": "a", "offset": 0}, None, "without a Content-Range"),
    ({"path": "a", "offset": 4}, ContentRange(4, 9, 10), None),  # to the end
    ({"path": "a", "offset": 4, "length": 100}, ContentRange(4, 9, 10), None),  # cut at the end
    ({"path": "a", "offset": -3}, ContentRange(7, 9, 10), None),  # a suffix
    ({"path": "a", "offset": -30}, ContentRange(0, 9, 10), None),  # a suffix past the start: all
    ({"path": "a", "offset": 4, "length": 2}, ContentRange(4, 6, 10), "asked offset 4, length 2"),
    ({"path": "a", "offset": 5}, ContentRange(4, 9, 10), "the part holds bytes 4-9/10"),
])  # fmt: skip
def test_a_slice_is_the_range_asked(item, content_range, why):
    found = check_slice(item, content_range)
    assert found is None if why is None else why in found
