"""Response: Content-Length from the segments, HEAD, close(), and the small constructors."""

from __future__ import annotations

import json

import pytest

from axon.errors import MethodNotAllowed, NotFound
from axon.response import Response, error_response, json_response, redirect, stream_response, text_response
from axon.http.segments import FileSlice


def test_content_length_from_segments(store):
    f = store.open("b.bin")
    r = Response(200, [("Content-Type", "x/y")], [b"head", FileSlice(f.fd, 10, 100), b"tail"], files=[f])
    try:
        assert r.length == 108
        assert r.headers == [("Content-Type", "x/y"), ("Content-Length", "108")]
        assert r.stream is None
    finally:
        r.close()


def test_defaults():
    r = Response()
    assert (r.status, r.body, r.length, r.files, r.stream) == (200, [], 0, (), None)
    assert r.headers == [("Content-Length", "0")]
    assert r.reason == "OK"


@pytest.mark.parametrize("status", [100, 101, 103, 204, 304])
def test_no_content_length_where_forbidden(status):
    r = Response(status, [("ETag", '"x"')])
    assert ("Content-Length" not in dict(r.headers)) and r.headers == [("ETag", '"x"')]


@pytest.mark.parametrize("status, reason", [(200, "OK"), (206, "Partial Content"), (404, "Not Found"),
                                            (416, "Range Not Satisfiable"), (413, "Content Too Large"),
                                            (599, "Unknown")])
def test_reason(status, reason):
    assert Response(status).reason == reason


def test_close_releases_files_and_stream_once(store, open_fds):
    closed = []

    def gen():
        try:
            yield b"a"
            yield b"b"
        finally:
            closed.append(True)

    before = open_fds()
    f = store.open("a.txt")
    stream = gen()
    next(stream)
    r = Response(200, [], stream=stream, files=[f])
    assert r.length is None and r.body == [] and "Content-Length" not in dict(r.headers)
    r.close()
    assert closed == [True]
    assert open_fds() <= before
    r.close()  # idempotent: nothing closed twice
    assert r.files == () and r.stream is None


def test_without_body_keeps_length_and_closes(store, open_fds):
    before = open_fds()
    f = store.open("b.bin")
    r = Response(200, [("Content-Type", "application/octet-stream")], [FileSlice(f.fd, 0, f.size)], files=[f])
    head = r.without_body()
    assert head is r
    assert head.body == [] and head.files == ()
    assert dict(head.headers)["Content-Length"] == str(f.size)
    assert head.length == f.size
    assert open_fds() <= before


def test_without_body_closes_stream():
    closed = []

    class Stream:
        def __iter__(self):
            return iter([b"x"])

        def close(self):
            closed.append(True)

    r = stream_response(Stream())
    r.without_body()
    assert closed == [True] and r.stream is None


def test_json_response():
    r = json_response({"b": [1, 2], "é": "ü"}, status=201, headers=[("X-A", "1")])
    assert r.status == 201
    assert r.headers[0] == ("Content-Type", "application/json")
    assert ("X-A", "1") in r.headers
    (body,) = r.body
    assert body == b'{"b":[1,2],"\\u00e9":"\\u00fc"}'
    assert json.loads(body) == {"b": [1, 2], "é": "ü"}
    assert dict(r.headers)["Content-Length"] == str(len(body))


def test_text_response():
    r = text_response("héllo")
    assert r.body == ["héllo".encode()]
    assert dict(r.headers) == {"Content-Type": "text/plain; charset=utf-8", "Content-Length": "6"}
    assert text_response("x", 404, "text/html").headers[0] == ("Content-Type", "text/html")


def test_stream_response():
    r = stream_response(iter([b"a"]), status=202, content_type="text/csv")
    assert r.status == 202 and r.length is None
    assert r.headers == [("Content-Type", "text/csv")]


@pytest.mark.parametrize("location", ["/a\r\nSet-Cookie: x=1", "/a\nb", "/a\rb", "/a\x00"])
def test_redirect_refuses_header_injection(location):
    with pytest.raises(ValueError):
        redirect(location)


def test_redirect():
    r = redirect("/files/a.txt")
    assert (r.status, dict(r.headers)) == (307, {"Location": "/files/a.txt", "Content-Length": "0"})
    assert redirect("/x", 301).status == 301


def test_error_response():
    r = error_response(NotFound("no such file", paths=["a"]))
    assert r.status == 404
    assert json.loads(r.body[0]) == {"error": {"status": 404, "code": "not_found", "message": "no such file", "paths": ["a"]}}
    assert r.headers[0] == ("Content-Type", "application/json")
    r = error_response(MethodNotAllowed(["GET"]))
    assert ("Allow", "GET") in r.headers


def test_headers_list_is_not_mutated():
    common = [("X-Frame-Options", "DENY")]
    Response(200, common, [b"a"])
    second = Response(200, common, [b"bb"])
    assert common == [("X-Frame-Options", "DENY")]
    assert [v for k, v in second.headers if k == "Content-Length"] == ["2"]
