"""App: routing, the built-in endpoints, handler results, errors, HEAD, threads, descriptors."""

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


@pytest.fixture(params=["sync", "async"])
def call(request):
    """Run a request through App.handle or App.handle_async (the same contract)."""

    def run(app: App, method: str, target: str, headers: dict | None = None, body: bytes = b""):
        path, _, query = target.partition("?")
        req = Request(method, path, query, headers or {}, body)
        if request.param == "sync":
            return app.handle(req)
        return asyncio.run(app.handle_async(req))

    run.mode = request.param
    return run


@pytest.fixture
def app(root):
    return App(root)


def _json(response) -> dict:
    assert dict(response.headers)["Content-Type"] == "application/json"
    return json.loads(b"".join(response.body))


def _body(response, render) -> bytes:
    try:
        return render(response.body)
    finally:
        response.close()


# -- routing ----------------------------------------------------------------------------------


def test_routes(root, call, render):
    app = App(root)
    app.add_route("/exact", lambda r: "exact")
    app.add_route("/items/<name>", lambda r: {"name": r.params["name"]})
    app.add_route("/tree/<path:rest>", lambda r: {"rest": r.params["rest"]})
    app.add_route("/two/<a>/<b>", lambda r: [r.params["a"], r.params["b"]])
    app.add_route("/items/special", lambda r: "exact wins")

    assert _body(call(app, "GET", "/exact"), render) == b"exact"
    assert _json(call(app, "GET", "/items/x.y")) == {"name": "x.y"}
    assert _json(call(app, "GET", "/tree/a/b/c")) == {"rest": "a/b/c"}
    assert _json(call(app, "GET", "/two/1/2")) == ["1", "2"]
    assert _body(call(app, "GET", "/items/special"), render) == b"exact wins"
    for missing in ("/items/a/b", "/items/", "/exact/", "/tree/", "/nope", "/", "/two/1"):
        r = call(app, "GET", missing)
        assert r.status == 404, missing
        assert _json(r)["error"]["code"] == "no_route"


def test_route_decorator_and_methods(root, call):
    app = App(root, builtins=False)

    @app.route("/thing/<id>", methods=["GET"])
    def get(request):
        return {"got": request.params["id"]}

    @app.route("/thing/<id>", methods=["post", "DELETE"])
    def change(request):
        return {"changed": request.params["id"], "method": request.method}

    assert _json(call(app, "GET", "/thing/7")) == {"got": "7"}
    assert _json(call(app, "POST", "/thing/7")) == {"changed": "7", "method": "POST"}
    assert _json(call(app, "DELETE", "/thing/7")) == {"changed": "7", "method": "DELETE"}
    r = call(app, "PUT", "/thing/7")
    assert r.status == 405
    assert dict(r.headers)["Allow"] == "DELETE, GET, HEAD, POST"
    assert _json(r)["error"]["code"] == "method_not_allowed"
    assert call(app, "GET", "/api/health").status == 404  # builtins=False


def test_method_not_allowed(app, call):
    r = call(app, "DELETE", "/api/health")
    assert r.status == 405 and dict(r.headers)["Allow"] == "GET, HEAD"  # HEAD implied by GET
    r = call(app, "PUT", "/api/stream-files")
    assert r.status == 405 and dict(r.headers)["Allow"] == "GET, HEAD, POST"
    r = call(app, "POST", "/files/a.txt")
    assert r.status == 405 and dict(r.headers)["Allow"] == "GET, HEAD"


def test_post_only_route_refuses_head(root, call):
    app = App(root)
    app.add_route("/submit", lambda r: "ok", ["POST"])
    for method in ("GET", "HEAD"):
        r = call(app, method, "/submit")
        assert r.status == 405 and dict(r.headers)["Allow"] == "POST"


def test_route_pattern_must_start_with_slash(app):
    with pytest.raises(ValueError):
        app.add_route("nope", lambda r: "x")


# -- built-in endpoints ---------------------------------------------------------------------------


def test_health(app, call, render):
    r = call(app, "GET", "/api/health")
    assert r.status == 200
    assert r.headers == [("Content-Type", "application/json"), ("Cache-Control", "no-store"), ("Content-Length", "22")]
    assert _body(r, render) == b'{"status":"available"}'


def test_options_asterisk_lists_the_servers_methods(app, call):
    r = call(app, "OPTIONS", "*")
    assert r.status == 200 and dict(r.headers)["Allow"] == "GET, HEAD, OPTIONS, POST"
    assert dict(r.headers)["Content-Length"] == "0"
    r = call(app, "GET", "*")  # the asterisk form is for OPTIONS only
    assert r.status == 405 and dict(r.headers)["Allow"] == "OPTIONS"


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


# -- the listing: App(browse=True) (axon.plan.listing renders it) ----------------------------------


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


# -- validators on what is built in memory: the listing, the limits ----------------------------------


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


# -- the listing's form: a POST of form fields to a batch URL ---------------------------------------

FORM = {"content-type": "application/x-www-form-urlencoded"}
#: What Chromium sends with a form's navigation.
BROWSER = {**FORM, "accept": "text/html,application/xhtml+xml,application/xml;q=0.9,image/avif,image/webp,*/*;q=0.8"}


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


# -- HEAD -------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "target, headers",
    [("/files/b.bin", {}), ("/files/b.bin", {"range": "bytes=0-9,20-29"}), ("/api/stream-files?f=a.txt&g=b.bin", {}),
     ("/api/health", {}), ("/files/missing", {})],
)
def test_head(app, call, render, open_fds, target, headers):
    get = call(app, "GET", target, headers)
    get_length = len(render(get.body))
    get.close()
    before = open_fds()
    head = call(app, "HEAD", target, headers)
    assert head.status == get.status
    assert head.body == [] and head.stream is None and head.files == ()
    assert dict(head.headers)["Content-Length"] == str(get_length)
    assert open_fds() <= before  # the files were closed at once


def test_head_closes_a_stream(root, call):
    closed = []

    def gen():
        try:
            yield b"x"
        finally:
            closed.append(True)

    app = App(root)
    stream = gen()
    next(stream)
    app.add_route("/s", lambda r: stream_response(stream))
    r = call(app, "HEAD", "/s")
    assert r.status == 200 and r.stream is None and closed == [True]


# -- what handlers return -------------------------------------------------------------------


@pytest.mark.parametrize(
    "result, ctype, body",
    [
        ({"a": 1}, "application/json", b'{"a":1}'),
        ([1, "x"], "application/json", b'[1,"x"]'),
        ("héllo", "text/plain; charset=utf-8", "héllo".encode()),
        (b"\x00\xff", "application/octet-stream", b"\x00\xff"),
        (json_response({"z": 0}, status=201), "application/json", b'{"z":0}'),
    ],
)
def test_handler_results(root, call, render, result, ctype, body):
    app = App(root)
    app.add_route("/r", lambda r: result)
    r = call(app, "GET", "/r")
    assert dict(r.headers)["Content-Type"] == ctype
    assert dict(r.headers)["Content-Length"] == str(len(body))
    assert _body(r, render) == body
    assert r.status == (201 if isinstance(result, Response) else 200)


def test_handler_http_error(root, call):
    app = App(root)

    def refuse(request):
        raise HTTPError("go away", status=418, code="teapot", headers=[("Retry-After", "5")])

    app.add_route("/r", refuse)
    r = call(app, "GET", "/r")
    assert r.status == 418 and ("Retry-After", "5") in r.headers
    assert _json(r) == {"error": {"status": 418, "code": "teapot", "message": "go away"}}


SECRET = "secret-detail-/etc/shadow-password=hunter2"


@pytest.mark.parametrize(
    "handler",
    [
        lambda r: 1 / 0,
        lambda r: {}["missing"],
        lambda r: (_ for _ in ()).throw(RuntimeError(SECRET)),
        lambda r: None,  # not a valid result: TypeError
        lambda r: 42,
    ],
    ids=["zero", "keyerror", "runtime", "none", "int"],
)
def test_unexpected_exception_leaks_nothing(root, call, caplog, handler, open_fds):
    app = App(root)
    app.add_route("/boom", handler)
    before = open_fds()
    with caplog.at_level(logging.ERROR, logger="axon"):
        r = call(app, "GET", "/boom")
    assert r.status == 500
    assert _json(r) == {"error": {"status": 500, "code": "internal_error", "message": "internal server error"}}
    text = b"".join(r.body).decode()
    assert SECRET not in text and "Traceback" not in text and "Error" not in text
    records = [rec for rec in caplog.records if rec.name == "axon" and rec.levelno == logging.ERROR]
    assert len(records) == 1
    assert records[0].exc_info is not None
    assert "/boom" in records[0].getMessage()
    assert open_fds() <= before


def test_handler_raising_after_opening_a_file(root, call, open_fds):
    app = App(root)

    def careful(request):
        response = app.send_file(request, "b.bin")
        response.close()
        raise NotFound("changed my mind")

    app.add_route("/careful", careful)
    before = open_fds()
    r = call(app, "GET", "/careful")
    assert r.status == 404
    assert open_fds() <= before


def test_async_handler(root, call, render):
    app = App(root)

    async def handler(request):
        await asyncio.sleep(0)
        return {"async": True, "q": request.arg("q")}

    app.add_route("/a", handler)
    assert _json(call(app, "GET", "/a?q=1")) == {"async": True, "q": "1"}


def test_async_handler_error(root, call, caplog):
    app = App(root)

    async def handler(request):
        raise RuntimeError(SECRET)

    app.add_route("/a", handler)
    with caplog.at_level(logging.ERROR, logger="axon"):
        r = call(app, "GET", "/a")
    assert r.status == 500 and SECRET.encode() not in b"".join(r.body)


def test_threads(root):
    """handle_async: plain functions run in the executor, unless blocking=False; async inline."""
    app = App(root)
    seen = {}

    def blocking(request):
        seen["blocking"] = threading.current_thread().name
        return "x"

    def quick(request):
        seen["quick"] = threading.current_thread().name
        return "x"

    async def coro(request):
        seen["coro"] = threading.current_thread().name
        return "x"

    app.add_route("/blocking", blocking)
    app.add_route("/quick", quick, blocking=False)
    app.add_route("/coro", coro)

    async def main():
        for path in ("/blocking", "/quick", "/coro"):
            (await app.handle_async(Request("GET", path))).close()
        return threading.current_thread().name

    loop_thread = asyncio.run(main())
    assert seen["blocking"].startswith("axon-handler")
    assert seen["quick"] == loop_thread and seen["coro"] == loop_thread
    app.handle(Request("GET", "/blocking")).close()  # sync: the caller's thread
    assert seen["blocking"] == threading.current_thread().name
    app.executor.shutdown()


def test_request_helpers():
    r = Request("GET", "/x", "a=1&b=&a=2&c")
    assert r.query == [("a", "1"), ("b", ""), ("a", "2"), ("c", "")]
    assert r.arg("a") == "1" and r.arg("b") == "" and r.arg("zz", "d") == "d"
    assert Request("POST", "/", body=b'{"x": [1]}').json() == {"x": [1]}
    with pytest.raises(HTTPError) as info:
        Request("POST", "/", body=b"{").json()
    assert info.value.status == 400
    r = Request("GET", "/")
    assert r.headers == {} and r.body == b"" and r.params == {}


def test_app_root_from_environment(root, monkeypatch, call, render):
    monkeypatch.setenv("AXON_ROOT", str(root))
    assert _body(call(App(), "GET", "/files/a.txt"), render) == b"hello, axon\n"


def test_app_with_store_and_hidden(root, call, render):
    from axon.storage.local import FileStore

    assert call(App(root), "GET", "/files/.hidden").status == 403
    assert _body(call(App(root, allow_hidden=True), "GET", "/files/.hidden"), render) == b"hidden\n"
    app = App(store=FileStore(root / "sub"))
    assert _body(call(app, "GET", "/files/c.json"), render) == b'{"c": 3}\n'


def test_send_batch_and_send_file_from_user_routes(root, call, render, parse_multipart):
    app = App(root, builtins=False, limits=Limits(max_files=2))
    app.add_route("/bundle", lambda r: app.send_batch(r, ["a.txt", "sub/c.json"]))
    app.add_route("/too-many", lambda r: app.send_batch(r, ["a.txt"] * 3))
    app.add_route("/one/<path:p>", lambda r: app.send_file(r, r.params["p"]))
    r = call(app, "GET", "/bundle")
    parts = parse_multipart(dict(r.headers)["Content-Type"], _body(r, render))
    assert len(parts) == 2
    assert call(app, "GET", "/too-many").status == 413
    assert _body(call(app, "GET", "/one/sub/deeper/d.txt"), render) == b"d" * 1000


# -- no descriptor survives an error path ---------------------------------------------------------

ERROR_REQUESTS = [
    ("GET", "/files/missing", {}, b""),
    ("GET", "/files/../outside.txt", {}, b""),
    ("GET", "/files/b.bin", {"range": "bytes=5-1"}, b""),
    ("GET", "/files/b.bin", {"range": "bytes=" + ",".join(["0-0"] * 100)}, b""),
    ("GET", "/files/b.bin", {"if-match": '"x"'}, b""),
    ("GET", "/files/b.bin", {"if-none-match": "*"}, b""),
    ("GET", "/api/stream-files?a=a.txt&b=b.bin&c=missing", {}, b""),
    ("GET", "/api/stream-files?a=a.txt&b=sub&c=.hidden", {}, b""),
    ("GET", "/api/stream-files?" + "&".join(["f=a.txt"] * 1001), {}, b""),
    ("POST", "/api/stream-files", {}, b'{"files": ["a.txt", "nope"]}'),
    ("POST", "/api/stream-files", {}, b"{"),
    ("PUT", "/files/a.txt", {}, b""),
    ("GET", "/nowhere", {}, b""),
    ("GET", "/api/stream-files?f=%ff", {}, b""),
]


def test_no_descriptor_leaks_on_error_paths(root, call, open_fds):
    app = App(root, limits=Limits(max_batch_bytes=10_000))
    call(app, "GET", "/api/health").close()  # warm up (lazy imports, caches)
    before = open_fds()
    for method, target, headers, body in ERROR_REQUESTS:
        r = call(app, method, target, headers, body)
        assert r.status >= 300, (method, target)
        assert r.files in ((), []), (method, target)
        r.close()
    r = call(app, "GET", "/api/stream-files?a=a.txt&b=b.bin")  # over max_batch_bytes
    assert r.status == 413
    assert open_fds() <= before


# -- bugs ---------------------------------------------------------------------------------------


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


# -- signed requests (App(secret=...)): checked before routing ---------------------------------------


def test_signing_gate(root, call, render, open_fds, monkeypatch):
    import time

    from axon.signing import mint_token, sign_url

    monkeypatch.delenv("AXON_SECRET", raising=False)
    app = App(root, secret="s3cret")
    assert call(app, "GET", "/api/health").status == 200  # public: load balancers probe it
    before = open_fds()
    r = call(app, "GET", "/files/a.txt")
    assert r.status == 401 and ("WWW-Authenticate", 'Bearer realm="axon"') in r.headers
    r = call(app, "GET", "/no/such/endpoint")
    assert r.status == 401  # refused before routing: endpoints are not revealed
    assert open_fds() <= before
    later = int(time.time()) + 60
    target = sign_url("/api/stream-files?f=a.txt&g=sub/c.json", "s3cret", later)
    r = call(app, "GET", target)
    assert r.status == 200
    assert len(render(r.body).split(b"Content-Location: ")) == 3  # expires/signature are no files
    r.close()
    tampered = target.replace("f=a.txt", "f=b.bin")
    assert call(app, "GET", tampered).status == 403
    expired = sign_url("/files/a.txt", "s3cret", int(time.time()) - 1)
    assert call(app, "GET", expired).status == 403
    token = mint_token("s3cret", later)
    r = call(app, "GET", "/files/a.txt", {"authorization": f"Bearer {token}"})
    assert r.status == 200 and _body(r, render) == b"hello, axon\n"
    r = call(app, "GET", "/files/a.txt", {"authorization": "Bearer axon1.9999999999.AAAA"})
    assert r.status == 403


@given(st.text(alphabet="ab=&;%+é \x00", max_size=40))
@settings(max_examples=300, deadline=None)
def test_query_fast_path_agrees_with_parse_qsl(query):
    from urllib.parse import parse_qsl

    raw = query.encode("utf-8").decode("latin-1")  # what a runtime hands over
    try:
        expected = parse_qsl(query, keep_blank_values=True, errors="strict")
    except UnicodeDecodeError:
        expected = None
    try:
        got = Request("GET", "/", raw).query
    except HTTPError:
        got = None
    assert got == expected


# -- what a server asks of the App (axon.server.served) -----------------------------------------


def test_fixed_answers_only_while_nothing_observes(root):
    app = App(root)
    assert app.fixed_answers() == {"/api/health": app.fixed["/api/health"]}
    read = App(root)
    read.records.attach(type("R", (), {"read": lambda self, records: None, "flush": lambda self: None})())
    assert read.fixed_answers() == {}
    access = logging.getLogger("axon.access")
    level = access.level
    access.setLevel(logging.INFO)  # someone reads the access log
    try:
        assert App(root).fixed_answers() == {}
    finally:
        access.setLevel(level)


def test_fixed_answers_need_no_signature(root):
    app = App(root, secret="s3cret")
    app.fixed["/private"] = json_response({"ok": True})
    assert set(app.fixed_answers()) == {"/api/health"}  # public: probed unsigned


def test_close_stops_the_pool_and_a_later_request_starts_another(root):
    app = App(root)

    @app.route("/where")
    def where(request):
        return threading.current_thread().name

    def ask() -> bytes:
        return b"".join(asyncio.run(app.handle_async(Request("GET", "/where"))).body)

    assert ask().startswith(b"axon-handler")
    pool = app.executor
    app.close()
    with pytest.raises(RuntimeError):  # shut down: it takes no more work
        pool.submit(int)
    assert ask().startswith(b"axon-handler") and app.executor is not pool
    app.close()
    app.close()  # twice, and with no pool: nothing to do


# -- the batch as zip or tar -------------------------------------------------------------------


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


# -- GET /api/limits: what a client sizes its batches by -------------------------------------------


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


class ThreadNotingStore:
    """The App's real store, noting the thread of every CRC-32 read from disk."""

    def __init__(self, store) -> None:
        self.store, self.read_in = store, []

    def __getattr__(self, name):
        return getattr(self.store, name)

    def crc32s(self, files, read=True):
        for f in files:
            if read and self.store.crcs.known((f.device, f.inode, f.size, f.mtime_ns, f.ctime_ns)) is None:
                self.read_in.append(threading.current_thread().name)
        return self.store.crc32s(files, read)


@pytest.mark.parametrize("runtime", ["asgi", "native"])
def test_a_cold_zip_called_on_the_loop_reads_its_crcs_in_the_pool(root, render, runtime):
    import io
    import os
    import zipfile

    from axon.plan.batch import INLINE_READ_BYTES

    data = os.urandom(INLINE_READ_BYTES * 2)
    (root / "big.bin").write_bytes(data)
    app = App(root)
    app.store = noting = ThreadNotingStore(app.store)
    target = "/api/stream-files.zip"

    async def serve(query: str) -> Response:
        request = Request("GET", target, query)
        if runtime == "asgi":  # as axon.asgi calls it
            return await app.handle_async(request)
        answer = app.handle_on_loop(request)  # as axon serve calls it
        return await answer if asyncio.iscoroutine(answer) else answer

    loop_thread = threading.current_thread().name
    try:
        response = asyncio.run(serve("f=big.bin&g=a.txt"))
        assert response.status == 200
        assert noting.read_in and all(name.startswith("axon-handler") for name in noting.read_in)
        with zipfile.ZipFile(io.BytesIO(render(response.body))) as archive:
            assert archive.read("big.bin") == data and archive.testzip() is None
        # A small cold file is read right there, on the loop's thread: cheaper than the pool.
        noting.read_in.clear()
        assert asyncio.run(serve("f=sub/c.json")).status == 200
        assert noting.read_in == [loop_thread]
        # Where blocking is fine (WSGI), it is read in the caller's thread, whatever its size.
        noting.read_in.clear()
        (root / "big2.bin").write_bytes(data)
        assert app.handle(Request("GET", target, "f=big2.bin")).status == 200
        assert noting.read_in == [loop_thread]
    finally:
        app.close()


def test_a_handler_that_would_block_on_the_loop_runs_again_in_the_pool(root, caplog):
    from axon.errors import WouldBlock

    app = App(root)
    calls = []

    @app.route("/work", blocking=False)
    def work(request):
        calls.append((request.on_loop, threading.current_thread().name))
        if request.on_loop:
            raise WouldBlock("a long read")
        return "done"

    @app.route("/stubborn", blocking=False)
    def stubborn(request):
        raise WouldBlock("always")  # a handler's bug: it would block even where it may

    async def on_loop(path: str) -> Response:
        answer = app.handle_on_loop(Request("GET", path))  # as axon serve calls it
        return await answer if asyncio.iscoroutine(answer) else answer

    try:
        for answer in (asyncio.run(app.handle_async(Request("GET", "/work"))), asyncio.run(on_loop("/work"))):
            assert answer.status == 200 and b"".join(answer.body) == b"done"
        assert [on for on, _ in calls] == [True, False, True, False]
        assert all(name.startswith("axon-handler") for on, name in calls if not on)
        assert app.records.begun_count() == 2  # each request counted once, retried or not
        with caplog.at_level(logging.ERROR, logger="axon"):
            assert asyncio.run(app.handle_async(Request("GET", "/stubborn"))).status == 500
            assert asyncio.run(on_loop("/stubborn")).status == 500
            assert app.handle(Request("GET", "/stubborn")).status == 500  # WSGI: no loop to leave
    finally:
        app.close()


# -- portable identities (several nodes serving copies of one tree) ---------------------------


def test_portable_identity_needs_a_shared_key(root, monkeypatch) -> None:
    for name in ("AXON_SECRET", "AXON_IDENTITY_SECRET", "AXON_PORTABLE_IDENTITY"):
        monkeypatch.delenv(name, raising=False)
    with pytest.raises(ValueError, match="AXON_IDENTITY_SECRET"):
        App(root, portable_identity=True)
    from axon.storage.local import FileStore

    with pytest.raises(ValueError, match="portable_identity=True"):
        App(store=FileStore(root), portable_identity=True, identity_secret="s")


def test_the_identity_secret_keys_batches_without_signing(root, monkeypatch, tmp_path) -> None:
    for name in ("AXON_SECRET", "AXON_IDENTITY_SECRET"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("AXON_PORTABLE_IDENTITY", "1")
    monkeypatch.setenv("AXON_IDENTITY_SECRET", "shared")
    app = App(root)
    assert app.store.portable_identity and app.verifier is None
    # The key is the secret's alone: another root (another host's path) gets the same one.
    other = tmp_path / "elsewhere"
    other.mkdir()
    assert App(other).batch_key == app.batch_key != App(root, portable_identity=False, identity_secret="").batch_key
    status = app.handle(Request("GET", "/api/stream-files", "f=a.txt")).status
    assert status == 200
