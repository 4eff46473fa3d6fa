"""HTTPError and its subclasses: statuses, codes, and the wire contract's JSON."""

from __future__ import annotations

import json

import pytest

from axon import errors
from axon.errors import HTTPError, MethodNotAllowed, RangeNotSatisfiable

SUBCLASSES = [
    (errors.BadRequest, 400, "bad_request"),
    (errors.Unauthorized, 401, "unauthorized"),
    (errors.Forbidden, 403, "forbidden"),
    (errors.NotFound, 404, "not_found"),
    (errors.PreconditionFailed, 412, "precondition_failed"),
    (errors.PayloadTooLarge, 413, "payload_too_large"),
    (errors.URITooLong, 414, "uri_too_long"),
    (errors.HeadersTooLarge, 431, "headers_too_large"),
    (errors.ServiceUnavailable, 503, "unavailable"),
]


@pytest.mark.parametrize("cls, status, code", SUBCLASSES)
def test_subclass_status_and_code(cls, status, code):
    exc = cls("what went wrong")
    assert isinstance(exc, HTTPError) and isinstance(exc, Exception)
    assert (exc.status, exc.code, exc.message, str(exc)) == (status, code, "what went wrong", "what went wrong")
    assert exc.to_dict() == {"error": {"status": status, "code": code, "message": "what went wrong"}}
    assert exc.headers == [] and exc.paths == [] and exc.details == []


def test_base_is_500():
    exc = HTTPError("boom")
    assert exc.to_dict() == {"error": {"status": 500, "code": "internal_error", "message": "boom"}}


def test_overrides_are_per_instance():
    exc = errors.BadRequest("too big", code="body_too_large", status=413)
    assert (exc.status, exc.code) == (413, "body_too_large")
    # The class keeps its own defaults.
    assert (errors.BadRequest.status, errors.BadRequest.code) == (400, "bad_request")
    assert errors.BadRequest("x").status == 400


def test_paths_and_details_in_json():
    exc = errors.NotFound(
        "no such file", paths=("a.txt", "b/ü.txt"), details=[{"path": "a.txt", "status": 404}]
    )
    assert exc.paths == ["a.txt", "b/ü.txt"]  # copied into a list
    body = exc.to_json()
    assert isinstance(body, bytes)
    body.decode("ascii")  # ensure_ascii: nothing from a path reaches the wire raw
    assert json.loads(body) == {
        "error": {
            "status": 404,
            "code": "not_found",
            "message": "no such file",
            "paths": ["a.txt", "b/ü.txt"],
            "details": [{"path": "a.txt", "status": 404}],
        }
    }


@pytest.mark.parametrize("path", ["quo\"te", "cr\r\nlf", "\x00nul", "\ud800surrogate", "名前"])
def test_json_escapes_any_path(path):
    body = errors.NotFound("missing", paths=[path]).to_json()
    assert all(32 <= b < 127 for b in body), body  # printable ASCII: no CR, LF, NUL
    assert json.loads(body)["error"]["paths"] == [path]


def test_method_not_allowed_allow_header():
    exc = MethodNotAllowed(["POST", "GET", "HEAD", "GET"])
    assert exc.status == 405 and exc.code == "method_not_allowed"
    assert exc.headers == [("Allow", "GET, HEAD, POST")]
    assert "GET, HEAD, POST" in exc.message


def test_range_not_satisfiable_content_range():
    exc = RangeNotSatisfiable("no range is satisfiable", 1234)
    assert (exc.status, exc.code) == (416, "range_not_satisfiable")
    assert exc.headers == [("Content-Range", "bytes */1234")]


def test_headers_are_copied():
    given = [("X-A", "1")]
    exc = HTTPError("x", headers=given)
    exc.headers.append(("X-B", "2"))
    assert given == [("X-A", "1")]
