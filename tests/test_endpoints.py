"""axon.endpoints: Axon's built-in endpoints (health, limits, batches in every format, files, the
listing and its form) through the App, synchronous and asynchronous."""

from __future__ import annotations

import asyncio
import json
import logging
import threading
from urllib.parse import unquote, urljoin, urlsplit

import pytest

from axon.app import App, Request, Response, json_response, stream_response
from hypothesis import given, settings
from hypothesis import strategies as st

from axon.errors import HTTPError, NotFound
from axon.limits import Limits
from test_app import _body, _json, app, call  # noqa: F401 - the App's fixtures and readers

FORM = {"content-type": "application/x-www-form-urlencoded"}
#: What Chromium sends with a form's navigation.
BROWSER = {**FORM, "accept": "text/html,application/xhtml+xml,application/xml;q=0.9,image/avif,image/webp,*/*;q=0.8"}



def test_health(app, call, render):
    r = call(app, "GET", "/api/health")
    assert r.status == 200
    assert r.headers == [("Content-Type", "application/json"), ("Cache-Control", "no-store"), ("Content-Length", "22")]
    assert _body(r, render) == b'{"status":"available"}'


def test_cache_control_policy(root, call, monkeypatch):
    app = App(root)
    assert dict(call(app, "GET", "/files/a.txt").headers)["Cache-Control"] == "no-cache"
    app = App(root, cache_control="public, max-age=31536000, immutable")
    for target in ("/files/a.txt", "/api/stream-files?f=a.txt"):
        assert dict(call(app, "GET", target).headers)["Cache-Control"] == "public, max-age=31536000, immutable"
    assert dict(call(app, "GET", "/files/nope").headers)["Cache-Control"] == "no-store"
    monkeypatch.setenv("AXON_CACHE_CONTROL", "max-age=60")
    assert dict(call(App(root), "GET", "/files/a.txt").headers)["Cache-Control"] == "max-age=60"
    assert "Cache-Control" not in dict(call(App(root, cache_control=""), "GET", "/files/a.txt").headers)
    with pytest.raises(ValueError):
        App(root, cache_control="no-cache\r\nX-Evil: 1")


def test_stream_files_get(root, app, call, render, parse_multipart, open_fds):
    before = open_fds()
    r = call(app, "GET", "/api/stream-files?file1=a.txt&x=sub%2Fc.json&file1=a.txt&=empty.txt")
    try:
        assert r.status == 200
        ctype = dict(r.headers)["Content-Type"]
        body = render(r.body)
        assert dict(r.headers)["Content-Length"] == str(len(body))
        parts = parse_multipart(ctype, body)
        assert [p["Content-Location"] for p in parts] == [
            "/files/a.txt", "/files/sub/c.json", "/files/a.txt", "/files/empty.txt"
        ]
        assert [p.get_payload(decode=True) for p in parts] == [
            b"hello, axon\n", b'{"c": 3}\n', b"hello, axon\n", b""
        ]
    finally:
        r.close()
    assert open_fds() <= before


def test_stream_files_query_is_decoded_once(root, app, call, render, parse_multipart):
    (root / "ü.txt").write_bytes(b"u")
    (root / "%41.txt").write_bytes(b"literal")
    r = call(app, "GET", "/api/stream-files?f=%C3%BC.txt&g=%2541.txt&h=a%2Etxt")
    parts = parse_multipart(dict(r.headers)["Content-Type"], _body(r, render))
    assert [p.get_payload(decode=True) for p in parts] == [b"u", b"literal", b"hello, axon\n"]
    r = call(app, "GET", "/api/stream-files?f=%252e%252e%252fx")  # "%2e%2e%2fx": a name, missing
    assert r.status == 404 and _json(r)["error"]["paths"] == ["%2e%2e%2fx"]


@pytest.mark.parametrize("query", ["f=%ff", "f=%C3", "f=a.txt&g=%80%80", "%ff=a.txt"])
def test_query_invalid_utf8(app, call, query):
    r = call(app, "GET", f"/api/stream-files?{query}")
    assert r.status == 400 and _json(r)["error"]["code"] == "bad_query"


def test_stream_files_no_files(app, call):
    r = call(app, "GET", "/api/stream-files")
    assert r.status == 400 and _json(r)["error"]["code"] == "no_files"


def test_stream_files_post(app, call, render, parse_multipart):
    body = json.dumps({"files": ["sub/c.json", "a.txt"], "ignored": 1}).encode()
    r = call(app, "POST", "/api/stream-files", {"content-type": "application/json"}, body)
    assert r.status == 200
    parts = parse_multipart(dict(r.headers)["Content-Type"], _body(r, render))
    assert [p["Content-Location"] for p in parts] == ["/files/sub/c.json", "/files/a.txt"]


def test_content_location_fetches_the_file_from_any_route(root, call, render, parse_multipart):
    """A batch served by a route of one's own, at any depth: each part's Content-Location,
    resolved against that URL, is the built-in /files/ URL of the very file."""
    (root / "sub" / "ü %41.txt").write_bytes(b"odd name")
    app = App(root)
    app.add_route("/bundle/<path:rest>", lambda r: app.send_batch(r, ["sub/c.json", "sub/ü %41.txt", "./a.txt"]))
    batch_url = "http://host/bundle/deep/er"
    r = call(app, "GET", "/bundle/deep/er")
    parts = parse_multipart(dict(r.headers)["Content-Type"], _body(r, render))
    assert len(parts) == 3
    for part in parts:
        url = urlsplit(urljoin(batch_url, part["Content-Location"]))
        assert url.netloc == "host" and url.path.startswith("/files/"), url
        single = call(app, "GET", unquote(url.path, errors="strict"))  # a runtime decodes the path once
        assert single.status == 200 and _body(single, render) == part.get_payload(decode=True)


@pytest.mark.parametrize(
    "body, code",
    [
        (b"", "bad_json"),
        (b"{not json", "bad_json"),
        (b"\xff\xfe", "bad_json"),
        (b'["a.txt"]', "bad_json"),
        (b'{"files": "a.txt"}', "bad_json"),
        (b'{"files": [1, 2]}', "bad_json"),
        (b'{"files": ["a.txt", null]}', "bad_json"),
        (b'{"file": ["a.txt"]}', "bad_json"),
        (b'"a.txt"', "bad_json"),
        (b"null", "bad_json"),
        (b'{"files": []}', "no_files"),
    ],
)
def test_stream_files_post_bad_shapes(app, call, body, code):
    r = call(app, "POST", "/api/stream-files", {"content-type": "application/json"}, body)
    assert r.status == 400
    assert _json(r)["error"]["code"] == code


def test_stream_files_errors(app, call):
    r = call(app, "GET", "/api/stream-files?a=a.txt&b=missing&c=../x")
    err = _json(r)["error"]
    assert r.status == 403 and err["code"] == "batch_refused" and err["paths"] == ["missing", "../x"]


def test_files_endpoint(app, call, render):
    r = call(app, "GET", "/files/sub/c.json")
    assert r.status == 200 and _body(r, render) == b'{"c": 3}\n'
    r = call(app, "GET", "/files/b.bin", {"range": "bytes=0-3"})
    assert r.status == 206 and _body(r, render) == bytes(range(4))
    r = call(app, "GET", "/files/b.bin", {"range": "bytes=99999-"})
    assert r.status == 416 and dict(r.headers)["Content-Range"] == "bytes */10240"
    tag = dict(call(app, "GET", "/files/a.txt").headers)["ETag"]
    r = call(app, "GET", "/files/a.txt", {"if-none-match": tag})
    assert r.status == 304 and r.body == []
    r = call(app, "GET", "/files/a.txt", {"if-match": '"nope"'})
    assert r.status == 412 and _json(r)["error"]["code"] == "precondition_failed"


@pytest.mark.parametrize(
    "path, status",
    # "/files//etc/passwd" is "etc/passwd" under the root, as "/files/sub//x" is "sub/x".
    [("/files/../outside.txt", 403), ("/files//etc/passwd", 404), ("/files/.hidden", 403),
     ("/files/sub", 403), ("/files/nope", 404), ("/files/a\\b", 400), ("/files/a\x00", 400)],
)
def test_files_endpoint_refusals(app, call, path, status):
    r = call(app, "GET", path)
    assert r.status == status
    assert _json(r)["error"]["status"] == status


@pytest.mark.parametrize("target", ["/browse/", "/browse", "/browse/sub/", "/browse/sub", "/browse/a.txt"])
def test_listing_is_off_by_default(root, call, monkeypatch, target):
    monkeypatch.delenv("AXON_BROWSE", raising=False)
    for app in (App(root), App(root, browse=False)):
        r = call(app, "GET", target)
        assert r.status == 404 and _json(r)["error"]["code"] == "no_route"
    monkeypatch.setenv("AXON_BROWSE", "1")
    assert call(App(root, browse=False), "GET", target).status == 404  # the parameter wins
    assert call(App(root, builtins=False), "GET", target).status == 404


def test_listing(root, call, render):
    app = App(root, browse=True)
    r = call(app, "GET", "/browse/sub/", {"accept": "application/json"})
    assert r.status == 200 and dict(r.headers)["Vary"] == "Accept"
    assert dict(r.headers)["Cache-Control"] == "no-cache"  # as files: may change under the URL
    data = _json(r)
    assert data["path"] == "sub/" and data["truncated"] is False
    assert [(e["name"], e["type"], e.get("size")) for e in data["entries"]] == [("deeper", "dir", None), ("c.json", "file", 9)]
    r = call(app, "GET", "/browse/")
    assert r.status == 200 and dict(r.headers)["Content-Type"] == "text/html; charset=utf-8"
    page = _body(r, render).decode()
    assert 'value="a.txt"' in page and 'href="/browse/sub/"' in page and ".hidden" not in page
    head = call(app, "HEAD", "/browse/")
    assert head.status == 200 and head.body == [] and dict(head.headers)["Content-Length"] == str(len(page.encode()))


@pytest.mark.parametrize(
    "target, status, location",
    [
        ("/browse", 308, "/browse/"),
        ("/browse/sub", 308, "/browse/sub/"),
        ("/browse/sub/deeper/d.txt", 308, "/files/sub/deeper/d.txt"),
        ("/browse//sub//", 308, "/browse/sub/"),
        ("/browse/a.txt/", 404, None),
        ("/browse/.hidden", 403, None),
        ("/browse/sub/.secret", 403, None),
        ("/browse/../", 403, None),
        ("/browse/nope/", 404, None),
    ],
)
def test_listing_redirects_and_refusals(root, call, target, status, location):
    r = call(App(root, browse=True), "GET", target)
    assert r.status == status
    if location is not None:
        assert dict(r.headers)["Location"] == location
    else:
        assert _json(r)["error"]["status"] == status


@pytest.mark.parametrize(
    "target, accept", [("/browse/", ""), ("/browse/sub/", "application/json"), ("/api/limits", "")],
)
def test_listing_and_limits_have_a_strong_etag(root, call, render, target, accept):
    """``no-cache`` with no validator makes every revalidation a full answer: a strong ETag of
    the body makes it a 304 (REDbot: FRESHNESS_NO_CACHE_NO_VALIDATOR)."""
    app = App(root, browse=True)
    asked = {"accept": accept} if accept else {}
    first = call(app, "GET", target, asked)
    body = _body(first, render)
    etag = dict(first.headers)["ETag"]
    assert first.status == 200 and etag.startswith('"') and etag.endswith('"') and len(etag) > 20
    assert dict(first.headers)["Cache-Control"] == "no-cache"
    assert dict(call(app, "GET", target, asked).headers)["ETag"] == etag  # the same bytes, the same tag
    head = call(app, "HEAD", target, asked)
    assert dict(head.headers)["ETag"] == etag and dict(head.headers)["Content-Length"] == str(len(body))
    for match in (etag, f'"nope", {etag}', "W/" + etag, "*"):  # If-None-Match compares weakly
        for method in ("GET", "HEAD"):
            again = call(app, method, target, {**asked, "if-none-match": match})
            assert again.status == 304 and _body(again, render) == b"", (method, match)
            headers = dict(again.headers)
            assert headers["ETag"] == etag and headers["Cache-Control"] == "no-cache"
            assert ("Vary" in headers) == target.startswith("/browse/")  # what the 200 said
            assert "Content-Length" not in headers and "Content-Type" not in headers
    assert call(app, "GET", target, {**asked, "if-none-match": '"other"'}).status == 200
    assert call(app, "GET", target, {**asked, "if-match": etag}).status == 200
    refused = call(app, "GET", target, {**asked, "if-match": '"other"'})
    assert refused.status == 412 and _json(refused)["error"]["code"] == "precondition_failed"


def test_listing_etag_follows_the_directory(root, call, render):
    app = App(root, browse=True)
    before = dict(call(app, "GET", "/browse/sub/").headers)["ETag"]
    other = dict(call(app, "GET", "/browse/sub/", {"accept": "application/json"}).headers)["ETag"]
    assert other != before  # another representation, another tag
    (root / "sub" / "new.txt").write_bytes(b"new")
    after = call(app, "GET", "/browse/sub/", {"if-none-match": before})
    assert after.status == 200 and dict(after.headers)["ETag"] != before
    assert b"new.txt" in _body(after, render)
    assert dict(call(app, "GET", "/browse/").headers)["ETag"] != before
    # The limits' tag changes with what they say.
    assert dict(call(App(root, limits=Limits(max_files=7)), "GET", "/api/limits").headers)["ETag"] != dict(
        call(App(root), "GET", "/api/limits").headers)["ETag"]


def test_a_redirect_from_the_listing_has_no_etag(root, call):
    r = call(App(root, browse=True), "GET", "/browse/sub", {"if-none-match": "*"})
    assert r.status == 308 and "ETag" not in dict(r.headers)


@pytest.mark.parametrize("target, suffix", [
    ("/api/stream-files.zip", ".zip"), ("/api/stream-files.tar", ".tar"), ("/api/stream-files", ".multipart"),
])
def test_form_post_is_the_batch_named_after_its_directory(root, call, render, target, suffix):
    app = App(root, browse=True)
    form = b"f=sub%2Fc.json&f=sub/deeper/d.txt"
    posted = call(app, "POST", target, BROWSER, form)
    assert posted.status == 200
    body = _body(posted, render)
    got = call(app, "GET", target + "?f=sub/c.json&f=sub/deeper/d.txt")
    assert body == _body(got, render)  # the same batch, byte for byte (and the same tag)
    assert dict(posted.headers)["ETag"] == dict(got.headers)["ETag"]
    disposition = dict(posted.headers)["Content-Disposition"]
    assert disposition == f"attachment; filename=\"sub{suffix}\"; filename*=UTF-8''sub{suffix}"
    # At the root, the API's name; a charset parameter and any field names are fine, as in a query.
    root_form = call(app, "POST", target, {"content-type": "Application/X-WWW-Form-Urlencoded; charset=UTF-8"},
                     b"a=a.txt&zz=b.bin")
    assert root_form.status == 200 and f'filename="batch{suffix}"' in dict(root_form.headers)["Content-Disposition"]
    root_form.close()


def test_form_post_of_400_paths_needs_no_long_url(tmp_path, call, render):
    """A GET naming 400 files is a 25 KB URL (a 414); their form is a body."""
    base = tmp_path / "root" / "many files"
    base.mkdir(parents=True)
    names = [f"photo {i:03d} from the summer trip \u00e9.bin" for i in range(400)]
    for i, name in enumerate(names):
        (base / name).write_bytes(i.to_bytes(2, "big") * 10)
    app = App(tmp_path / "root", browse=True)
    from urllib.parse import urlencode

    form = urlencode([("f", "many files/" + n) for n in names]).encode()
    assert len(form) > Limits().max_url_bytes
    assert call(app, "GET", "/api/stream-files.zip?" + form.decode()).status == 414
    r = call(app, "POST", "/api/stream-files.zip", BROWSER, form)
    assert r.status == 200
    assert "filename*=UTF-8''many%20files.zip" in dict(r.headers)["Content-Disposition"]
    import io
    import zipfile

    with zipfile.ZipFile(io.BytesIO(_body(r, render))) as archive:
        assert archive.namelist() == ["many files/" + n for n in names]
        assert [archive.read("many files/" + n) for n in names] == [i.to_bytes(2, "big") * 10 for i in range(400)]


@pytest.mark.parametrize("target", ["/api/stream-files.zip", "/api/stream-files"])
def test_form_post_refusals_are_a_page_for_a_browser(root, call, render, target):
    app = App(root, browse=True, limits=Limits(max_files=3, max_body_bytes=512))
    cases = [
        (b"", 400, "no_files", "Nothing is ticked"),
        (b"f=sub/nope.txt&f=sub/c.json", 404, "not_found", "sub/nope.txt"),
        (b"f=a.txt&f=b.bin&f=a.txt&f=b.bin", 413, "too_many_files", "at most 3 files"),
        (b"f=" + b"x" * 600, 413, "body_too_large", "larger than 512 bytes"),
        (b"f=%ff", 400, "bad_query", "not valid UTF-8"),
    ]
    for form, status, code, said in cases:
        page = call(app, "POST", target, BROWSER, form)
        assert page.status == status, form
        headers = dict(page.headers)
        assert headers["Content-Type"] == "text/html; charset=utf-8" and headers["Cache-Control"] == "no-store"
        text = _body(page, render).decode()
        assert text.startswith("<!DOCTYPE html>") and said in text and f"({code})" in text, text
        assert "<script" not in text and '"error"' not in text
        # A program (no Accept, or */*) gets the API's JSON error, as for any batch.
        for accept in ({}, {"accept": "*/*"}):
            r = call(app, "POST", target, {**FORM, **accept}, form)
            assert (r.status, _json(r)["error"]["code"]) == (status, code)
    # The page links back to the listing the files were ticked on; no listing, no link.
    text = _body(call(app, "POST", target, BROWSER, b"f=sub/deeper/nope"), render).decode()
    assert '<a href="/browse/sub/deeper/">Back to the listing</a>' in text
    empty = call(app, "POST", target, {**BROWSER, "referer": "http://h:8000/browse/sub/"}, b"")
    assert '<a href="/browse/sub/">Back to the listing</a>' in _body(empty, render).decode()
    text = _body(call(App(root, browse=False), "POST", target, BROWSER, b"f=nope"), render).decode()
    assert "Back to the listing" not in text and "No such file." in text


def test_deeply_nested_json_is_400(app, call):
    r = call(app, "POST", "/api/stream-files", {}, b"[" * 100_000)
    assert r.status == 400


def test_post_lone_surrogate_path_is_4xx(app, call):
    r = call(app, "POST", "/api/stream-files", {}, b'{"files": ["a.txt", "\\ud800"]}')
    assert 400 <= r.status < 500


def test_raw_utf8_query_bytes(root, app, call, render):
    (root / "é.txt").write_bytes(b"e")
    raw = "f=é.txt".encode("utf-8").decode("latin-1")  # what WSGI, ASGI and the server pass
    r = call(app, "GET", f"/api/stream-files?{raw}")
    assert r.status == 200
    r.close()
    r = call(app, "GET", "/api/stream-files?" + b"f=\xff.txt".decode("latin-1"))  # not UTF-8
    assert r.status == 400


def test_stream_files_as_zip_and_tar_at_their_urls(root, app, call, render):
    import io
    import tarfile
    import zipfile

    for url, method, body in [
        ("/api/stream-files.zip?x=a.txt&y=sub/c.json", "GET", b""),
        ("/api/stream-files.zip", "POST", b'{"files": ["a.txt", "sub/c.json"]}'),
        ("/api/stream-files.tar?f=a.txt&f=sub/c.json", "GET", b""),
        ("/api/stream-files.tar", "POST", b'{"files": ["a.txt", "sub/c.json"]}'),
    ]:
        # The URL decides: Accept is not consulted (a form's submit sends a browser's Accept).
        r = call(app, method, url, {"accept": "text/html"}, body)
        assert r.status == 200, url
        headers = dict(r.headers)
        assert "Vary" not in headers
        data = _body(r, render)
        if url.startswith("/api/stream-files.zip"):
            assert headers["Content-Type"] == "application/zip"
            with zipfile.ZipFile(io.BytesIO(data)) as archive:
                assert archive.testzip() is None and archive.read("sub/c.json") == (root / "sub/c.json").read_bytes()
        else:
            assert headers["Content-Type"] == "application/x-tar"
            with tarfile.open(fileobj=io.BytesIO(data)) as archive:
                assert archive.getnames() == ["a.txt", "sub/c.json"]


@pytest.mark.parametrize(
    "accept, content_type",
    [
        (None, "multipart/mixed"),
        ("*/*", "multipart/mixed"),
        ("multipart/mixed", "multipart/mixed"),
        ("application/zip", "application/zip"),
        ("application/x-tar, application/zip;q=0.5", "application/x-tar"),
    ],
)
def test_stream_files_by_accept(app, call, accept, content_type):
    r = call(app, "GET", "/api/stream-files?f=a.txt", {"accept": accept} if accept else {})
    r.close()
    headers = dict(r.headers)
    assert r.status == 200 and headers["Content-Type"].split(";")[0] == content_type
    assert headers["Vary"] == "Accept"


def test_stream_files_not_acceptable_is_406_json(app, call):
    r = call(app, "GET", "/api/stream-files?f=a.txt", {"accept": "text/html"})
    assert r.status == 406 and dict(r.headers)["Vary"] == "Accept"
    assert _json(r)["error"]["code"] == "not_acceptable"
    r = call(app, "GET", "/api/stream-files?f=missing.txt", {"accept": "application/zip"})
    assert r.status == 404 and dict(r.headers)["Vary"] == "Accept"


def test_stream_files_304_varies_too(app, call):
    first = call(app, "GET", "/api/stream-files?f=a.txt", {"accept": "application/zip"})
    first.close()
    again = call(app, "GET", "/api/stream-files?f=a.txt",
                 {"accept": "application/zip", "if-none-match": dict(first.headers)["ETag"]})
    assert again.status == 304 and dict(again.headers)["Vary"] == "Accept"
    # The same files as multipart are another representation: another tag.
    other = call(app, "GET", "/api/stream-files?f=a.txt", {"if-none-match": dict(first.headers)["ETag"]})
    other.close()
    assert other.status == 200


def test_limits_endpoint_tells_the_limits(root, call, render, monkeypatch):
    import axon

    monkeypatch.delenv("AXON_SECRET", raising=False)
    app = App(root, limits=Limits(max_files=7, max_body_bytes=4096), browse=False)
    r = call(app, "GET", "/api/limits")
    assert r.status == 200
    assert ("Cache-Control", "no-cache") in r.headers and ("Content-Type", "application/json") in r.headers
    assert json.loads(_body(r, render)) == {
        "max_files": 7, "max_batch_bytes": Limits().max_batch_bytes, "max_body_bytes": 4096,
        "max_url_bytes": Limits().max_url_bytes, "max_ranges": Limits().max_ranges,
        "formats": ["multipart/mixed", "application/zip", "application/x-tar"],
        "browse": None, "version": axon.__version__,
    }
    assert json.loads(_body(call(App(root, browse=True), "GET", "/api/limits"), render))["browse"] == "/browse/"
    head = call(app, "HEAD", "/api/limits")
    assert head.status == 200 and _body(head, render) == b""
    assert call(app, "POST", "/api/limits").status == 405
    assert call(App(root, builtins=False), "GET", "/api/limits").status == 404
    # Open without a signature, as the health probe is: a client asks before its first batch.
    assert call(App(root, secret="s3cret"), "GET", "/api/limits").status == 200


def test_post_items_may_be_slices(root, call, render):
    app = App(root)
    body = json.dumps({"files": ["a.txt", {"path": "b.bin", "offset": -4}]}).encode()
    r = call(app, "POST", "/api/stream-files", {"content-type": "application/json"}, body)
    assert r.status == 200
    rendered = _body(r, render)
    assert b"Content-Range: bytes 10236-10239/10240\r\nContent-Length: 4\r\n\r\n" + (root / "b.bin").read_bytes()[-4:] in rendered
    bad = json.dumps({"files": [{"path": "b.bin", "offset": -4, "length": 1}]}).encode()
    r = call(app, "POST", "/api/stream-files", {}, bad)
    assert (r.status, _json(r)["error"]["code"], _json(r)["error"]["paths"]) == (400, "bad_slice", ["b.bin"])
    sliced = json.dumps({"files": [{"path": "b.bin", "offset": 0}]}).encode()
    for target, headers in (("/api/stream-files.zip", {}), ("/api/stream-files", {"accept": "application/x-tar"})):
        r = call(app, "POST", target, headers, sliced)
        assert (r.status, _json(r)["error"]["code"]) == (400, "slices_need_multipart")
    many = json.dumps({"files": [{"path": "b.bin", "offset": 0}] * 1001}).encode()
    assert _json(call(app, "POST", "/api/stream-files", {}, many))["error"]["code"] == "too_many_files"
