"""Byte ranges: parse, resolve against a size, merge; abuse capped (CVE-2011-3192)."""

from __future__ import annotations

import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from axon.errors import RangeNotSatisfiable
from axon.http.ranges import content_range, merge, parse_range

SETTINGS = settings(max_examples=200, deadline=None, database=None)


@pytest.mark.parametrize(
    "header, size, spans",
    [
        ("bytes=0-0", 10, [(0, 1)]),
        ("bytes=0-9", 10, [(0, 10)]),
        ("bytes=0-", 10, [(0, 10)]),
        ("bytes=3-", 10, [(3, 10)]),
        ("bytes=9-", 10, [(9, 10)]),
        ("bytes=0-999", 10, [(0, 10)]),  # clipped to the size
        ("bytes=-1", 10, [(9, 10)]),
        ("bytes=-3", 10, [(7, 10)]),
        ("bytes=-10", 10, [(0, 10)]),
        ("bytes=-999", 10, [(0, 10)]),
        ("bytes=0-1,4-5", 10, [(0, 2), (4, 6)]),
        ("bytes=4-5,0-1", 10, [(4, 6), (0, 2)]),  # in the order asked (RFC 9110 15.3.7.2)
        ("bytes=100-199,0-9", 1000, [(100, 200), (0, 10)]),
        ("bytes=8-9,0-1,4-5", 10, [(8, 10), (0, 2), (4, 6)]),
        ("bytes=6-7,0-1,1-2", 10, [(6, 8), (0, 3)]),  # a merged range stands where its first part was
        ("bytes=6-7,2-3,0-1", 10, [(6, 8), (0, 4)]),
        ("bytes=0-1,2-3", 10, [(0, 4)]),  # adjacent: merged
        ("bytes=0-4,2-6", 10, [(0, 7)]),  # overlapping: merged
        ("bytes=0-0,0-0,0-0", 10, [(0, 1)]),
        ("bytes=-2,0-1", 10, [(8, 10), (0, 2)]),
        ("bytes=5-,-8", 10, [(2, 10)]),
        ("bytes=0-1,50-60", 10, [(0, 2)]),  # one unsatisfiable range among satisfiable ones
        ("bytes=-0,0-0", 10, [(0, 1)]),
        ("bytes=  0-1 ,  3-4  ", 10, [(0, 2), (3, 5)]),  # OWS around list elements
        ("BYTES=0-1", 10, [(0, 2)]),  # the unit is case-insensitive
        (" bytes =0-1", 10, [(0, 2)]),
        ("bytes=0-" + "9" * 30, 10, [(0, 10)]),  # big but sane numbers
        ("bytes=-" + "9" * 30, 10, [(0, 10)]),
    ],
)
def test_parse(header, size, spans):
    assert parse_range(header, size, 16) == spans


@pytest.mark.parametrize("header", ["items=0-1", "bytes", "", "0-1", "none", "bytes 0-1", "b=0-1"])
def test_other_units_are_ignored(header):
    assert parse_range(header, 10, 16) is None


@pytest.mark.parametrize(
    "header, size",
    [
        ("bytes=10-", 10),  # starts at the end
        ("bytes=10-20", 10),
        ("bytes=" + "9" * 30 + "-", 10),
        ("bytes=-0", 10),  # an empty suffix
        ("bytes=a-b", 0),  # malformed is refused, even on an empty file
        ("bytes=5-4", 0),
        ("bytes=5-4", 10),  # inverted
        ("bytes=0-1,5-4", 10),  # one inverted range spoils the header
        ("bytes=", 10),
        ("bytes=-", 10),
        ("bytes=a-b", 10),
        ("bytes=1-2-3", 10),
        ("bytes=-1-2", 10),
        ("bytes=+1-2", 10),
        ("bytes=1-+2", 10),
        ("bytes=0x1-2", 10),
        ("bytes=1.5-2", 10),
        ("bytes=1 -2", 10),
        ("bytes=1- 2", 10),
        ("bytes=0-1;2-3", 10),
        ("bytes=--1", 10),
        ("bytes=,", 10),
    ],
)
def test_not_satisfiable(header, size):
    with pytest.raises(RangeNotSatisfiable) as info:
        parse_range(header, size, 16)
    assert info.value.status == 416
    assert info.value.headers == [("Content-Range", f"bytes */{size}")]


@pytest.mark.parametrize("header", ["bytes=0-", "bytes=-5", "bytes=0-0", "bytes=10-20", "bytes=-0", "bytes=0-,-1"])
def test_an_empty_representation_ignores_a_well_formed_range(header):
    """Nothing to slice: the whole (empty) body is the answer, a 200 as nginx gives; a browser's
    media request sends ``bytes=0-`` and must not get a 416 for an empty file."""
    assert parse_range(header, 0, 16) is None


def test_too_many_ranges():
    header = "bytes=" + ",".join(f"{i}-{i}" for i in range(17))
    with pytest.raises(RangeNotSatisfiable, match="too many"):
        parse_range(header, 100, 16)
    assert len(parse_range("bytes=" + ",".join(f"{2 * i}-{2 * i}" for i in range(16)), 100, 16)) == 16


def test_two_thousand_overlapping_ranges():
    """Apache CVE-2011-3192: refused by count; with the cap raised, merged to one span."""
    header = "bytes=" + ",".join(f"{i}-{i + 100}" for i in range(2000))
    with pytest.raises(RangeNotSatisfiable, match="too many"):
        parse_range(header, 10_000, 16)
    assert parse_range(header, 10_000, 2000) == [(0, 2100)]
    assert parse_range("bytes=" + ",".join(["0-"] * 2000), 10, 5000) == [(0, 10)]


def test_merge():
    assert merge([(5, 6), (0, 1)]) == [(5, 6), (0, 1)]  # request order kept
    assert merge([(5, 6), (0, 1), (6, 8)]) == [(5, 8), (0, 1)]
    assert merge([(0, 5), (1, 2)]) == [(0, 5)]
    assert merge([(0, 2), (2, 4), (4, 6)]) == [(0, 6)]
    assert merge([(0, 1), (2, 3)]) == [(0, 1), (2, 3)]  # a gap of one byte stays a gap


def test_content_range():
    assert content_range((0, 1), 10) == "bytes 0-0/10"
    assert content_range((3, 10), 10) == "bytes 3-9/10"


# -- bugs: input that escapes as something other than RangeNotSatisfiable ------------------------


@pytest.mark.parametrize("header", ["bytes=\xb2-5", "bytes=0-\xb2", "bytes=-\xb9", "bytes=\u0661-2"])
def test_non_ascii_digits_are_malformed(header):
    with pytest.raises(RangeNotSatisfiable):
        parse_range(header, 10, 16)


@pytest.mark.parametrize(
    "header", ["bytes=" + "1" * 5000 + "-", "bytes=0-" + "1" * 5000, "bytes=-" + "1" * 5000], ids=["first", "last", "suffix"]
)
def test_huge_numbers(header):
    try:
        spans = parse_range(header, 10, 16)
    except RangeNotSatisfiable:
        return
    assert spans == [(0, 10)]


@pytest.mark.parametrize(
    "header, spans", [("bytes=0-1,", [(0, 2)]), ("bytes=0-1, ,4-5", [(0, 2), (4, 6)]), ("bytes=,0-1", [(0, 2)])]
)
def test_empty_list_elements_are_ignored(header, spans):
    assert parse_range(header, 10, 16) == spans


# -- properties --------------------------------------------------------------------------------

_spec = st.one_of(
    st.tuples(st.just("int"), st.integers(0, 250), st.one_of(st.none(), st.integers(0, 250))),
    st.tuples(st.just("suffix"), st.integers(0, 250), st.none()),
)
_ows = st.sampled_from(["", " ", "\t", "  "])


def _requested_bytes(specs, size: int) -> set[int]:
    covered: set[int] = set()
    for kind, a, b in specs:
        if kind == "suffix":
            covered.update(range(max(0, size - a), size) if a else ())
        else:
            covered.update(range(a, size if b is None else min(b + 1, size)))
    return covered


@SETTINGS
@given(specs=st.lists(_spec, min_size=1, max_size=20), size=st.integers(0, 200),
       max_ranges=st.integers(1, 20), ows=st.lists(_ows, min_size=42, max_size=42))
@example(specs=[("int", 0, 0), ("int", 1, 1)], size=2, max_ranges=2, ows=[""] * 42)
def test_parse_property(specs, size, max_ranges, ows):
    items = [f"-{a}" if kind == "suffix" else f"{a}-{'' if b is None else b}" for kind, a, b in specs]
    header = "bytes=" + ",".join(f"{ows[2 * i]}{item}{ows[2 * i + 1]}" for i, item in enumerate(items))
    inverted = any(kind == "int" and b is not None and b < a for kind, a, b in specs)
    covered = _requested_bytes(specs, size)
    try:
        spans = parse_range(header, size, max_ranges)
    except RangeNotSatisfiable as exc:
        assert len(specs) > max_ranges or inverted or not covered, (header, str(exc))
        assert exc.headers == [("Content-Range", f"bytes */{size}")]
        return
    assert len(specs) <= max_ranges and not inverted
    if spans is None:  # an empty representation: nothing to slice
        assert size == 0
        return
    _check_spans(spans, size)
    assert {i for start, stop in spans for i in range(start, stop)} == covered
    # Request order: each span stands where the first range it covers was asked for.
    firsts = [min(i for i, item in enumerate(_resolved(specs, size)) if item and start <= item[0] < stop)
              for start, stop in spans]
    assert firsts == sorted(firsts)


def _resolved(specs, size):
    """Each requested range as a [start, stop) span within ``size``, or None if unsatisfiable."""
    out = []
    for kind, a, b in specs:
        if kind == "suffix":
            out.append((max(0, size - a), size) if a and size else None)
        else:
            stop = size if b is None else min(b + 1, size)
            out.append((a, stop) if a < stop else None)
    return out


def _check_spans(spans, size):
    assert spans, "an empty list is never returned"
    for start, stop in spans:
        assert 0 <= start < stop <= size
    ordered = sorted(spans)
    for (_, stop), (start, _) in zip(ordered, ordered[1:]):
        assert stop < start  # apart, and not even touching


def _parse_and_check(header, size):
    """parse_range returns None or sound spans, or raises RangeNotSatisfiable; nothing else."""
    try:
        spans = parse_range(header, size, 8)
    except RangeNotSatisfiable:
        return
    if spans is not None:
        _check_spans(spans, size)


@SETTINGS
@given(header=st.text(alphabet="bytes=0123456789-, \tB;x+.", max_size=40), size=st.integers(0, 100))
@example(header="bytes=0-0,-0,5-", size=3)
def test_never_raises_anything_else(header, size):
    _parse_and_check(header, size)


@SETTINGS
@given(header=st.text(max_size=20).map(lambda t: "bytes=" + t), size=st.integers(0, 100))
@example(header="bytes=\xb2-", size=10)
def test_never_raises_anything_else_any_text(header, size):
    _parse_and_check(header, size)
