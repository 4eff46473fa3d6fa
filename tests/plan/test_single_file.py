"""plan_file: validators, 304/412, and ranges (206, multipart/byteranges, 416) for one file."""

from __future__ import annotations

import os
import re
import time

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from axon.errors import HTTPError, NotFound, PreconditionFailed, RangeNotSatisfiable
from axon.limits import Limits
from axon.http.conditional import http_date
from axon.http.segments import FileSlice
from axon.plan.single_file import etag, plan_file
from axon.storage.local import FileStore

LIMITS = Limits()
DATA = bytes(range(256)) * 40  # b.bin in the sample root
SIZE = len(DATA)


def plan(store, headers=None, method="GET", path="b.bin", limits=LIMITS):
    return plan_file(store, path, method, headers or {}, limits)


def byteranges(response, render, parse_multipart):
    headers = dict(response.headers)
    body = render(response.body)
    assert headers["Content-Length"] == str(len(body))
    assert re.fullmatch(r"multipart/byteranges; boundary=[0-9a-f]{32}", headers["Content-Type"])
    return [
        (part["Content-Type"], part["Content-Range"], part["Content-Length"], part.get_payload(decode=True))
        for part in parse_multipart(headers["Content-Type"], body)
    ]


def test_whole_file(root, store, render, open_fds):
    before = open_fds()
    r = plan(store)
    try:
        assert r.status == 200
        names = [k for k, _ in r.headers]
        assert names == ["ETag", "Last-Modified", "Accept-Ranges", "Content-Type", "Content-Length"]
        h = dict(r.headers)
        st_ = os.stat(root / "b.bin")
        assert h["Last-Modified"] == http_date(st_.st_mtime_ns // 10**9)
        assert re.fullmatch(r'"[0-9a-f]+-[0-9a-f]+-[0-9a-f]+"', h["ETag"])  # strong
        assert h["Accept-Ranges"] == "bytes"
        assert h["Content-Type"] == "application/octet-stream"
        assert h["Content-Length"] == str(SIZE)
        assert r.body == [FileSlice(r.files[0].fd, 0, SIZE)]
        assert render(r.body) == DATA
    finally:
        r.close()
    assert open_fds() <= before


def test_text_file_type(store, render):
    r = plan(store, path="a.txt")
    assert dict(r.headers)["Content-Type"] == "text/plain; charset=utf-8"
    assert render(r.body) == b"hello, axon\n"
    r.close()


def test_empty_file(store, render):
    r = plan(store, path="empty.txt")
    assert r.status == 200 and dict(r.headers)["Content-Length"] == "0" and render(r.body) == b""
    r.close()
    for header in ("bytes=0-", "bytes=-5"):  # nothing to slice: the empty 200, as nginx sends
        r = plan(store, {"range": header}, path="empty.txt")
        assert r.status == 200 and render(r.body) == b""
        r.close()
    with pytest.raises(RangeNotSatisfiable):  # malformed is still refused
        plan(store, {"range": "bytes=5-4"}, path="empty.txt")


def test_etag_changes_with_the_file(root, store):
    def tag():
        r = plan(store, path="a.txt")
        r.close()
        return dict(r.headers)["ETag"]

    first = tag()
    assert tag() == first
    path = root / "a.txt"
    st_ = os.stat(path)
    os.utime(path, ns=(st_.st_atime_ns, st_.st_mtime_ns + 1))
    second = tag()
    assert second != first
    path.write_bytes(b"hello, axon!\n")  # size
    os.utime(path, ns=(st_.st_atime_ns, st_.st_mtime_ns + 1))
    third = tag()
    assert third not in (first, second)
    replacement = root / "a.new"
    replacement.write_bytes(b"hello, axon!\n")  # same size and mtime, new inode
    os.utime(replacement, ns=(st_.st_atime_ns, st_.st_mtime_ns + 1))
    os.rename(replacement, path)
    assert tag() not in (first, second, third)


def test_content_rewritten_with_its_mtime_put_back_gets_a_new_tag(root, store, render):
    """Same size, same mtime, same inode, other bytes: only the ctime moved. The old tag must
    not match it (a 304, or an If-Range splicing old and new bytes)."""
    path = root / "a.txt"
    original = path.read_bytes()
    r = plan(store, path="a.txt")
    r.close()
    old = dict(r.headers)["ETag"]
    st_ = os.stat(path)
    time.sleep(0.01)
    path.write_bytes(original.upper())  # in place: the same inode
    os.utime(path, ns=(st_.st_atime_ns, st_.st_mtime_ns))
    try:
        fresh = plan(store, {"if-none-match": old}, path="a.txt")
        assert fresh.status == 200 and render(fresh.body) == original.upper()
        assert dict(fresh.headers)["ETag"] != old
        fresh.close()
        ranged = plan(store, {"range": "bytes=0-3", "if-range": old}, path="a.txt")
        assert ranged.status == 200 and render(ranged.body) == original.upper()  # whole, not a splice
        ranged.close()
    finally:
        path.write_bytes(original)


def test_single_range(store, render):
    r = plan(store, {"range": "bytes=100-199"})
    try:
        assert r.status == 206
        h = dict(r.headers)
        assert h["Content-Range"] == f"bytes 100-199/{SIZE}"
        assert h["Content-Length"] == "100"
        assert h["Content-Type"] == "application/octet-stream"
        assert "ETag" in h and "Last-Modified" in h
        assert render(r.body) == DATA[100:200]
    finally:
        r.close()


@pytest.mark.parametrize(
    "header, start, stop",
    [("bytes=-10", SIZE - 10, SIZE), ("bytes=10000-", 10000, SIZE), ("bytes=0-999999", 0, SIZE),
     ("bytes=0-9,10-19", 0, 20), ("bytes=5-9,0-7", 0, 10)],
)
def test_ranges_that_make_one_span(store, render, header, start, stop):
    r = plan(store, {"range": header})
    try:
        assert r.status == 206
        assert dict(r.headers)["Content-Range"] == f"bytes {start}-{stop - 1}/{SIZE}"
        assert render(r.body) == DATA[start:stop]
    finally:
        r.close()


def test_multiple_ranges(store, render, parse_multipart, open_fds):
    before = open_fds()
    r = plan(store, {"range": "bytes=5000-5009, 0-0, -3"})
    try:
        assert r.status == 206
        assert "Content-Range" not in dict(r.headers)
        assert byteranges(r, render, parse_multipart) == [  # in the order asked
            ("application/octet-stream", f"bytes 5000-5009/{SIZE}", "10", DATA[5000:5010]),
            ("application/octet-stream", f"bytes 0-0/{SIZE}", "1", DATA[0:1]),
            ("application/octet-stream", f"bytes {SIZE - 3}-{SIZE - 1}/{SIZE}", "3", DATA[-3:]),
        ]
    finally:
        r.close()
    assert open_fds() <= before


def test_range_416_closes_the_file(store, open_fds):
    before = open_fds()
    with pytest.raises(RangeNotSatisfiable) as info:
        plan(store, {"range": f"bytes={SIZE}-"})
    assert info.value.headers == [("Content-Range", f"bytes */{SIZE}")]
    with pytest.raises(RangeNotSatisfiable):
        plan(store, {"range": "bytes=9-5"})
    assert open_fds() <= before


def test_two_thousand_overlapping_ranges(store, render, open_fds):
    header = "bytes=" + ",".join(f"{i}-{i + 100}" for i in range(2000))
    before = open_fds()
    with pytest.raises(RangeNotSatisfiable, match="too many"):
        plan(store, {"range": header})
    assert open_fds() <= before
    r = plan(store, {"range": header}, limits=Limits(max_ranges=2000))
    try:
        assert r.status == 206
        assert dict(r.headers)["Content-Range"] == f"bytes 0-2099/{SIZE}"  # one span, not 2000 parts
        assert render(r.body) == DATA[:2100]
    finally:
        r.close()


def test_other_unit_is_ignored(store, render):
    r = plan(store, {"range": "items=0-1"})
    assert r.status == 200 and render(r.body) == DATA
    r.close()


# -- conditional requests --------------------------------------------------------------------


def _validators(store, path="b.bin"):
    r = plan(store, path=path)
    r.close()
    h = dict(r.headers)
    return h["ETag"], h["Last-Modified"]


@pytest.mark.parametrize("method", ["GET", "HEAD"])
def test_not_modified(store, open_fds, method):
    tag, date = _validators(store)
    before = open_fds()
    for headers in ({"if-none-match": tag}, {"if-none-match": f'W/{tag}'}, {"if-none-match": "*"},
                    {"if-modified-since": date}):
        r = plan(store, headers, method=method)
        assert r.status == 304
        assert r.headers == [("ETag", tag), ("Last-Modified", date)]
        assert r.body == [] and r.files in ((), [])
    assert open_fds() <= before  # each file closed at once


def test_modified(store, render):
    tag, _ = _validators(store)
    for headers in ({"if-none-match": '"other"'}, {"if-modified-since": "Thu, 01 Jan 1970 00:00:00 GMT"},
                    {"if-modified-since": "not a date"}, {"if-match": tag}, {"if-match": "*"}):
        r = plan(store, headers)
        assert r.status == 200, headers
        assert render(r.body) == DATA
        r.close()


def test_precondition_failed(store, open_fds):
    tag, _ = _validators(store)
    before = open_fds()
    for headers, method in (({"if-match": '"other"'}, "GET"), ({"if-match": f"W/{tag}"}, "GET"),
                            ({"if-unmodified-since": "Thu, 01 Jan 1970 00:00:00 GMT"}, "GET"),
                            ({"if-none-match": tag}, "POST")):
        with pytest.raises(PreconditionFailed) as info:
            plan(store, headers, method=method)
        assert info.value.status == 412 and info.value.paths == ["b.bin"]
    assert open_fds() <= before


def _settle(path):
    """Wait until the file's last change is a second old: only then is its date strong."""
    st_ = os.stat(path)
    changed = max(st_.st_mtime_ns, st_.st_ctime_ns) / 1e9
    time.sleep(max(0.0, changed + 1.05 - time.time()))


OWN_MTIMES_NS = [1_700_000_000_000_000_000, 1_700_000_000_500_000_000, 1_700_000_000_999_999_000]


@pytest.fixture(scope="module")
def settled(tmp_path_factory):
    """A root whose files' last change is a second old, waited for once for the module: b.bin,
    ``at-<ns>.bin`` (b.bin with each mtime of OWN_MTIMES_NS) and ``weak.bin``, which only
    test_if_range_date_is_weak_within_a_second_of_a_change writes to; the others only read."""
    base = tmp_path_factory.mktemp("settled")
    for name in ("b.bin", "weak.bin", *(f"at-{ns}.bin" for ns in OWN_MTIMES_NS)):
        (base / name).write_bytes(DATA)
    for ns in OWN_MTIMES_NS:
        os.utime(base / f"at-{ns}.bin", ns=(ns, ns))
    for path in base.iterdir():
        _settle(path)
    return base


def test_if_range(settled, render):
    store = FileStore(settled)
    tag, date = _validators(store)
    for if_range, status in ((tag, 206), ('"other"', 200), (f"W/{tag}", 200), (date, 206),
                             ("Thu, 01 Jan 1970 00:00:00 GMT", 200), ("garbage", 200)):
        r = plan(store, {"range": "bytes=0-9", "if-range": if_range})
        try:
            assert r.status == status, if_range
            assert render(r.body) == (DATA[:10] if status == 206 else DATA)
        finally:
            r.close()


def test_if_range_does_not_rescue_a_bad_range(store):
    tag, _ = _validators(store)
    with pytest.raises(RangeNotSatisfiable):
        plan(store, {"range": f"bytes={SIZE}-", "if-range": tag})
    r = plan(store, {"range": f"bytes={SIZE}-", "if-range": '"other"'})  # ignored: the whole file
    assert r.status == 200
    r.close()


def _set_mtime_ns(path, mtime_ns):
    os.utime(path, ns=(mtime_ns, mtime_ns))
    if os.stat(path).st_mtime_ns != mtime_ns:
        pytest.skip("the filesystem does not keep this mtime")


@pytest.mark.parametrize("mtime_ns", OWN_MTIMES_NS)
def test_own_last_modified_is_honoured(settled, mtime_ns):
    path = f"at-{mtime_ns}.bin"
    if os.stat(settled / path).st_mtime_ns != mtime_ns:
        pytest.skip("the filesystem does not keep this mtime")
    store = FileStore(settled)
    _, date = _validators(store, path)
    r = plan(store, {"if-modified-since": date}, path=path)
    assert r.status == 304
    r = plan(store, {"range": "bytes=0-0", "if-range": date}, path=path)
    assert r.status == 206
    r.close()


@pytest.mark.slow  # waits for a change to be a second old
@pytest.mark.parametrize("mtime_ns", [1_700_000_000_999_999_600, -1_500_000_000])
def test_own_last_modified_is_honoured_at_the_edges(root, store, mtime_ns):
    _set_mtime_ns(root / "b.bin", mtime_ns)
    _settle(root / "b.bin")
    _, date = _validators(store)
    r = plan(store, {"range": "bytes=0-0", "if-range": date})
    r.close()
    assert r.status == 206
    r = plan(store, {"if-modified-since": date})
    r.close()
    assert r.status == 304


def test_if_range_date_is_weak_within_a_second_of_a_change(settled, render):
    """Two versions written within one second share a Last-Modified: while the change is less
    than a second old, a date If-Range must not name a version (RFC 9110 13.1.5, 8.8.2.2)."""
    store, path = FileStore(settled), settled / "weak.bin"
    _, date = _validators(store, "weak.bin")
    st_ = os.stat(path)
    path.write_bytes(DATA[::-1])  # a new version of the same size...
    os.utime(path, ns=(st_.st_atime_ns, st_.st_mtime_ns))  # ...with the same Last-Modified
    r = plan(store, {"range": "bytes=0-9", "if-range": date}, path="weak.bin")
    try:
        assert r.status == 200 and render(r.body) == DATA[::-1]
    finally:
        r.close()
    _settle(path)  # a second later the date is strong again
    r = plan(store, {"range": "bytes=0-9", "if-range": date}, path="weak.bin")
    try:
        assert r.status == 206 and render(r.body) == DATA[::-1][:10]
    finally:
        r.close()


def test_missing_and_forbidden(store):
    with pytest.raises(NotFound):
        plan(store, path="nope")
    with pytest.raises(HTTPError) as info:
        plan(store, path="../outside.txt")
    assert info.value.status == 403


def test_etag_function(store):
    f = store.open("a.txt")
    try:
        assert etag(f) == f'"{f.inode:x}-{f.mtime_ns:x}-{f.size:x}"'
    finally:
        f.close()


# -- property: any Range header gives the bytes it asks for ------------------------------------

_spec = st.one_of(
    st.tuples(st.integers(0, SIZE + 50), st.one_of(st.none(), st.integers(0, SIZE + 50))).map(
        lambda t: f"{t[0]}-{'' if t[1] is None else t[1]}"
    ),
    st.integers(0, SIZE + 50).map(lambda n: f"-{n}"),
)


@settings(max_examples=150, deadline=None, database=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(specs=st.lists(_spec, min_size=1, max_size=6))
def test_range_property(store, render, parse_multipart, specs):
    header = "bytes=" + ",".join(specs)
    try:
        r = plan(store, {"range": header})
    except RangeNotSatisfiable:
        return
    try:
        assert r.status == 206
        h = dict(r.headers)
        if h["Content-Type"].startswith("multipart/byteranges"):
            parts = byteranges(r, render, parse_multipart)
            assert len(parts) >= 2
        else:
            parts = [(h["Content-Type"], h["Content-Range"], h["Content-Length"], render(r.body))]
        spans = []
        for _, content_range, length, data in parts:
            m = re.fullmatch(rf"bytes (\d+)-(\d+)/{SIZE}", content_range)
            start, stop = int(m.group(1)), int(m.group(2)) + 1
            assert data == DATA[start:stop] and int(length) == len(data)
            spans.append((start, stop))
        ordered = sorted(spans)
        for (_, stop), (start, _) in zip(ordered, ordered[1:]):
            assert stop < start  # apart, never touching
    finally:
        r.close()
