"""The object-store source against a real SeaweedFS: opening (HEAD), the key jail, batches in
every format, ranges, conditionals, CRC-32s and listing, through the App in this process."""

from __future__ import annotations

import io
import json
import tarfile
import uuid
import zipfile
import zlib

import pytest

from axon.app import App, Request
from axon.errors import HTTPError

pytest.importorskip("obstore")

from axon.storage.objects import ObjectFile, ObjectSource  # noqa: E402

OBJECTS = {
    "a.txt": b"hello, objects\n",
    "b.bin": bytes(range(256)) * 40,
    "empty.txt": b"",
    "big.bin": bytes(range(251)) * 1000,  # past OPEN_READ: opening does not bring it whole
    "sub/c.json": b'{"c": 3}\n',
    ".hidden": b"hidden\n",
    "sub/.secret": b"secret\n",
}


@pytest.fixture(scope="module")
def prefix(weed) -> str:
    """A prefix of this module's own, holding OBJECTS."""
    name = f"t-{uuid.uuid4().hex[:8]}"
    for key, data in OBJECTS.items():
        weed.put(f"{name}/{key}", data)
    weed.put(f"{name}-sibling/x.txt", b"next door\n")  # shares the prefix's first characters
    return name


@pytest.fixture
def source(weed, prefix) -> ObjectSource:
    from axon.config import object_store_environment

    return ObjectSource(weed.url(prefix), env=object_store_environment(weed.env()), timeout=5)


@pytest.fixture
def app(source) -> App:
    return App(store=source, browse=True)


def call(app: App, method: str, path: str, query: str = "", headers: dict | None = None, body: bytes = b""):
    response = app.handle(Request(method, path, query, headers or {}, body))
    try:
        data = b"".join(response.stream) if response.stream is not None else b"".join(response.body)
    finally:
        response.close()
    return response.status, dict(response.headers), data


def test_a_batch_holds_small_objects_within_its_budget(weed, prefix):
    from axon.config import object_store_environment

    source = ObjectSource(weed.url(prefix), env=object_store_environment(weed.env()), prefetch_bytes=10_000)
    opened = source.for_batch(["a.txt", "b.bin", "sub/c.json"])
    files = [opened.open(p) for p in ("a.txt", "b.bin", "sub/c.json")]
    # 10,240 bytes do not fit in 10,000 of room: that object is fetched when sent.
    assert [f.data is not None for f in files] == [True, False, True]
    assert all(f.size == len(OBJECTS[f.path]) and f.etag for f in files)


def test_open_gives_size_etag_and_type(source, weed, prefix):
    f = source.open("b.bin")
    assert isinstance(f, ObjectFile)
    assert (f.size, f.name, f.key, f.content_type) == (10240, "b.bin", "b.bin", "application/octet-stream")
    assert f.etag and f.etag.startswith('"')
    assert f.inode > 0 and f.mtime_ns > 0


@pytest.mark.parametrize(("path", "status", "code"), [
    ("missing.txt", 404, "not_found"),
    ("../x.txt", 403, "outside_root"),
    (f"../{'t'}-sibling/x.txt", 403, "outside_root"),
    ("sub/../../x", 403, "outside_root"),
    ("/a.txt", 400, "bad_path"),
    (".hidden", 403, "hidden"),
    ("sub/.secret", 403, "hidden"),
    ("a.txt/", 404, "not_found"),
    ("sub", 404, "not_found"),  # a prefix is no object
])  # fmt: skip
def test_the_key_jail_and_missing_keys(source, path, status, code):
    with pytest.raises(HTTPError) as caught:
        source.open(path)
    assert (caught.value.status, caught.value.code, caught.value.paths) == (status, code, [path])


def test_hidden_objects_when_allowed(weed, prefix):
    from axon.config import object_store_environment

    allowed = ObjectSource(weed.url(prefix), allow_hidden=True, env=object_store_environment(weed.env()))
    assert allowed.open(".hidden").size == len(OBJECTS[".hidden"])


def test_a_file(app):
    status, headers, body = call(app, "GET", "/files/a.txt")
    assert (status, body) == (200, OBJECTS["a.txt"])
    assert headers["Content-Length"] == str(len(body))
    assert headers["Content-Type"] == "text/plain; charset=utf-8"
    status, _, _ = call(app, "GET", "/files/a.txt", headers={"if-none-match": headers["ETag"]})
    assert status == 304


def test_a_range_of_a_file(app):
    status, headers, body = call(app, "GET", "/files/b.bin", headers={"range": "bytes=1000-1999"})
    assert (status, body) == (206, OBJECTS["b.bin"][1000:2000])
    assert headers["Content-Range"] == "bytes 1000-1999/10240"
    status, headers, body = call(app, "GET", "/files/b.bin", headers={"range": "bytes=0-9,-10"})
    assert status == 206 and headers["Content-Type"].startswith("multipart/byteranges")
    assert OBJECTS["b.bin"][:10] in body and OBJECTS["b.bin"][-10:] in body


def test_an_empty_object(app):
    assert call(app, "GET", "/files/empty.txt")[::2] == (200, b"")


def test_a_batch(app, parse_multipart):
    names = ["a.txt", "b.bin", "sub/c.json", "empty.txt", "a.txt"]
    status, headers, body = call(app, "GET", "/api/stream-files", "&".join(f"f={n}" for n in names))
    assert status == 200 and int(headers["Content-Length"]) == len(body)
    parts = parse_multipart(headers["Content-Type"], body)
    assert [p.get_payload(decode=True) for p in parts] == [OBJECTS[n] for n in names]
    assert [p["Content-Location"] for p in parts] == [f"/files/{n}" for n in names]
    # The same objects unchanged: the same batch, so a 304 and a resumable range.
    assert call(app, "GET", "/api/stream-files", "&".join(f"f={n}" for n in names),
                {"if-none-match": headers["ETag"]})[0] == 304
    status, _, tail = call(app, "GET", "/api/stream-files", "&".join(f"f={n}" for n in names),
                           {"range": "bytes=100-", "if-range": headers["ETag"]})
    assert (status, tail) == (206, body[100:])


def test_a_batch_posted(app, parse_multipart):
    status, headers, body = call(app, "POST", "/api/stream-files", body=json.dumps({"files": ["sub/c.json"]}).encode())
    assert status == 200
    assert parse_multipart(headers["Content-Type"], body)[0].get_payload(decode=True) == OBJECTS["sub/c.json"]


def test_a_batch_naming_missing_and_forbidden_keys_is_one_json_error(app):
    status, _, body = call(app, "GET", "/api/stream-files", "f=a.txt&f=nope.bin&f=../x&f=.hidden")
    error = json.loads(body)["error"]
    assert status == 403 and error["code"] == "batch_refused"
    assert error["paths"] == ["nope.bin", "../x", ".hidden"]
    assert [d["status"] for d in error["details"]] == [404, 403, 403]
    status, _, body = call(app, "GET", "/api/stream-files", "f=a.txt&f=nope.bin")
    assert status == 404 and json.loads(body)["error"]["paths"] == ["nope.bin"]


def test_a_zip_carries_each_objects_crc(app, source):
    names = ["a.txt", "b.bin", "empty.txt", "big.bin"]
    status, _, body = call(app, "GET", "/api/stream-files.zip", "&".join(f"f={n}" for n in names))
    assert status == 200
    with zipfile.ZipFile(io.BytesIO(body)) as z:
        assert z.testzip() is None
        assert {i.filename: z.read(i) for i in z.infolist()} == {n: OBJECTS[n] for n in names}
    # A large object's CRC is read once and kept by (key, ETag); a small one's comes from the
    # bytes opening brought.
    f = source.open("big.bin")
    assert f.data is None and source.crc32s([f], read=False) == [zlib.crc32(OBJECTS["big.bin"])]  # kept: no request
    assert source.open("b.bin").data == OBJECTS["b.bin"]


def test_a_tar(app):
    status, _, body = call(app, "GET", "/api/stream-files.tar", "f=a.txt&f=sub/c.json")
    assert status == 200
    with tarfile.open(fileobj=io.BytesIO(body)) as t:
        assert {m.name: t.extractfile(m).read() for m in t.getmembers()} == {
            "a.txt": OBJECTS["a.txt"], "sub/c.json": OBJECTS["sub/c.json"]}


def test_a_crc_of_a_replaced_object_is_refused(weed, prefix):
    from axon.config import object_store_environment
    from axon.errors import FileChanged

    source = ObjectSource(weed.url(f"{prefix}-crc"), env=object_store_environment(weed.env()))
    weed.put(f"{prefix}-crc/x.bin", b"1" * 100_000)
    f = source.open("x.bin")
    weed.put(f"{prefix}-crc/x.bin", b"2" * 100_000)
    with pytest.raises(FileChanged):
        source.crc32(f)


def test_listing(app):
    status, _, body = call(app, "GET", "/browse/", headers={"accept": "application/json"})
    listing = json.loads(body)
    assert status == 200
    assert {(e["name"], e["type"]) for e in listing["entries"]} == {
        ("a.txt", "file"), ("b.bin", "file"), ("empty.txt", "file"), ("big.bin", "file"), ("sub", "dir")}
    status, _, body = call(app, "GET", "/browse/sub/", headers={"accept": "application/json"})
    assert [e["name"] for e in json.loads(body).get("entries", [body])] == ["c.json"]
    assert call(app, "GET", "/browse/sub")[0] == 308
    assert call(app, "GET", "/browse/nothing/")[0] == 404


def test_a_store_that_is_not_there_is_a_503(weed):
    from axon.config import object_store_environment

    env = object_store_environment(dict(weed.env(), AWS_ENDPOINT_URL="http://127.0.0.1:9"))
    gone = ObjectSource(weed.url("x"), env=env, timeout=2)
    with pytest.raises(HTTPError) as caught:
        gone.open("a.txt")
    assert (caught.value.status, caught.value.code) == (503, "store_unavailable")


def test_an_app_from_a_url(weed, prefix, monkeypatch):
    for name, value in weed.env().items():
        monkeypatch.setenv(name, value)
    app = App(weed.url(prefix))
    assert isinstance(app.store, ObjectSource)
    assert call(app, "GET", "/files/a.txt")[::2] == (200, OBJECTS["a.txt"])


def test_a_bad_url():
    with pytest.raises(ValueError):
        ObjectSource("s3://")


def test_slices_of_objects_in_a_batch(app, parse_multipart):
    items = [{"path": "big.bin", "offset": 70_000, "length": 1000}, {"path": "b.bin", "offset": -16}, "a.txt"]
    status, headers, body = call(app, "POST", "/api/stream-files", body=json.dumps({"files": items}).encode())
    assert status == 200
    parts = parse_multipart(headers["Content-Type"], body)
    assert [p.get_payload(decode=True) for p in parts] == [
        OBJECTS["big.bin"][70_000:71_000], OBJECTS["b.bin"][-16:], OBJECTS["a.txt"]]
    assert parts[0]["Content-Range"] == f"bytes 70000-70999/{len(OBJECTS['big.bin'])}"


# -- misconfiguration is not an outage ----------------------------------------------------------


def _env(weed, **extra):
    from axon.config import object_store_environment

    return object_store_environment(weed.env(**extra))


@pytest.mark.parametrize(("extra", "said"), [
    ({"AWS_ACCESS_KEY_ID": "no-such-key"}, "refuses the server's credentials (InvalidAccessKeyId)"),
    ({"AWS_SECRET_ACCESS_KEY": "wrong"}, "refuses the server's credentials (SignatureDoesNotMatch)"),
])  # fmt: skip
def test_wrong_keys_fail_at_start_saying_so(weed, prefix, extra, said):
    from axon.storage.objects import StoreMisconfigured

    with pytest.raises(StoreMisconfigured) as caught:
        ObjectSource(weed.url(prefix), env=_env(weed, **extra), timeout=5)
    assert said in str(caught.value) and weed.url(prefix) in str(caught.value)


def test_a_missing_bucket_fails_at_start_saying_so(weed):
    from axon.storage.objects import StoreMisconfigured

    with pytest.raises(StoreMisconfigured, match="has no bucket 'no-such-bucket'"):
        ObjectSource("s3://no-such-bucket/p", env=_env(weed), timeout=5)


def test_a_reader_and_a_silent_store_still_start(weed, prefix, caplog):
    import seaweed

    # May read, not list: the probe's missing key is still a 404 on SeaweedFS.
    ObjectSource(weed.url(prefix), env=_env(weed, AWS_ACCESS_KEY_ID=seaweed.READER_KEY,
                                            AWS_SECRET_ACCESS_KEY=seaweed.READER_SECRET), timeout=5)
    # A store that does not answer is an outage, not a setting: a warning, and 503s.
    ObjectSource(weed.url(prefix), env=_env(weed, AWS_ENDPOINT_URL="http://127.0.0.1:9"), timeout=2)
    said = [r.getMessage() for r in caplog.records if r.name == "axon.storage"]
    assert len(said) == 1 and "did not answer at start" in said[0] and "\n" not in said[0]


def test_a_store_refusing_the_keys_later_is_a_502_not_a_503(weed, prefix):
    """Keys rotated after the start: every request says the store refused them, not that it
    did not answer; a key the store denies is a 403."""
    app = App(store=ObjectSource(weed.url(prefix), env=_env(weed, AWS_SECRET_ACCESS_KEY="rotated"), timeout=5,
                                 check=False))
    status, headers, body = call(app, "GET", "/files/a.txt")
    error = json.loads(body)["error"]
    assert (status, error["code"], error["paths"]) == (502, "store_credentials_refused", ["a.txt"])
    assert "SignatureDoesNotMatch" in error["message"] and "Retry-After" not in headers
    status, _, body = call(app, "GET", "/api/stream-files", "f=a.txt&f=b.bin")
    assert status == 502 and {d["code"] for d in json.loads(body)["error"]["details"]} == {"store_credentials_refused"}
    gone = App(store=ObjectSource("s3://no-such-bucket/p", env=_env(weed), timeout=5, check=False))
    status, _, body = call(gone, "GET", "/files/a.txt")
    assert (status, json.loads(body)["error"]["code"]) == (502, "store_no_bucket")


def test_a_batch_the_store_did_not_answer_says_when_to_retry(weed):
    gone = App(store=ObjectSource(weed.url("x"), env=_env(weed, AWS_ENDPOINT_URL="http://127.0.0.1:9"), timeout=2,
                                  check=False))
    status, headers, body = call(gone, "GET", "/api/stream-files", "f=a.txt&f=b.bin")
    assert (status, json.loads(body)["error"]["code"]) == (503, "batch_refused")
    assert headers.get("Retry-After") == "1"


def test_directories_in_a_listing_have_no_made_up_time(app):
    status, _, body = call(app, "GET", "/browse/", headers={"accept": "application/json"})
    entries = {e["name"]: e for e in json.loads(body)["entries"]}
    assert status == 200 and entries["sub"]["mtime"] is None and entries["a.txt"]["mtime"] > 1.6e9
    status, _, page = call(app, "GET", "/browse/")
    assert status == 200 and b"1970-01-01" not in page
