"""Resumable batches on the server side: a batch's identity (strong ETag and boundary) and
``Range`` / ``If-Range`` on it, planned in-process and rendered with ``pread``.

Two App instances over one root stand for two pre-forked workers (or a restart): they must
agree on the identity, or a resume reaching the other worker would start over. Any change to a
file (mtime, content of the same size, a new inode) must change it.
"""

from __future__ import annotations

import hashlib
import io
import os
import time
from wsgiref.util import FileWrapper, setup_testing_defaults

import pytest

from axon.app import App, Request
from axon.errors import RangeNotSatisfiable
from axon.storage.local import FileStore
from axon.limits import Limits
from axon.plan.batch import plan_batch
from axon.http.batch_identity import Signature, identity_of
from axon.http.multipart import file_part_headers, frame
from axon.storage.batch_key import derive_key
from axon.wsgi import WSGIApp

PATHS = ["a.txt", "b.bin", "empty.txt", "sub/c.json", "a.txt"]
LIMITS = Limits()


def batch(app: App, paths=PATHS, method="GET", **headers: str):
    """(status, headers, rendered body) of the batch of ``paths`` through ``app``."""
    query = "&".join(f"f{i}={p}" for i, p in enumerate(paths))
    request_headers = {name.replace("_", "-"): value for name, value in headers.items()}
    response = app.handle(Request(method, "/api/stream-files", query, request_headers))
    try:
        body = b"".join(s if isinstance(s, bytes) else os.pread(s.fd, s.count, s.offset) for s in response.body)
        assert len(body) == response.length or method == "HEAD"
        return response.status, dict(response.headers), body
    finally:
        response.close()


def identity(root, paths=PATHS, secret=None) -> tuple[str, str]:
    status, headers, _ = batch(App(root, secret=secret or ""), paths)
    assert status == 200
    return headers["ETag"], headers["Content-Type"]


# -- identity


def test_two_workers_agree_on_etag_boundary_and_bytes(root):
    first, second = App(root, secret=""), App(FileStore(root).root, secret="")
    a, b = batch(first), batch(second)
    assert a == b  # headers and bytes, boundary included
    etag, ctype = a[1]["ETag"], a[1]["Content-Type"]
    assert etag.startswith('"') and len(etag) == 34 and not etag.startswith('W/')
    boundary = ctype.split("boundary=")[1]
    assert len(boundary) == 32 and int(boundary, 16) >= 0 and boundary not in etag
    assert a[1]["Accept-Ranges"] == "bytes"


def test_with_a_secret_workers_agree_and_the_secret_changes_everything(root):
    def planned(secret):
        response = plan_batch(FileStore(root), PATHS, LIMITS, key=derive_key(secret, str(root)))
        response.close()
        return dict(response.headers)["ETag"], dict(response.headers)["Content-Type"]

    assert planned("s1") == planned("s1")
    assert planned("s1")[0] != planned("s2")[0] and planned("s1")[1] != planned("s2")[1]
    assert planned("s1") != identity(root)


def test_the_default_key_is_per_root(root, tmp_path):
    other = tmp_path / "other"
    other.mkdir()
    assert derive_key(None, str(root)) == derive_key(None, os.path.realpath(root))
    assert derive_key(None, str(root)) != derive_key(None, str(other))
    assert derive_key("s", str(root)) == derive_key("s", str(other))  # a secret is per deployment


def touch(path):
    os.utime(path, ns=(path.stat().st_mtime_ns + 1,) * 2)


def rewrite_same_size(path):
    mtime = path.stat().st_mtime_ns
    path.write_bytes(bytes(reversed(path.read_bytes())))
    os.utime(path, ns=(mtime + 1_000_000,) * 2)  # a later write: a coarse test clock must not hide it


def replace_inode(path):
    stat = path.stat()
    fresh = path.with_name("fresh")
    fresh.write_bytes(path.read_bytes())
    os.utime(fresh, ns=(stat.st_atime_ns, stat.st_mtime_ns))
    os.replace(fresh, path)  # same bytes, same mtime, another inode


@pytest.mark.parametrize("change", [touch, replace_inode, rewrite_same_size])
def test_any_change_to_a_file_changes_the_identity(root, change):
    before = identity(root)
    change(root / "b.bin")
    after = identity(root)
    assert after[0] != before[0] and after[1] != before[1]


def test_a_rewrite_with_its_mtime_put_back_is_still_seen(root):
    # Same size, same inode, the old mtime restored: only the ctime (moved by the write and by
    # utime) tells. The pause outlasts one tick of a coarse filesystem clock, the one case no
    # stat-based validator can see.
    path = root / "b.bin"
    before, mtime = identity(root), path.stat().st_mtime_ns
    time.sleep(0.05)
    path.write_bytes(bytes(reversed(path.read_bytes())))
    os.utime(path, ns=(mtime, mtime))
    assert identity(root)[0] != before[0]


def test_order_and_repeats_are_part_of_the_identity(root):
    assert identity(root, ["a.txt", "b.bin"])[0] != identity(root, ["b.bin", "a.txt"])[0]
    assert identity(root, ["a.txt"])[0] != identity(root, ["a.txt", "a.txt"])[0]
    assert identity(root, ["a.txt"])[0] != identity(root, ["./a.txt"])[0]  # another Content-Location


# Each framing of one fixed part (a digest of its bytes) with the ETag the same file gets under
# it. When the framing changes, add a line: the test then asks for a new ETag, which only a
# bumped version in batch_identity gives, so that no tag a client kept matches the new bytes.
FRAMINGS = {
    "d967a64a26bd651e": '"a8c9e20ecb6e91cff1340674dccde364"',  # Content-Location: the path as requested
    "29b5217ef49d6553": '"37f269b9decea69399b0651acaf578a1"',  # /files/ + the path; transliterated fallback
}


def test_a_new_framing_gets_new_etags():
    signature = Signature('dir/résumé "1".txt', "text/plain; charset=utf-8", device=4, inode=3, size=4, mtime_ns=1,
                          ctime_ns=2, name='dir/résumé "1".txt')
    body = b"".join(frame("B", [(file_part_headers(signature.path, signature.name, signature.content_type), b"data")]))
    framing = hashlib.sha256(body).hexdigest()[:16]
    assert framing in FRAMINGS, f"the framing changed ({framing}): bump the version and add a line"
    assert identity_of(b"k" * 32, [signature]).etag == FRAMINGS[framing]
    assert len(set(FRAMINGS.values())) == len(FRAMINGS), "two framings share their ETags"


def test_without_a_key_the_plan_is_as_before(store):
    response = plan_batch(store, ["a.txt"], LIMITS, headers={"range": "bytes=0-1"})
    try:
        assert response.status == 200 and "ETag" not in dict(response.headers)
    finally:
        response.close()


# -- Range and If-Range


def test_a_range_is_the_body_sliced_anywhere(root):
    app = App(root, secret="")
    _, headers, full = batch(app)
    etag, total = headers["ETag"], len(full)
    boundary = headers["Content-Type"].split("boundary=")[1].encode()
    closing = full.rindex(b"--" + boundary + b"--")
    in_headers, in_data = full.index(b"Content-Location: /files/b.bin") + 3, full.index(bytes(range(256))) + 300
    marks = [0, in_headers, in_data, closing - 2, closing + 7, total - 1]
    spans = [(m, m2) for m in marks for m2 in marks if m <= m2] + [(closing + 3, None), (0, None)]
    for start, last in spans:
        spec = f"bytes={start}-{'' if last is None else last}"
        status, got, body = batch(app, range=spec, if_range=etag)
        stop = total if last is None else last + 1
        assert status == 206, spec
        assert got["Content-Range"] == f"bytes {start}-{stop - 1}/{total}"
        assert got["ETag"] == etag and got["Content-Type"] == headers["Content-Type"]
        assert body == full[start:stop], spec
    status, got, body = batch(app, range="bytes=-10")
    assert (status, body) == (206, full[-10:])


@pytest.mark.parametrize(
    "if_range",
    ['"stale"', "W/{etag}", "Sat, 01 Jan 2000 00:00:00 GMT", "{etag}x"],
    ids=["other-tag", "weak", "date", "garbled"],
)
def test_an_if_range_that_does_not_match_gets_the_whole_batch(root, if_range):
    app = App(root, secret="")
    _, headers, full = batch(app)
    status, got, body = batch(app, range="bytes=5-", if_range=if_range.format(etag=headers["ETag"]))
    assert (status, body) == (200, full) and "Content-Range" not in got


def test_several_ranges_get_the_whole_batch_overlapping_ones_merge(root):
    app = App(root, secret="")
    _, _, full = batch(app)
    assert batch(app, range="bytes=0-9,100-109")[::2] == (200, full)
    status, got, body = batch(app, range="bytes=0-9,5-19")
    assert (status, body) == (206, full[:20])


def test_an_unsatisfiable_range_is_416_and_closes_every_file(root, open_fds):
    app = App(root, secret="")
    _, _, full = batch(app)
    before = open_fds()
    status, got, body = batch(app, range=f"bytes={len(full)}-")
    assert status == 416 and got["Content-Range"] == f"bytes */{len(full)}"
    assert open_fds() <= before  # <=: the GC may close an old store's root meanwhile
    with pytest.raises(RangeNotSatisfiable):
        plan_batch(app.store, PATHS, LIMITS, key=app.batch_key, headers={"range": "bytes=9-1"})
    assert open_fds() <= before  # <=: the GC may close an old store's root meanwhile


# -- preconditions: a batch is a resource (RFC 9110 13.2.1)


def test_if_none_match_its_etag_is_304_and_closes_every_file(root, open_fds):
    app = App(root, secret="")
    _, headers, _ = batch(app)
    before = open_fds()
    for method in ("GET", "HEAD"):
        status, got, body = batch(app, method=method, if_none_match=headers["ETag"])
        assert (status, body) == (304, b"") and got["ETag"] == headers["ETag"], method
        assert "Content-Length" not in got
    assert open_fds() <= before  # <=: the GC may close an old store's root meanwhile
    assert batch(app, if_none_match='"other"')[0] == 200


def test_if_match_is_evaluated_first(root):
    """If-Match fails before a Range is looked at: a resume of an old version is a 412."""
    app = App(root, secret="")
    _, headers, _ = batch(app)
    assert batch(app, if_match=headers["ETag"], range="bytes=5-")[0] == 206
    status, got, body = batch(app, if_match='"old"', range="bytes=5-", if_range='"old"')
    assert status == 412 and b"precondition_failed" in body
    (root / "a.txt").write_bytes(b"changed, axon")
    assert batch(app, if_match=headers["ETag"], range="bytes=5-")[0] == 412


def test_head_and_post_take_ranges_too(root):
    app = App(root, secret="")
    _, headers, full = batch(app)
    status, got, body = batch(app, method="HEAD", range="bytes=10-")
    assert status == 206 and got["Content-Length"] == str(len(full) - 10) and body == b""
    request = Request("POST", "/api/stream-files", "", {"range": "bytes=10-", "if-range": headers["ETag"]},
                      b'{"files": ["a.txt", "b.bin", "empty.txt", "sub/c.json", "a.txt"]}')
    response = app.handle(request)
    try:
        assert response.status == 206
        data = b"".join(s if isinstance(s, bytes) else os.pread(s.fd, s.count, s.offset) for s in response.body)
        assert data == full[10:]
    finally:
        response.close()


def test_wsgi_sends_a_slice_not_the_whole_file(root):
    app = App(root, secret="")
    _, _, full = batch(app, ["b.bin"])
    data = (root / "b.bin").read_bytes()
    start = full.index(data)
    for first, last in [(start, start + len(data) - 1), (start + 1, start + 100), (start - 3, start + 9)]:
        env = {"REQUEST_METHOD": "GET", "PATH_INFO": "/api/stream-files", "QUERY_STRING": "f=b.bin",
               "wsgi.input": io.BytesIO(), "HTTP_RANGE": f"bytes={first}-{last}", "wsgi.file_wrapper": FileWrapper}
        setup_testing_defaults(env)
        seen = {}
        body = WSGIApp(app)(env, lambda status, headers, exc_info=None: seen.update(status=status))
        try:
            assert seen["status"].startswith("206")
            assert b"".join(body) == full[first : last + 1]  # whole file or not, just the slice
        finally:
            body.close()
