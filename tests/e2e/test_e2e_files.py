"""Single files, ``GET /files/<path>``: validators, ranges and conditional requests, on every runtime."""

from __future__ import annotations

import email.utils
import re

import pytest

from e2e_wire import A_SIZE, content_type_of, parse_multipart, walk_multipart

pytestmark = [pytest.mark.slow, pytest.mark.timeout(60)]  # every runtime over real sockets

A = "/files/examples/a.bin"


@pytest.fixture(scope="module")
def a_bytes(served_root):
    return (served_root / "examples/a.bin").read_bytes()


def validators(server):
    resp = server.head(A)
    assert resp.status == 200, resp.describe()
    return resp.header("etag"), resp.header("last-modified")


def test_whole_file(server, served_root, a_bytes):
    resp = server.get(A)
    assert resp.status == 200, resp.describe()
    assert resp.header("content-length") == str(A_SIZE)
    assert resp.header("transfer-encoding") is None
    assert resp.body == a_bytes and resp.trailing == b""
    assert resp.header("accept-ranges") == "bytes"
    assert resp.header("content-type").split(";")[0] == "application/octet-stream"
    etag = resp.header("etag")
    assert etag and re.fullmatch(r'(W/)?"[\x21\x23-\x7e]*"', etag), f"bad ETag {etag!r}"
    modified = resp.header("last-modified")
    assert modified, resp.describe()
    when = email.utils.parsedate_to_datetime(modified)
    assert int(when.timestamp()) == int((served_root / "examples/a.bin").stat().st_mtime), modified
    assert modified.endswith(" GMT"), f"Last-Modified not an IMF-fixdate: {modified!r}"


def test_empty_file(server):
    resp = server.get("/files/examples/empty.bin")
    assert resp.status == 200, resp.describe()
    assert resp.header("content-length") == "0" and resp.body == b"" and resp.trailing == b""


def test_nested_file(server, served_root):
    resp = server.get("/files/deep/dir/c.bin")
    assert resp.status == 200, resp.describe()
    assert resp.body == (served_root / "deep/dir/c.bin").read_bytes()


def check_206(resp, start, stop, data):
    assert resp.status == 206, resp.describe()
    assert resp.header("content-range") == f"bytes {start}-{stop}/{len(data)}"
    assert resp.header("content-length") == str(stop - start + 1)
    assert resp.body == data[start : stop + 1] and resp.trailing == b""


def test_range_first_bytes(server, a_bytes):
    check_206(server.get(A, [("Range", "bytes=0-99")]), 0, 99, a_bytes)


def test_range_suffix(server, a_bytes):
    check_206(server.get(A, [("Range", "bytes=-100")]), A_SIZE - 100, A_SIZE - 1, a_bytes)


def test_range_open_ended(server, a_bytes):
    check_206(server.get(A, [("Range", "bytes=100-")]), 100, A_SIZE - 1, a_bytes)


def test_range_end_past_size_is_clamped(server, a_bytes):
    check_206(server.get(A, [("Range", f"bytes={A_SIZE - 10}-{A_SIZE * 5}")]), A_SIZE - 10, A_SIZE - 1, a_bytes)


def check_byteranges(resp, spans, data):
    """A 206 multipart/byteranges with one part per (start, stop) span, in order."""
    assert resp.status == 206, resp.describe()
    assert resp.header("content-length") == str(len(resp.body)) and resp.trailing == b""
    ctype = content_type_of(resp.header("content-type"))
    assert ctype.get_content_type() == "multipart/byteranges", resp.header("content-type")
    walked = walk_multipart(resp.body, ctype.get_boundary())
    assert [h["content-range"].decode() for h, _ in walked] == [f"bytes {a}-{b}/{len(data)}" for a, b in spans]
    assert [body for _, body in walked] == [data[a : b + 1] for a, b in spans]
    parts = list(parse_multipart(resp).iter_parts())
    assert [p["Content-Range"] for p in parts] == [f"bytes {a}-{b}/{len(data)}" for a, b in spans]
    assert [p.get_payload(decode=True) for p in parts] == [data[a : b + 1] for a, b in spans]
    assert all(p.get_content_type() == "application/octet-stream" for p in parts)


def test_multiple_ranges(server, a_bytes):
    resp = server.get(A, [("Range", "bytes=0-9,50000-50099,-100")])
    check_byteranges(resp, [(0, 9), (50000, 50099), (A_SIZE - 100, A_SIZE - 1)], a_bytes)


def test_head_multiple_ranges(server):
    get = server.get(A, [("Range", "bytes=0-9,50000-50099")])
    head = server.head(A, [("Range", "bytes=0-9,50000-50099")])
    assert head.status == 206 and head.body == b"" and head.trailing == b"", head.describe()
    assert head.header("content-length") == get.header("content-length")


def test_ranges_at_the_cap(server, a_bytes):
    """16 disjoint ranges (Limits.max_ranges) are served; 17 are refused."""
    spans = [(i * 1000, i * 1000 + 9) for i in range(16)]
    header = "bytes=" + ",".join(f"{a}-{b}" for a, b in spans)
    check_byteranges(server.get(A, [("Range", header)]), spans, a_bytes)
    resp = server.get(A, [("Range", header + ",20000-20009")])
    resp.error(416)


def check_416(resp, size=A_SIZE):
    resp.error(416)
    assert resp.header("content-range") == f"bytes */{size}", resp.describe()


def test_unsatisfiable_range(server):
    check_416(server.get(A, [("Range", "bytes=999999999-")]))


def test_inverted_range(server):
    check_416(server.get(A, [("Range", "bytes=500-100")]))


def test_malformed_range_on_empty_file(server):
    check_416(server.get("/files/examples/empty.bin", [("Range", "bytes=5-4")]), size=0)


def test_too_many_overlapping_ranges(server, a_bytes):
    """2,000 overlapping ranges (Apache CVE-2011-3192's shape): 416, and the server lives on.

    The header is kept under 8,190 bytes so that gunicorn (limit_request_field_size) lets it
    through to Axon."""
    header = "bytes=" + ",".join(f"0-{i % 10}" for i in range(2000))
    assert len("Range: " + header) < 8190
    check_416(server.get(A, [("Range", header)]))
    resp = server.get(A)
    assert resp.status == 200 and resp.body == a_bytes, resp.describe()


def test_if_none_match(server):
    etag, _ = validators(server)
    resp = server.get(A, [("If-None-Match", etag)])
    assert resp.status == 304, resp.describe()
    assert resp.body == b"" and resp.trailing == b"", "304 with a body"
    assert resp.header("etag") == etag


def test_if_none_match_list_and_star(server):
    etag, _ = validators(server)
    assert server.get(A, [("If-None-Match", f'"nope", {etag}')]).status == 304
    assert server.get(A, [("If-None-Match", "*")]).status == 304
    assert server.get(A, [("If-None-Match", '"nope"')]).status == 200


def test_if_modified_since(server):
    _, modified = validators(server)
    resp = server.get(A, [("If-Modified-Since", modified)])
    assert resp.status == 304, resp.describe()
    assert resp.body == b"" and resp.trailing == b""
    old = server.get(A, [("If-Modified-Since", "Thu, 01 Jan 1998 00:00:00 GMT")])
    assert old.status == 200, old.describe()


def test_if_match(server, a_bytes):
    etag, _ = validators(server)
    err = server.get(A, [("If-Match", '"other"')]).error(412)
    assert err["code"]
    resp = server.get(A, [("If-Match", etag)])
    assert resp.status == 200 and resp.body == a_bytes, resp.describe()


def test_if_range(server, a_bytes):
    etag, _ = validators(server)
    check_206(server.get(A, [("Range", "bytes=0-99"), ("If-Range", etag)]), 0, 99, a_bytes)
    stale = server.get(A, [("Range", "bytes=0-99"), ("If-Range", '"stale"')])
    assert stale.status == 200, stale.describe()
    assert stale.body == a_bytes and stale.header("content-range") is None
