"""Conditional requests (RFC 9110 section 13): comparison, dates, and the order of evaluation."""

from __future__ import annotations

import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from axon.http.conditional import date_is_strong, evaluate, http_date, if_range_allows, parse_http_date

SETTINGS = settings(max_examples=300, deadline=None, database=None)

TAG = '"abc"'
MTIME = 784111777.25  # Sun, 06 Nov 1994 08:49:37.25 GMT
DATE = "Sun, 06 Nov 1994 08:49:37 GMT"
EARLIER = "Sun, 06 Nov 1994 07:49:37 GMT"
LATER = "Sun, 06 Nov 1994 09:49:37 GMT"
RFC850 = "Sunday, 06-Nov-94 08:49:37 GMT"
ASCTIME = "Sun Nov  6 08:49:37 1994"


def test_http_date():
    assert http_date(MTIME) == DATE  # IMF-fixdate, fraction dropped
    assert http_date(0) == "Thu, 01 Jan 1970 00:00:00 GMT"


@pytest.mark.parametrize(
    "value, expected",
    [
        (DATE, 784111777.0),
        (RFC850, 784111777.0),
        ("Sun, 06 Nov 1994 10:49:37 +0200", 784111777.0),
        ("Thu, 01 Jan 1970 00:00:00 GMT", 0.0),
        ("", None),
        ("garbage", None),
        ("0", None),
        ("Sun, 06 Nov 1994", None),
        ("Sun, 32 Nov 1994 08:49:37 GMT", None),
        ("Sun, 06 Nov 1994 25:49:37 GMT", None),
        ("Sun, 06 Nov 99999 08:49:37 GMT", None),
        ("Sun, 06 Nov 1994 08:49:37 +9999", None),
    ],
)
def test_parse_http_date(value, expected):
    assert parse_http_date(value) == expected


def test_parse_asctime_date():
    assert parse_http_date(ASCTIME) == 784111777.0


@SETTINGS
@given(st.text(max_size=40))
@example("Sun, 06 Nov 1994 08:49:37 -9999")
@example("Mon, 01 Jan 0000 00:00:00 GMT")
def test_parse_http_date_never_raises(value):
    result = parse_http_date(value)
    assert result is None or isinstance(result, float)


# -- evaluate: each precondition, then their order (RFC 9110 13.2.2) ----------------------------


def ev(headers, method="GET", etag=TAG, mtime=MTIME):
    return evaluate(method, headers, etag, mtime)


@pytest.mark.parametrize(
    "headers, expected",
    [
        ({}, None),
        # If-Match: strong comparison
        ({"if-match": TAG}, None),
        ({"if-match": '"xyz"'}, 412),
        ({"if-match": "*"}, None),
        ({"if-match": " * "}, None),
        ({"if-match": 'W/"abc"'}, 412),  # a weak tag never matches strongly
        ({"if-match": '"xyz", "abc"'}, None),
        ({"if-match": '"xyz" ,  "abc" '}, None),
        ({"if-match": '"abcd"'}, 412),
        ({"if-match": "abc"}, 412),  # unquoted: unparsable, matches nothing
        ({"if-match": ""}, 412),
        # If-Unmodified-Since
        ({"if-unmodified-since": EARLIER}, 412),
        ({"if-unmodified-since": DATE}, None),
        ({"if-unmodified-since": LATER}, None),
        ({"if-unmodified-since": "garbage"}, None),  # a bad date is ignored
        ({"if-unmodified-since": f"{DATE}, {EARLIER}"}, None),  # a list of dates is invalid: ignored
        ({"if-match": TAG, "if-unmodified-since": EARLIER}, None),  # ignored when If-Match is present
        ({"if-match": '"xyz"', "if-unmodified-since": LATER}, 412),
        # If-None-Match: weak comparison
        ({"if-none-match": TAG}, 304),
        ({"if-none-match": 'W/"abc"'}, 304),
        ({"if-none-match": "*"}, 304),
        ({"if-none-match": '"xyz"'}, None),
        ({"if-none-match": '"xyz", W/"abc"'}, 304),
        ({"if-none-match": "garbage"}, None),
        # If-Modified-Since
        ({"if-modified-since": DATE}, 304),
        ({"if-modified-since": LATER}, 304),
        ({"if-modified-since": EARLIER}, None),
        ({"if-modified-since": RFC850}, 304),
        ({"if-modified-since": "garbage"}, None),
        ({"if-modified-since": ""}, None),
        # Order: step 1 before 3, step 2 before 3, step 3 replaces step 4
        ({"if-match": '"xyz"', "if-none-match": TAG}, 412),
        ({"if-unmodified-since": EARLIER, "if-none-match": TAG}, 412),
        ({"if-unmodified-since": EARLIER, "if-modified-since": DATE}, 412),
        ({"if-match": TAG, "if-none-match": TAG}, 304),
        ({"if-unmodified-since": LATER, "if-none-match": TAG}, 304),
        ({"if-none-match": '"xyz"', "if-modified-since": LATER}, None),  # IMS ignored when INM present
        ({"if-none-match": TAG, "if-modified-since": EARLIER}, 304),
        ({"if-match": "*", "if-none-match": "*"}, 304),
    ],
)
def test_evaluate_get(headers, expected):
    assert ev(headers) == expected
    assert ev(headers, method="HEAD") == expected


@pytest.mark.parametrize("method", ["POST", "PUT", "DELETE", "PATCH"])
def test_evaluate_unsafe_methods(method):
    assert ev({"if-none-match": TAG}, method) == 412  # not 304
    assert ev({"if-none-match": "*"}, method) == 412
    assert ev({"if-none-match": '"xyz"'}, method) is None
    assert ev({"if-modified-since": LATER}, method) is None  # only for GET and HEAD
    assert ev({"if-match": '"xyz"'}, method) == 412
    assert ev({"if-unmodified-since": EARLIER}, method) == 412


def test_evaluate_weak_server_tag():
    weak = 'W/"abc"'
    assert ev({"if-match": TAG}, etag=weak) == 412
    assert ev({"if-match": weak}, etag=weak) == 412
    assert ev({"if-match": "*"}, etag=weak) is None
    assert ev({"if-none-match": TAG}, etag=weak) == 304
    assert ev({"if-none-match": weak}, etag=weak) == 304


def test_evaluate_asctime():
    assert ev({"if-modified-since": ASCTIME}) == 304


def _round_trips(mtime: float) -> None:
    """The Last-Modified we send, sent back, means "not modified", and is an If-Range match."""
    date = http_date(mtime)
    assert evaluate("GET", {"if-modified-since": date}, TAG, mtime) == 304
    assert evaluate("GET", {"if-unmodified-since": date}, TAG, mtime) is None
    assert if_range_allows(date, TAG, mtime), (mtime, date)


@SETTINGS
@given(st.integers(0, 4_000_000_000), st.floats(0, 0.999))
def test_last_modified_round_trips(seconds, fraction):
    _round_trips(seconds + fraction)


@pytest.mark.parametrize("mtime", [1.9999995231628418, 1_700_000_000.9999996, -1.5, -0.25, -86400.75])
def test_last_modified_round_trips_any_float(mtime):
    _round_trips(mtime)


# -- If-Range ---------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "header, expected",
    [
        (None, True),
        (TAG, True),
        (f" {TAG} ", True),
        ('"xyz"', False),
        ('W/"abc"', False),  # a weak validator never allows a range
        (DATE, True),
        (RFC850, True),
        (EARLIER, False),
        (LATER, False),  # only an exact date match
        ("garbage", False),
        ("", False),
        ("*", False),
    ],
)
def test_if_range(header, expected):
    assert if_range_allows(header, TAG, MTIME) is expected


def test_if_range_date_needs_a_strong_date():
    """A Last-Modified less than a second old is weak (RFC 9110 8.8.2.2): no date names a version."""
    assert if_range_allows(DATE, TAG, MTIME, date_is_strong=False) is False
    assert if_range_allows(TAG, TAG, MTIME, date_is_strong=False) is True  # the tag still does
    assert date_is_strong(10**9, 2 * 10**9) is True
    assert date_is_strong(10**9, 2 * 10**9 - 1) is False


def test_without_a_date_only_tags_count():
    """A representation without Last-Modified (a batch): dates never match, nor precondition."""
    assert if_range_allows(DATE, TAG, None) is False
    assert if_range_allows(TAG, TAG, None) is True
    assert evaluate("GET", {"if-modified-since": DATE}, TAG, None) is None
    assert evaluate("GET", {"if-unmodified-since": EARLIER}, TAG, None) is None
    assert evaluate("GET", {"if-none-match": TAG}, TAG, None) == 304
    assert evaluate("POST", {"if-none-match": TAG}, TAG, None) == 412
    assert evaluate("GET", {"if-match": '"other"'}, TAG, None) == 412


def test_if_range_weak_server_tag():
    assert if_range_allows('"abc"', 'W/"abc"', MTIME) is False
    assert if_range_allows('W/"abc"', 'W/"abc"', MTIME) is False


@SETTINGS
@given(st.text(max_size=30), st.sampled_from(["GET", "HEAD", "POST"]))
def test_evaluate_never_raises(value, method):
    for name in ("if-match", "if-none-match", "if-modified-since", "if-unmodified-since"):
        assert ev({name: value}, method) in (None, 304, 412)
    assert if_range_allows(value, TAG, MTIME) in (True, False)


@pytest.mark.parametrize("seconds, expected", [
    (10**12, "Fri, 31 Dec 9999 23:59:59 GMT"),   # tmpfs/xfs/btrfs keep mtimes past year 9999
    (-10**12, "Mon, 01 Jan 0001 00:00:00 GMT"),
])  # fmt: skip
def test_http_date_clamps_to_what_a_date_can_say(seconds, expected):
    assert http_date(seconds) == expected
