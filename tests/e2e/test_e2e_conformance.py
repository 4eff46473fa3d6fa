"""HTTP conformance that tools nobody here wrote checked (REDbot, curl, browsers, nginx side by
side): batch preconditions, trailing slashes, range order, empty files, weak dates,
``Cache-Control``, a batch's file name, ``OPTIONS *``. On every runtime."""

from __future__ import annotations

import os
import time

import pytest

from e2e_wire import batch_target, content_type_of, walk_multipart

pytestmark = [pytest.mark.slow, pytest.mark.timeout(60)]  # every runtime over real sockets

AB = ["examples/a.bin", "examples/b.bin"]
A = "/files/examples/a.bin"


def batch_etag(server, target):
    resp = server.head(target)
    assert resp.status == 200, resp.describe()
    etag = resp.header("etag")
    assert etag and etag.startswith('"'), resp.describe()
    return etag


# -- a batch is a resource: its preconditions are evaluated (RFC 9110 13.2.1) -------------------


@pytest.mark.parametrize("method", ["GET", "HEAD"])
def test_batch_if_none_match_its_etag_is_304(server, method):
    target = batch_target(AB)
    etag = batch_etag(server, target)
    for value in (etag, f'"other", {etag}', f"W/{etag}", "*"):
        resp = server.request(method, target, [("If-None-Match", value)])
        assert resp.status == 304, (value, resp.describe())
        assert resp.body == b"" and resp.trailing == b"", "304 with a body"
        assert resp.header("etag") == etag
    resp = server.request(method, target, [("If-None-Match", '"other"')])
    assert resp.status == 200, resp.describe()


def test_batch_post_if_none_match_is_412(server):
    """A POST that matches ``If-None-Match`` must not be performed: 412, not 304 (13.1.2)."""
    body = b'{"files": ["examples/a.bin", "examples/b.bin"]}'
    etag = server.request("POST", "/api/stream-files", [("Content-Type", "application/json")], body).header("etag")
    resp = server.request("POST", "/api/stream-files", [("Content-Type", "application/json"),
                                                        ("If-None-Match", etag)], body)
    resp.error(412)


def test_batch_if_match(server):
    target = batch_target(AB)
    etag = batch_etag(server, target)
    resp = server.get(target, [("If-Match", '"nomatch"')])
    body = resp.error(412)
    assert body["code"] == "precondition_failed", resp.describe()
    for value in (etag, "*", f'"x", {etag}'):
        assert server.get(target, [("If-Match", value)]).status == 200, value
    # A weak tag never matches If-Match (strong comparison).
    server.get(target, [("If-Match", f"W/{etag}")]).error(412)


def test_batch_resume_with_if_match_after_a_change_is_412_not_a_splice(server, served_root):
    """A client resuming with Range + If-Match of the version it began must not get a 206 of
    the new version: that would splice two versions into one download."""
    name = f"examples/resume-{server.name}.bin"
    path = served_root / name
    path.write_bytes(b"1" * 5000)
    paths = [name, "examples/small.txt"]
    target = batch_target(paths)
    first = server.get(target)
    assert first.status == 200, first.describe()
    old = first.header("etag")
    time.sleep(0.01)
    path.write_bytes(b"2" * 5000)  # same size, new content
    resp = server.get(target, [("Range", "bytes=100-"), ("If-Match", old)])
    resp.error(412)
    # With the current tag the resume is served.
    new = batch_etag(server, target)
    assert new != old
    resp = server.get(target, [("Range", "bytes=100-"), ("If-Match", new)])
    assert resp.status == 206, resp.describe()


def test_batch_if_none_match_ignores_dates(server):
    """A batch has no Last-Modified: date conditions are ignored, not guessed."""
    target = batch_target(AB)
    past, future = "Thu, 01 Jan 1970 00:00:00 GMT", "Fri, 01 Jan 2100 00:00:00 GMT"
    assert server.get(target, [("If-Modified-Since", future)]).status == 200
    assert server.get(target, [("If-Unmodified-Since", past)]).status == 200


# -- a trailing slash names a directory ---------------------------------------------------------


@pytest.mark.parametrize("target", [A + "/", A + "/.", "/files/examples/small.txt/"])
def test_trailing_slash_on_a_file_is_404(server, target):
    body = server.get(target).error(404)
    assert body["code"] == "not_found"


def test_trailing_slash_in_a_batch_is_404(server):
    resp = server.get(batch_target(["examples/a.bin/", "examples/b.bin"]))
    body = resp.error(404)
    assert body["paths"] == ["examples/a.bin/"]


def test_directory_with_or_without_slash_is_still_403(server):
    for target in ("/files/examples", "/files/examples/"):
        server.get(target).error(403)


def test_empty_components_agree(server, served_root):
    """``/files//a`` and ``/files/sub//a`` both collapse the empty component, as nginx does."""
    data = (served_root / "examples/a.bin").read_bytes()
    for target in ("/files//examples/a.bin", "/files/examples//a.bin", "/files///examples/a.bin"):
        resp = server.get(target)
        assert resp.status == 200 and resp.body == data, (target, resp.describe())


# -- ranges ------------------------------------------------------------------------------------


def test_multiple_ranges_come_back_in_the_order_asked(server, served_root):
    data = (served_root / "examples/a.bin").read_bytes()
    resp = server.get(A, [("Range", "bytes=100-199,0-9,50-59")])
    assert resp.status == 206, resp.describe()
    boundary = content_type_of(resp.header("content-type")).get_param("boundary")
    parts = walk_multipart(resp.body, boundary)
    got = [(headers["content-range"].decode(), body) for headers, body in parts]
    size = len(data)
    assert got == [
        (f"bytes 100-199/{size}", data[100:200]),
        (f"bytes 0-9/{size}", data[0:10]),
        (f"bytes 50-59/{size}", data[50:60]),
    ]


@pytest.mark.parametrize("header", ["bytes=0-", "bytes=-5", "bytes=0-0"])
def test_a_range_on_an_empty_file_is_an_empty_200(server, header):
    resp = server.get("/files/examples/empty.bin", [("Range", header)])
    assert resp.status == 200, resp.describe()
    assert resp.header("content-length") == "0" and resp.body == b""


def test_if_range_date_is_ignored_while_the_date_is_weak(server, served_root):
    """Two versions written within one second share a Last-Modified: a date If-Range against
    it must not splice them (RFC 9110 13.1.5). Rewritten at the same size, mtime put back."""
    name = f"examples/weak-{server.name}.bin"
    path = served_root / name
    path.write_bytes(b"a" * 1000)
    os.utime(path, ns=(time.time_ns(), (time.time_ns() // 10**9) * 10**9))
    first = server.get("/files/" + name)
    assert first.status == 200, first.describe()
    date = first.header("last-modified")
    mtime_ns = path.stat().st_mtime_ns
    path.write_bytes(b"b" * 1000)  # a second version, same size
    os.utime(path, ns=(mtime_ns, mtime_ns))  # and the same second: the same Last-Modified
    written = time.monotonic()
    resp = server.get("/files/" + name, [("Range", "bytes=500-"), ("If-Range", date)])
    if time.monotonic() - written > 0.8:
        pytest.skip("the machine took most of a second to answer: the date may be strong by now")
    assert resp.status == 200 and resp.body == b"b" * 1000, resp.describe()


def test_if_range_date_is_honoured_once_strong(server, served_root):
    name = f"examples/strong-{server.name}.bin"
    path = served_root / name
    path.write_bytes(b"c" * 1000)
    time.sleep(1.1)  # the change is now more than a second old
    date = server.get("/files/" + name).header("last-modified")
    resp = server.get("/files/" + name, [("Range", "bytes=500-"), ("If-Range", date)])
    assert resp.status == 206 and resp.body == b"c" * 500, resp.describe()


# -- caching -----------------------------------------------------------------------------------


def test_health_and_errors_are_no_store(server):
    assert server.get("/api/health").header("cache-control") == "no-store"
    for target in ("/files/missing.bin", "/files/.secret", "/nowhere", batch_target(["missing.bin"])):
        resp = server.get(target)
        assert resp.status >= 400 and resp.header("cache-control") == "no-store", (target, resp.describe())


def test_files_and_batches_carry_the_cache_policy(server):
    """The default policy: caches may keep them but must revalidate (a cheap 304)."""
    file = server.get(A)
    batch = server.get(batch_target(AB))
    for resp in (file, batch, server.get(A, [("Range", "bytes=0-9")])):
        assert resp.header("cache-control") == "no-cache", resp.describe()
    not_modified = server.get(A, [("If-None-Match", file.header("etag"))])
    assert not_modified.status == 304 and not_modified.header("cache-control") == "no-cache"
    not_modified = server.get(batch_target(AB), [("If-None-Match", batch.header("etag"))])
    assert not_modified.status == 304 and not_modified.header("cache-control") == "no-cache"


# -- names and methods -------------------------------------------------------------------------


def test_a_batch_is_saved_under_a_sensible_name(server):
    for resp in (server.get(batch_target(AB)), server.post_files(AB)):
        assert resp.status == 200, resp.describe()
        assert resp.header("content-disposition") == 'attachment; filename="batch.multipart"'


def test_options_asterisk_lists_the_methods(server):
    resp = server.request("OPTIONS", "*")
    if server.name.startswith("nginx+") and resp.status == 400:
        server.quirk("nginx refuses OPTIONS * itself (400) before Axon sees it")
        resp.error(400)
        return
    assert resp.status == 200, resp.describe()
    allowed = {m.strip() for m in (resp.header("allow") or "").split(",")}
    assert {"GET", "HEAD", "POST", "OPTIONS"} <= allowed, resp.describe()
    assert resp.header("content-length") == "0" and resp.body == b""
