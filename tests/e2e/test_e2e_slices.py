"""Byte ranges of files inside a batch POST, over real sockets, on every runtime: each part is
the slice of the local file, with its Content-Range; refusals are JSON before the first byte."""

from __future__ import annotations

import pytest

from e2e_wire import (
    A_SIZE,
    B_SIZE,
    BIG_SIZE,
    JSON_HEADERS,
    MiB,
    check_boundary,
    check_length,
    check_part_headers,
    content_type_of,
    files_body,
    parse_multipart,
    walk_multipart,
)

pytestmark = [pytest.mark.slow, pytest.mark.timeout(60)]  # every runtime over real sockets

A, B, SMALL = "examples/a.bin", "examples/b.bin", "examples/small.txt"


def _parts(resp):
    """[(part headers, bytes)] of a 200 batch, its framing checked."""
    assert resp.status == 200, resp.describe()
    check_length(resp)
    boundary = check_boundary(content_type_of(resp.header("content-type")).get_boundary())
    return walk_multipart(resp.body, boundary)


def _expect(root, path, offset=None, length=None):
    """(bytes, Content-Range or None) for an item, computed from the local file."""
    data = (root / path).read_bytes()
    if offset is None:
        return data, None
    if offset < 0:
        start, stop = max(0, len(data) + offset), len(data)
    else:
        start, stop = offset, len(data) if length is None else min(len(data), offset + length)
    return data[start:stop], f"bytes {start}-{stop - 1}/{len(data)}".encode()


def _check(resp, root, items):
    parts = _parts(resp)
    assert len(parts) == len(items)
    for (headers, data), item in zip(parts, items):
        if isinstance(item, str):
            path, want = item, _expect(root, item)
        else:
            path, want = item["path"], _expect(root, item["path"], item["offset"], item.get("length"))
        check_part_headers({k: v for k, v in headers.items() if k != "content-range"}, path, len(want[0]))
        assert headers.get("content-range") == want[1], (path, headers)
        assert data == want[0], f"part for {item} differs from the local slice"
    # The standard library's parser reads the same parts.
    assert [p.get_payload(decode=True) for p in parse_multipart(resp).iter_parts()] == [d for _, d in parts]
    return parts


def test_slices_are_the_local_bytes(server, served_root):
    items = [
        {"path": A, "offset": 1000, "length": 64},
        SMALL,
        {"path": B, "offset": 0, "length": 1},
        {"path": B, "offset": B_SIZE // 2},  # to the end
        {"path": SMALL, "offset": 7, "length": 4},
    ]
    _check(server.post_files(items), served_root, items)


def test_negative_offsets_and_clamping(server, served_root):
    items = [
        {"path": B, "offset": -10},  # the last 10 bytes
        {"path": SMALL, "offset": -10_000},  # longer than the file: all of it
        {"path": A, "offset": A_SIZE - 5, "length": 100},  # runs past the end: clamped to 5
        {"path": A, "offset": 0, "length": 10 * A_SIZE},
    ]
    parts = _check(server.post_files(items), served_root, items)
    assert [len(d) for _, d in parts] == [10, len((served_root / SMALL).read_bytes()), 5, A_SIZE]


def test_the_same_path_sliced_differently(server, served_root):
    # What fsspec's cat_ranges sends: one file, many ranges, some overlapping, in any order.
    items = [{"path": A, "offset": o, "length": n} for o, n in [(0, 100), (50, 100), (99_000, 4000), (0, 100), (10, 1)]]
    items.insert(2, A)
    _check(server.post_files(items), served_root, items)


def test_a_slice_deep_in_a_large_file(server):
    # 200 MiB into a sparse file: the slice is read at its offset, not copied from the start.
    resp = server.post_files([{"path": "examples/big.bin", "offset": 200 * MiB, "length": MiB}], timeout=30)
    [(headers, data)] = _parts(resp)
    assert headers["content-range"] == f"bytes {200 * MiB}-{201 * MiB - 1}/{BIG_SIZE}".encode()
    assert data == bytes(MiB)


def test_unsatisfiable_slices_are_one_416_naming_the_paths(server):
    items = [A, {"path": B, "offset": B_SIZE}, {"path": "examples/empty.bin", "offset": 0},
             {"path": SMALL, "offset": -1}]
    err = server.post_files(items).error(416)
    assert err["code"] == "range_not_satisfiable"
    assert err["paths"] == [B, "examples/empty.bin"]
    assert {d["path"]: d["size"] for d in err["details"]} == {B: B_SIZE, "examples/empty.bin": 0}


@pytest.mark.parametrize("item", [
    {"path": A, "offset": 0, "length": 0},
    {"path": A, "offset": -5, "length": 2},
    {"path": A, "offset": "0"},
    {"path": A},
    {"path": A, "offset": 0, "end": 9},
], ids=["length-0", "negative-with-length", "offset-string", "no-offset", "unknown-key"])
def test_a_malformed_slice_is_400_naming_the_path(server, item):
    err = server.post_files([SMALL, item]).error(400)
    assert err["code"] == "bad_slice" and err["paths"] == [A], err


@pytest.mark.parametrize("target, headers", [
    ("/api/stream-files.zip", ()), ("/api/stream-files.tar", ()),
    ("/api/stream-files", (("Accept", "application/zip"),)),
])
def test_archives_refuse_slices(server, target, headers):
    body = files_body([A, {"path": B, "offset": 0, "length": 10}])
    err = server.request("POST", target, (*JSON_HEADERS, *headers), body).error(400)
    assert err["code"] == "slices_need_multipart"


def test_every_item_counts_against_max_files(server):
    err = server.post_files([{"path": SMALL, "offset": 0, "length": 1}] * 1001).error(413)
    assert err["code"] == "too_many_files"


def test_range_over_a_batch_with_slices(server, served_root):
    items = [{"path": A, "offset": 10, "length": 5000}, SMALL, {"path": B, "offset": -3000}]
    whole = server.post_files(items)
    _check(whole, served_root, items)
    etag = whole.header("etag")
    assert etag and etag != server.post_files([A, SMALL, B]).header("etag")
    cut = len(whole.body) // 3
    resp = server.request("POST", "/api/stream-files", (*JSON_HEADERS, ("Range", f"bytes={cut}-"), ("If-Range", etag)),
                          files_body(items))
    assert resp.status == 206, resp.describe()
    assert resp.header("content-range") == f"bytes {cut}-{len(whole.body) - 1}/{len(whole.body)}"
    assert whole.body[:cut] + resp.body == whole.body
    # The same items again are the same bytes: a slice batch is a resource like any other.
    assert server.post_files(items).body == whole.body


def test_plain_paths_keep_their_batch(server):
    # Paths alone, as objects or not, frame as before: a whole-file item has no Content-Range.
    resp = server.post_files([A, B])
    assert all("content-range" not in headers for headers, _ in _parts(resp))
