"""Slice items of a POST body: their shape checked (400 bad_slice naming the path) and resolved
against a file's size with HTTP Range's semantics (clamped; 416 when nothing can be sent)."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from axon.errors import HTTPError
from axon.plan.slices import Slice, parse_items, resolve, resolve_all


def test_plain_paths_have_no_slices():
    assert parse_items(["a", "b"]) == (["a", "b"], None)


def test_items_mix_paths_and_slices():
    paths, slices = parse_items(["a", {"path": "b", "offset": 3, "length": 4}, {"path": "b", "offset": -8}])
    assert paths == ["a", "b", "b"]
    assert slices == [None, Slice(3, 4), Slice(-8, None)]
    assert parse_items([{"path": "b", "offset": 0}]) == (["b"], [Slice(0, None)])


@pytest.mark.parametrize("item, words", [
    ({"path": "x", "offset": 1, "length": 0}, "at least 1"),
    ({"path": "x", "offset": 1, "length": -3}, "at least 1"),
    ({"path": "x", "offset": -4, "length": 2}, "negative offset"),
    ({"path": "x"}, "offset is an integer"),
    ({"path": "x", "offset": "1"}, "offset is an integer"),
    ({"path": "x", "offset": 1.0}, "offset is an integer"),
    ({"path": "x", "offset": True}, "offset is an integer"),
    ({"path": "x", "offset": 0, "length": None}, "length is an integer"),
    ({"path": "x", "offset": 0, "length": "2"}, "length is an integer"),
    ({"path": "x", "offset": 0, "lenght": 2}, "unknown keys 'lenght'"),
])
def test_a_malformed_slice_is_a_400_naming_its_path(item, words):
    with pytest.raises(HTTPError) as info:
        parse_items(["a", item])
    err = info.value
    assert (err.status, err.code, err.paths) == (400, "bad_slice", ["x"])
    assert words in err.message and "'x'" in err.message
    assert err.details == [{"path": "x", "status": 400, "code": "bad_slice", "message": err.details[0]["message"]}]


def test_every_malformed_slice_is_named_at_once():
    with pytest.raises(HTTPError) as info:
        parse_items([{"path": "x", "offset": -1, "length": 1}, "ok", {"path": "y"}, {"offset": 0}])
    err = info.value
    assert err.code == "bad_slice" and err.paths == ["x", "y"]
    assert [d["path"] for d in err.details] == ["x", "y", ""]
    assert "3 items" in err.message


@pytest.mark.parametrize("item", [3, None, ["a"], 1.5])
def test_an_item_neither_path_nor_object_is_bad_json(item):
    with pytest.raises(HTTPError) as info:
        parse_items(["a", item])
    assert (info.value.status, info.value.code) == (400, "bad_json")


@pytest.mark.parametrize("sliced, size, span", [
    (Slice(0, None), 10, (0, 10)),
    (Slice(3, 4), 10, (3, 7)),
    (Slice(3, 100), 10, (3, 10)),  # clamped, as a Range is
    (Slice(9, 1), 10, (9, 10)),
    (Slice(-4, None), 10, (6, 10)),  # the last 4 bytes
    (Slice(-40, None), 10, (0, 10)),  # longer than the file: all of it
    (Slice(10, None), 10, None),  # starts at the end
    (Slice(11, 2), 10, None),
    (Slice(0, None), 0, None),  # an empty file has no byte to send
    (Slice(-1, None), 0, None),
])
def test_resolve_follows_http_range(sliced, size, span):
    assert resolve(sliced, size) == span


@given(st.integers(-50, 50), st.one_of(st.none(), st.integers(1, 50)), st.integers(0, 40))
def test_resolve_agrees_with_python_slicing(offset, length, size):
    if offset < 0 and length is not None:
        return  # not a valid slice (parse_items refuses it)
    data = bytes(range(size))
    span = resolve(Slice(offset, length), size)
    if span is None:
        assert size == 0 or offset >= size
        return
    stop = None if length is None else offset + length
    expected = data[offset:stop] if offset >= 0 else data[offset:]
    assert data[span[0]:span[1]] == expected and expected


def test_resolve_all_names_every_unsatisfiable_path_once_with_its_size():
    with pytest.raises(HTTPError) as info:
        resolve_all(["a", "e", "b", "e"], [10, 0, 5, 0], [Slice(20, None), Slice(0, 1), None, Slice(-1, None)])
    err = info.value
    assert (err.status, err.code, err.paths) == (416, "range_not_satisfiable", ["a", "e"])
    assert [(d["path"], d["size"], d["status"]) for d in err.details] == [("a", 10, 416), ("e", 0, 416)]
    assert resolve_all(["a", "b"], [10, 5], [None, Slice(1, 2)]) == [None, (1, 3)]
