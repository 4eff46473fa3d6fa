"""plan_batch: every file opened and checked first, then one multipart/mixed body.

Each body is rendered to bytes (FileSlices read with pread) and parsed back by the standard
library's ``email`` package: part headers, part bytes, per-part and total Content-Length.
"""

from __future__ import annotations

import errno
import os
import re
from urllib.parse import unquote

import pytest

from axon.errors import HTTPError, NotFound
from axon.storage.local import FileStore
from axon.limits import Limits
from axon.http.batch_identity import Signature
from axon.plan.batch import check_count, combine, file_signature, open_all, plan_batch
from axon.http.segments import FileSlice

LIMITS = Limits()


def _parts(response, render, parse_multipart):
    """Render, check the framing, and return (body, parts)."""
    headers = dict(response.headers)
    body = render(response.body)
    assert headers["Content-Length"] == str(len(body)) == str(response.length)
    ctype = headers["Content-Type"]
    m = re.fullmatch(r"multipart/mixed; boundary=([0-9A-Za-z'()+_,\-./:=?]{1,70})", ctype)
    assert m, ctype
    boundary = m.group(1).encode()
    assert body.startswith(b"--" + boundary + b"\r\n")
    assert body.endswith(b"\r\n--" + boundary + b"--\r\n")
    return body, parse_multipart(ctype, body)


def test_batch_round_trip(root, store, render, parse_multipart, open_fds):
    before = open_fds()
    paths = ["a.txt", "b.bin", "sub/c.json", "empty.txt", "sub/deeper/d.txt", "a.txt"]
    response = plan_batch(store, paths, LIMITS)
    try:
        assert response.status == 200
        assert len(response.files) == 5  # a repeated path is opened once
        body, parts = _parts(response, render, parse_multipart)
        assert len(parts) == len(paths)
        for path, part in zip(paths, parts):
            data = (root / path).read_bytes()
            assert part.get_payload(decode=True) == data
            assert part["Content-Length"] == str(len(data))
            assert part["Content-Location"] == "/files/" + path
            assert part.get_content_type() == {
                ".txt": "text/plain", ".bin": "application/octet-stream", ".json": "application/json"
            }[os.path.splitext(path)[1]]
            disposition = part["Content-Disposition"]
            assert disposition.startswith("attachment;")
            assert f'filename="{path.rsplit("/", 1)[-1]}"' in disposition
            # exactly these four header lines
            assert sorted(k.lower() for k in part.keys()) == [
                "content-disposition", "content-length", "content-location", "content-type"
            ]
    finally:
        response.close()
    assert open_fds() <= before


def test_batch_byte_exact(root, store, render):
    response = plan_batch(store, ["a.txt", "empty.txt"], LIMITS, boundary="BOUNDARY")
    try:
        assert render(response.body) == (
            b"--BOUNDARY\r\n"
            b"Content-Type: text/plain; charset=utf-8\r\n"
            b"Content-Disposition: attachment; filename=\"a.txt\"; filename*=UTF-8''a.txt\r\n"
            b"Content-Location: /files/a.txt\r\n"
            b"Content-Length: 12\r\n"
            b"\r\n"
            b"hello, axon\n"
            b"\r\n--BOUNDARY\r\n"
            b"Content-Type: text/plain; charset=utf-8\r\n"
            b"Content-Disposition: attachment; filename=\"empty.txt\"; filename*=UTF-8''empty.txt\r\n"
            b"Content-Location: /files/empty.txt\r\n"
            b"Content-Length: 0\r\n"
            b"\r\n"
            b"\r\n--BOUNDARY--\r\n"
        )
        assert response.headers == [
            ("Content-Type", "multipart/mixed; boundary=BOUNDARY"),
            ("Content-Disposition", 'attachment; filename="batch.multipart"'),
            ("Content-Length", str(response.length)),
        ]
        # One bytes segment and one file slice per part, then the closing delimiter.
        assert [type(s) for s in response.body] == [bytes, FileSlice, bytes, FileSlice, bytes]
    finally:
        response.close()


def test_same_basename_kept_apart(root, store, render, parse_multipart):
    (root / "x").mkdir()
    (root / "y").mkdir()
    (root / "x" / "same.txt").write_bytes(b"from x")
    (root / "y" / "same.txt").write_bytes(b"from y")
    response = plan_batch(store, ["x/same.txt", "y/same.txt"], LIMITS)
    try:
        _, parts = _parts(response, render, parse_multipart)
        assert [p["Content-Location"] for p in parts] == ["/files/x/same.txt", "/files/y/same.txt"]
        assert [p.get_payload(decode=True) for p in parts] == [b"from x", b"from y"]
    finally:
        response.close()


def test_content_location_is_the_requested_path_under_files(store, render, parse_multipart):
    response = plan_batch(store, ["sub/../a.txt", "./sub//c.json"], LIMITS)
    try:
        _, parts = _parts(response, render, parse_multipart)
        assert [p["Content-Location"] for p in parts] == ["/files/sub/../a.txt", "/files/./sub//c.json"]
        assert 'filename="c.json"' in parts[1]["Content-Disposition"]
    finally:
        response.close()


HOSTILE = [
    'quo"te.txt',
    "cr\rlf\n.txt",
    "crlf\r\nX-Injected: yes\r\n\r\n.txt",
    "semi;colon=x; filename=evil.txt",
    "per%cent%41.txt",
    "tab\t.txt",
    "ünïcödé.txt",
    "名前 😀.txt",
    "a'b.txt",
    "\x7fdel\x01ctl.txt",
    " lead and trail .txt",
]


def test_hostile_filenames(root, store, render, parse_multipart):
    for i, name in enumerate(HOSTILE):
        (root / name).write_bytes(b"%d" % i)
    response = plan_batch(store, HOSTILE, LIMITS)
    try:
        body, parts = _parts(response, render, parse_multipart)
        assert len(parts) == len(HOSTILE)
        # Walk the raw bytes part by part: each header block is exactly four lines of printable
        # ASCII (so no raw CR, LF or control character from a name reached it).
        boundary = dict(response.headers)["Content-Type"].split("boundary=")[1].encode()
        pos = 0
        for _ in HOSTILE:
            delimiter = b"--" + boundary + b"\r\n"
            assert body.startswith(delimiter, pos)
            end = body.index(b"\r\n\r\n", pos)
            lines = body[pos + len(delimiter) : end].split(b"\r\n")
            assert [line.split(b":", 1)[0] for line in lines] == [
                b"Content-Type", b"Content-Disposition", b"Content-Location", b"Content-Length"
            ]
            for line in lines:
                assert all(32 <= c < 127 for c in line), line
            disposition = lines[1].decode()
            assert disposition.count('"') == 2, disposition
            pos = end + 4 + int(lines[3].split(b": ")[1]) + 2
        assert body[pos:] == b"--" + boundary + b"--\r\n"
        for i, (name, part) in enumerate(zip(HOSTILE, parts)):
            assert part.get_payload(decode=True) == b"%d" % i
            assert "X-Injected" not in part
            assert sorted(k.lower() for k in part.keys()) == [
                "content-disposition", "content-length", "content-location", "content-type"
            ]
            raw = dict(part.raw_items())  # as sent, before email's own header decoding
            disposition = raw["Content-Disposition"]
            m = re.fullmatch(r"attachment; filename=\"([^\"\\]*)\"; filename\*=UTF-8''([A-Za-z0-9!#$&+\-.^_`|~%]*)", disposition)
            assert m, disposition
            assert all(" " <= c <= "~" for c in m.group(1))
            assert unquote(m.group(2), errors="strict") == name
            location = raw["Content-Location"]
            assert location.startswith("/files/") and unquote(location[7:], errors="strict") == name
    finally:
        response.close()


# -- refusals: one error naming every path, nothing left open -------------------------------------


def test_empty_batch():
    with pytest.raises(HTTPError) as info:
        check_count([], LIMITS)
    assert (info.value.status, info.value.code) == (400, "no_files")


def test_ten_thousand_files_refused_before_any_open(store, monkeypatch, open_fds):
    opened = []
    real = store.open
    monkeypatch.setattr(store, "open", lambda p: opened.append(p) or real(p))
    before = open_fds()
    with pytest.raises(HTTPError) as info:
        plan_batch(store, ["a.txt"] * 10_000, LIMITS)
    assert (info.value.status, info.value.code) == (413, "too_many_files")
    assert opened == []
    # Names that do not exist: still 413 (counted first), never 404 (opened first).
    with pytest.raises(HTTPError) as info:
        plan_batch(store, [f"missing-{i}" for i in range(10_000)], LIMITS)
    assert info.value.status == 413
    assert open_fds() <= before


def test_max_files_boundary(store):
    limits = Limits(max_files=3)
    plan_batch(store, ["a.txt"] * 3, limits).close()
    with pytest.raises(HTTPError) as info:
        plan_batch(store, ["a.txt"] * 4, limits)
    assert info.value.status == 413


def test_max_batch_bytes_boundary(store, open_fds):
    total = 12 + 10240
    plan_batch(store, ["a.txt", "b.bin"], Limits(max_batch_bytes=total)).close()
    before = open_fds()
    with pytest.raises(HTTPError) as info:
        plan_batch(store, ["a.txt", "b.bin"], Limits(max_batch_bytes=total - 1))
    assert (info.value.status, info.value.code) == (413, "batch_too_large")
    assert open_fds() <= before  # the files opened for sizing are closed again


def test_one_error_names_every_failure(store, open_fds):
    before = open_fds()
    paths = ["a.txt", "missing.txt", "../x", ".hidden", "sub", "a\\b", "missing.txt", "b.bin"]
    with pytest.raises(HTTPError) as info:
        plan_batch(store, paths, LIMITS)
    exc = info.value
    assert exc.status == 400  # the most fundamental failure sets the status
    assert exc.code == "batch_refused"
    # Every failing path, in request order (a repeated failure is reported again).
    assert exc.paths == ["missing.txt", "../x", ".hidden", "sub", "a\\b", "missing.txt"]
    assert [(d["path"], d["status"], d["code"]) for d in exc.details] == [
        ("missing.txt", 404, "not_found"),
        ("../x", 403, "outside_root"),
        (".hidden", 403, "hidden"),
        ("sub", 403, "not_a_file"),
        ("a\\b", 400, "bad_path"),
        ("missing.txt", 404, "not_found"),
    ]
    assert "of the 8 requested files" in exc.message
    assert open_fds() <= before


def test_single_failure_is_passed_through(store):
    with pytest.raises(NotFound) as info:
        plan_batch(store, ["a.txt", "missing.txt"], LIMITS)
    assert info.value.paths == ["missing.txt"]


def test_combine_statuses():
    def err(status, path):
        return HTTPError("x", status=status, code=f"c{status}", paths=[path])

    assert combine([err(404, "a"), err(403, "b")], 2).status == 403
    assert combine([err(404, "a"), err(400, "b"), err(403, "c")], 3).status == 400
    assert combine([err(400, "a"), err(503, "b")], 2).status == 503  # out of descriptors outranks
    single = err(404, "a")
    assert combine([single], 1) is single


def test_out_of_descriptors_is_503(store, monkeypatch, open_fds):
    real = store.open

    def open_(path):
        if path == "b.bin":
            raise HTTPError("no fds", status=503, code="unavailable", paths=[path])
        return real(path)

    monkeypatch.setattr(store, "open", open_)
    before = open_fds()
    with pytest.raises(HTTPError) as info:
        open_all(store, ["a.txt", "b.bin", "missing"])
    assert info.value.status == 503
    assert open_fds() <= before


def test_unexpected_error_closes_what_was_opened(store, monkeypatch, open_fds):
    real = store.open

    def open_(path):
        if path == "b.bin":
            raise OSError(errno.EIO, "disk on fire")
        return real(path)

    monkeypatch.setattr(store, "open", open_)
    before = open_fds()
    with pytest.raises(OSError):
        plan_batch(store, ["a.txt", "sub/c.json", "b.bin"], LIMITS)
    assert open_fds() <= before


def test_many_files(root, store, render, parse_multipart, open_fds):
    for i in range(200):
        (root / f"many-{i}.dat").write_bytes(os.urandom(i))
    paths = [f"many-{i}.dat" for i in range(200)]
    before = open_fds()
    response = plan_batch(store, paths, LIMITS)
    try:
        _, parts = _parts(response, render, parse_multipart)
        assert [p.get_payload(decode=True) for p in parts] == [(root / p).read_bytes() for p in paths]
    finally:
        response.close()
    assert open_fds() <= before


# -- a path no filesystem call can take -------------------------------------------------------


def test_non_utf8_name_is_a_client_error_or_served(tmp_path):
    os.makedirs(tmp_path / "r")
    with open(os.fsencode(tmp_path / "r") + b"/\xff.bin", "wb") as f:
        f.write(b"x")
    store = FileStore(tmp_path / "r")
    try:
        response = plan_batch(store, ["\udcff.bin"], LIMITS)
    except HTTPError as exc:
        assert exc.status in (400, 404)
    else:
        response.close()
        for _, value in response.headers:
            value.encode("ascii")


# -- batch identity: a stable ETag and boundary, and Range to resume a batch ------------------------

from axon.errors import RangeNotSatisfiable  # noqa: E402
from axon.storage.batch_key import derive_key  # noqa: E402

KEY = derive_key("test secret", "/unused")
BATCH = ["a.txt", "b.bin", "sub/c.json", "a.txt"]


def _keyed(store, headers=None, paths=BATCH, limits=LIMITS):
    return plan_batch(store, paths, limits, key=KEY, headers=headers or {})


def _whole(store, render):
    r = _keyed(store)
    try:
        return dict(r.headers), render(r.body)
    finally:
        r.close()


def test_identity_is_stable_and_names_the_bytes(root, store, render, parse_multipart):
    h1, body1 = _whole(store, render)
    h2, body2 = _whole(store, render)
    assert body1 == body2 and h1["ETag"] == h2["ETag"]
    assert re.fullmatch(r'"[0-9a-f]{32}"', h1["ETag"])  # strong
    assert h1["Accept-Ranges"] == "bytes"
    boundary = h1["Content-Type"].split("boundary=")[1]
    assert re.fullmatch(r"[0-9a-f]{32}", boundary) and boundary not in h1["ETag"]
    parts = parse_multipart(h1["Content-Type"], body1)
    assert [p.get_payload(decode=True) for p in parts] == [(root / p).read_bytes() for p in BATCH]
    # Another order, another key, a changed file: another identity.
    r = _keyed(store, paths=list(reversed(BATCH)))
    r.close()
    assert dict(r.headers)["ETag"] != h1["ETag"]
    other = plan_batch(store, BATCH, LIMITS, key=derive_key("other secret", "/unused"), headers={})
    other.close()
    assert dict(other.headers)["ETag"] != h1["ETag"]
    st_ = os.stat(root / "a.txt")
    os.utime(root / "a.txt", ns=(st_.st_atime_ns, st_.st_mtime_ns + 1))
    h3, _ = _whole(store, render)
    assert h3["ETag"] != h1["ETag"] and h3["Content-Type"] != h1["Content-Type"]


def test_whole_files_are_framed_as_frame_frames_them(store):
    """The one-pass layout of whole files (formats._whole_files, from pieces kept per file
    version) is byte for byte what the identity and frame() make of the same signatures."""
    from axon.http.batch_identity import identity_of
    from axon.http.multipart import file_part_headers, frame
    from axon.plan.batch import file_signature
    from axon.plan.formats import multipart_mixed

    opened = [store.open(p) for p in ["a.txt", "b.bin", "sub/c.json", "a.txt"]]
    try:
        sigs = tuple(file_signature(f) for f in opened)
        for boundary in (None, "fixed-boundary"):
            etag, ctype, _, heads = multipart_mixed(KEY, boundary, sigs)
            identity = identity_of(KEY, sigs, boundary)
            framed = frame(identity.boundary, [(file_part_headers(s.path, s.name, s.content_type), s.size) for s in sigs])
            assert (etag, ctype) == (identity.etag, f"multipart/mixed; boundary={identity.boundary}")
            assert heads == tuple(framed[0::2])
    finally:
        for f in opened:
            f.close()


def test_no_key_no_identity(store):
    r = plan_batch(store, BATCH, LIMITS, headers={"range": "bytes=0-9"})
    r.close()
    assert r.status == 200 and "ETag" not in dict(r.headers)


@pytest.mark.parametrize("spec", ["0-99", "100-", "-50", "5-5", "0-999999999"])
def test_single_range_is_a_slice_of_the_batch(store, render, spec):
    headers, whole = _whole(store, render)
    r = _keyed(store, {"range": f"bytes={spec}", "if-range": headers["ETag"]})
    try:
        assert r.status == 206
        first, _, last = spec.partition("-")
        if not first:
            start, stop = len(whole) - int(last), len(whole)
        else:
            start, stop = int(first), min(int(last) + 1 if last else len(whole), len(whole))
        assert dict(r.headers)["Content-Range"] == f"bytes {start}-{stop - 1}/{len(whole)}"
        assert dict(r.headers)["Content-Length"] == str(stop - start)
        assert dict(r.headers)["ETag"] == headers["ETag"]
        assert render(r.body) == whole[start:stop]
    finally:
        r.close()


def test_resume_an_interrupted_batch(store, render):
    headers, whole = _whole(store, render)
    received = whole[:1234]  # the connection broke here
    r = _keyed(store, {"range": f"bytes={len(received)}-", "if-range": headers["ETag"]})
    try:
        assert r.status == 206
        assert received + render(r.body) == whole
    finally:
        r.close()


def test_if_range_mismatch_sends_the_whole_batch(root, store, render):
    headers, whole = _whole(store, render)
    for if_range in ('"0123"', f"W/{headers['ETag']}", "Sun, 06 Nov 1994 08:49:37 GMT", "junk"):
        r = _keyed(store, {"range": "bytes=0-9", "if-range": if_range})
        try:
            assert r.status == 200 and render(r.body) == whole, if_range
        finally:
            r.close()
    # A file changed since: the old ETag no longer matches, the whole new batch comes.
    (root / "a.txt").write_bytes(b"changed!")
    r = _keyed(store, {"range": "bytes=100-", "if-range": headers["ETag"]})
    try:
        assert r.status == 200 and b"changed!" in render(r.body)
    finally:
        r.close()


def test_several_ranges_send_the_whole_batch(store, render):
    headers, whole = _whole(store, render)
    r = _keyed(store, {"range": "bytes=0-1,10-20"})
    try:
        assert r.status == 200 and render(r.body) == whole
    finally:
        r.close()


def test_unsatisfiable_batch_range(store, render, open_fds):
    _, whole = _whole(store, render)
    before = open_fds()
    with pytest.raises(RangeNotSatisfiable) as info:
        _keyed(store, {"range": f"bytes={len(whole)}-"})
    assert info.value.headers == [("Content-Range", f"bytes */{len(whole)}")]
    with pytest.raises(RangeNotSatisfiable):
        _keyed(store, {"range": "bytes=" + ",".join(["0-0"] * 17)})
    assert open_fds() <= before


def test_planted_delimiter_changes_the_boundary(root, store, render, parse_multipart):
    headers, _ = _whole(store, render)
    boundary = headers["Content-Type"].split("boundary=")[1]
    path = root / "b.bin"
    st_ = os.stat(path)
    forged = (f"\r\n--{boundary}\r\nContent-Type: text/plain\r\n\r\nforged").encode()
    with open(path, "r+b") as f:  # in place: same inode, same size
        f.write(forged)
    os.utime(path, ns=(st_.st_atime_ns, st_.st_mtime_ns))  # the owner may set any mtime
    r = _keyed(store)
    try:
        assert dict(r.headers)["Content-Type"].split("boundary=")[1] != boundary
        assert len(parse_multipart(dict(r.headers)["Content-Type"], render(r.body))) == len(BATCH)
    finally:
        r.close()


@pytest.mark.parametrize("fmt", ["multipart", "tar", "zip"])
@pytest.mark.parametrize("ranged", [False, True])
def test_the_declared_length_is_the_bodys(store, render, fmt, ranged):
    """plan_batch declares its body's length from the files' sizes and its blocks, without a
    pass over the segments: it must be the rendered body's, byte for byte."""
    from axon.plan.formats import multipart_mixed, tar, zip_stored

    fmts = {"multipart": multipart_mixed, "tar": tar, "zip": zip_stored}
    paths = ["a.txt", "b.bin", "empty.txt", "sub/deeper/d.txt", "a.txt"]
    headers = {"range": "bytes=5-100"} if ranged else {}
    response = plan_batch(store, paths, LIMITS, key=b"k" * 32, headers=headers, fmt=fmts[fmt])
    try:
        body = render(response.body)
        assert response.status == (206 if ranged else 200)
        assert dict(response.headers)["Content-Length"] == str(response.length) == str(len(body))
    finally:
        response.close()


def test_the_declared_length_of_slices_is_the_bodys(store, render):
    response = plan_batch(store, ["b.bin", "a.txt"], LIMITS, key=b"k" * 32, slices=[(10, 500), None])
    try:
        assert response.length == len(render(response.body)) == int(dict(response.headers)["Content-Length"])
    finally:
        response.close()


def test_file_signature_builds_each_field_by_its_name() -> None:
    """file_signature builds a Signature as a tuple, by position (a hot path): every field of a
    file, each a different value, lands in the field of its name."""

    class Facts:  # a File of another source: no kept signature
        path, name, content_type = "asked/a.txt", "a.txt", "text/plain"
        device, inode, size, mtime_ns, ctime_ns = 11, 12, 13, 14, 15
        signature = None

    assert file_signature(Facts())._asdict() == Signature(
        path="asked/a.txt", content_type="text/plain", device=11, inode=12, size=13, mtime_ns=14, ctime_ns=15,
        name="a.txt", span=None,
    )._asdict()
    assert Signature._fields == ("path", "content_type", "device", "inode", "size", "mtime_ns", "ctime_ns", "name", "span")


def test_a_large_batch_planned_on_a_loop_is_planned_in_steps_to_the_same_bytes(root, store, render, open_fds):
    from axon.errors import WouldBlock
    from axon.plan.batch import INLINE_FILES, SLICE_FILES

    names = [f"many/{i:03d}.bin" for i in range(100)]
    (root / "many").mkdir()
    for i, name in enumerate(names):
        (root / name).write_bytes(bytes([i]) * (i + 1))
    paths = names + names[:3]  # named twice: one file, two parts
    before = open_fds()
    at_once = plan_batch(store, paths, LIMITS, key=b"k" * 32)
    with pytest.raises(WouldBlock) as caught:
        plan_batch(store, paths, LIMITS, key=b"k" * 32, on_loop=True)
    steps, stops = caught.value.steps, 0
    assert caught.value.of is paths
    try:
        while True:
            next(steps)
            stops += 1
    except StopIteration as done:
        in_steps = done.value
    assert stops >= 2 * (len(names) // SLICE_FILES)  # opened, then framed, a slice at a time
    assert in_steps.headers == at_once.headers and render(in_steps.body) == render(at_once.body)
    in_steps.close()
    at_once.close()
    # A missing file: the same refusal, before any part.
    with pytest.raises(WouldBlock) as caught:
        plan_batch(store, [*names, "missing.bin"], LIMITS, on_loop=True)
    with pytest.raises(NotFound):
        for _ in caught.value.steps:
            pass
    # Few files: planned at once, on the loop too.
    small = plan_batch(store, names[:INLINE_FILES], LIMITS, on_loop=True)
    assert small.status == 200
    small.close()
    assert open_fds() <= before
