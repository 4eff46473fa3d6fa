"""Batches over real sockets: ``/api/stream-files`` by GET, POST and HEAD, on every runtime."""

from __future__ import annotations

from urllib.parse import urljoin

import pytest

from e2e_wire import (
    HOSTILE_NAME,
    JSON_HEADERS,
    UNICODE_NAME,
    batch_target,
    check_batch,
    content_type_of,
    parse_multipart,
    walk_multipart,
)

pytestmark = [pytest.mark.slow, pytest.mark.timeout(60)]  # every runtime over real sockets

AB = ["examples/a.bin", "examples/b.bin"]


def test_health(server):
    resp = server.get("/api/health")
    assert resp.status == 200, resp.describe()
    assert resp.json() == {"status": "available"}


def test_head_health(server):
    get = server.get("/api/health")
    head = server.head("/api/health")
    assert head.status == 200, head.describe()
    assert head.body == b"" and head.trailing == b"", "HEAD sent a body"
    assert head.header("content-type") == get.header("content-type")
    assert head.header("content-length") == get.header("content-length")


def test_get_two_files(server, served_root):
    resp = server.get(batch_target(AB))
    parts = check_batch(resp, AB, served_root)
    # the email parser agrees with the per-part headers
    assert [p["Content-Location"] for p in parts] == ["/files/" + p for p in AB]
    assert [p.get_content_type() for p in parts] == ["application/octet-stream"] * 2


def test_get_repeats_and_free_parameter_names(server, served_root):
    paths = ["examples/a.bin", "examples/small.txt", "examples/a.bin", "examples/small.txt"]
    resp = server.get(batch_target(paths, names=["a", "zz", "a", "file1"]))
    check_batch(resp, paths, served_root)


def test_get_single_file_is_still_multipart(server, served_root):
    resp = server.get(batch_target(["examples/small.txt"], names=["only"]))
    check_batch(resp, ["examples/small.txt"], served_root)


def test_get_nested_empty_and_inside_symlink(server, served_root):
    paths = ["deep/dir/c.bin", "examples/empty.bin", "examples/link.bin", "examples/./small.txt"]
    resp = server.get(batch_target(paths))
    check_batch(resp, paths, served_root)


def test_boundary_never_in_content_and_unique_per_batch(server, served_root):
    # check_batch asserts the boundary is legal, >= 96 bits, and occurs only as delimiters.
    first = server.get(batch_target(AB))
    second = server.get(batch_target(["examples/a.bin"]))
    check_batch(first, AB, served_root)
    check_batch(second, ["examples/a.bin"], served_root)


def test_post_matches_get(server, served_root):
    get = server.get(batch_target(AB))
    post = server.post_files(AB)
    check_batch(post, AB, served_root)
    check_batch(get, AB, served_root)
    get_parts = walk_multipart(get.body, content_type_of(get.header("content-type")).get_boundary())
    post_parts = walk_multipart(post.body, content_type_of(post.header("content-type")).get_boundary())
    assert post_parts == get_parts, "POST and GET batches differ in part headers or bodies"


def test_post_repeats_and_hostile_names(server, served_root):
    paths = ["examples/small.txt", f"examples/{HOSTILE_NAME}", f"examples/{UNICODE_NAME}", "examples/small.txt"]
    check_batch(server.post_files(paths), paths, served_root)


@pytest.mark.parametrize("method", ["GET", "POST"])
def test_content_location_fetches_that_very_file(server, served_root, method):
    """Each part's Content-Location, resolved against the batch URL (RFC 9110 §8.7: it is a URI
    reference), is a URL that answers with exactly the part's bytes: a nested path, a path with a
    dot segment, a non-ASCII name and one with a quote and a newline."""
    paths = ["deep/dir/c.bin", "examples/./small.txt", f"examples/{UNICODE_NAME}", f"examples/{HOSTILE_NAME}"]
    target = batch_target(paths) if method == "GET" else "/api/stream-files"
    resp = server.get(target) if method == "GET" else server.post_files(paths)
    assert resp.status == 200, resp.describe()
    origin = "http://axon.test"
    for headers, data in walk_multipart(resp.body, content_type_of(resp.header("content-type")).get_boundary()):
        url = urljoin(origin + target, headers["content-location"].decode("ascii"))
        assert url.startswith(origin + "/"), f"{headers['content-location']!r} leaves the server: {url}"
        single = server.get(url[len(origin) :])
        assert single.status == 200, f"{url}\n{single.describe()}"
        assert single.body == data, f"{url} is not the part's bytes"
    check_batch(resp, paths, served_root)


@pytest.mark.parametrize(
    "body",
    [
        b"{",
        b"not json",
        b"\xff\xfe{}",
        b"[]",
        b'"examples/a.bin"',
        b"{}",
        b'{"file": ["examples/a.bin"]}',
        b'{"files": "examples/a.bin"}',
        b'{"files": [1, 2]}',
        b'{"files": [["examples/a.bin"]]}',
        b'{"files": [null]}',
        b'{"files": {"a": "examples/a.bin"}}',
    ],
    ids=[
        "truncated", "not-json", "bad-utf8", "array", "string", "no-files", "misspelt-key",
        "files-string", "files-ints", "files-nested", "files-null", "files-object",
    ],
)  # fmt: skip
def test_post_malformed_is_400_json(server, body):
    resp = server.request("POST", "/api/stream-files", JSON_HEADERS, body)
    resp.error(400)


def test_head_get_batch(server):
    target = batch_target(AB)
    get = server.get(target)
    head = server.head(target)
    assert head.status == 200, head.describe()
    assert head.body == b"" and head.trailing == b"", f"HEAD sent {len(head.trailing)} body bytes"
    assert content_type_of(head.header("content-type")).get_content_type() == "multipart/mixed"
    assert head.header("content-length") == get.header("content-length"), (
        f"HEAD Content-Length {head.header('content-length')} != GET {get.header('content-length')}"
    )


def test_head_files(server, served_root):
    get = server.get("/files/examples/a.bin")
    head = server.head("/files/examples/a.bin")
    assert head.status == 200, head.describe()
    assert head.body == b"" and head.trailing == b"", "HEAD sent a body"
    for name in ("content-type", "content-length", "etag", "last-modified", "accept-ranges"):
        assert head.header(name) == get.header(name), f"HEAD {name}: {head.header(name)!r} != {get.header(name)!r}"
    assert head.header("content-length") == str((served_root / "examples/a.bin").stat().st_size)


def test_missing_file_is_404_not_200(server):
    resp = server.get(batch_target(["examples/a.bin", "examples/nope.bin"]))
    err = resp.error(404)
    assert err["code"] == "not_found"
    assert err["paths"] == ["examples/nope.bin"]


def test_missing_file_post_is_404(server):
    resp = server.post_files(["examples/nope.bin", "examples/a.bin"])
    err = resp.error(404)
    assert err["code"] == "not_found"
    assert err["paths"] == ["examples/nope.bin"]


def test_every_missing_file_is_named(server):
    missing = ["examples/nope1.bin", "nope/at/all.bin", "examples/nope1.bin"]
    resp = server.get(batch_target(["examples/a.bin", *missing]))
    err = resp.error(404)
    assert set(err["paths"]) == set(missing)


def test_missing_and_forbidden_together_name_every_offender(server):
    offenders = ["examples/nope.bin", ".secret", "escape", "../etc/passwd", "examples"]
    resp = server.get(batch_target(["examples/a.bin", *offenders, "examples/b.bin"]))
    assert 400 <= resp.status < 500, resp.describe()
    err = resp.error()
    assert set(offenders) <= set(err["paths"]), f"paths {err['paths']} miss some of {offenders}"
    assert "examples/a.bin" not in err["paths"] and "examples/b.bin" not in err["paths"]
    assert b"root:" not in resp.body


def test_email_reads_the_parts_in_order(server, served_root):
    paths = ["examples/small.txt", "deep/dir/c.bin", "examples/small.txt"]
    resp = server.get(batch_target(paths))
    check_batch(resp, paths, served_root)
    msg = parse_multipart(resp)
    got = [(p["Content-Location"], p.get_content_type(), int(p["Content-Length"])) for p in msg.iter_parts()]
    sizes = [(served_root / p).stat().st_size for p in paths]
    assert got == [
        ("/files/examples/small.txt", "text/plain", sizes[0]),
        ("/files/deep/dir/c.bin", "application/octet-stream", sizes[1]),
        ("/files/examples/small.txt", "text/plain", sizes[2]),
    ]
