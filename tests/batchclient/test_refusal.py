"""axon.batchclient.refusal: a refused request's JSON error read back, whole or path by path."""

from __future__ import annotations

import json

import pytest

from axon.batchclient.refusal import error_from_response, error_object, failures_by_path


def test_a_refusal_keeps_the_servers_error():
    error = {"status": 404, "code": "not_found", "message": "no such file", "paths": ["x"]}
    refused = error_from_response(404, "Not Found", json.dumps({"error": error}).encode())
    assert (refused.status, refused.code, refused.paths) == (404, "not_found", ["x"])
    assert "404 not_found: no such file ['x']" in str(refused)
    assert error_from_response(502, "Bad Gateway", b"<h1>down</h1>").error is None


def test_a_refusal_names_its_paths_one_by_one():
    details = {"code": "batch_refused", "details": [{"path": "a", "code": "not_found", "message": "gone"}]}
    assert failures_by_path(404, details) == {"a": {"status": 404, "path": "a", "code": "not_found", "message": "gone"}}
    single = {"code": "forbidden", "message": "hidden", "paths": ["b"]}
    assert failures_by_path(403, single) == {"b": {"status": 403, "code": "forbidden", "message": "hidden"}}


@pytest.mark.parametrize("body", [
    b"", b"<h1>502</h1>", b"[1, 2]", b'{"error": "a string"}', b'{"no": "error"}', b"\xff\xfe", b"null",
])  # fmt: skip
def test_a_body_that_is_not_axons_error_has_no_error_object(body):
    assert error_object(body) is None
    refused = error_from_response(500, "Internal Server Error", body)
    assert refused.status == 500 and refused.error is None and "500 Internal Server Error" in str(refused)


def test_a_refusal_shows_five_paths_and_says_there_are_more():
    error = {"code": "batch_refused", "message": "7 of 7", "paths": [f"p{i}" for i in range(7)]}
    said = str(error_from_response(404, "Not Found", json.dumps({"error": error}).encode()))
    assert "'p4', ...]" in said and "p5" not in said


def test_odd_details_are_skipped_not_trusted():
    error = {"code": "batch_refused", "details": ["a", {"path": 3}, {"path": "ok", "code": "not_found"}], "paths": ["x"]}
    assert failures_by_path(404, error) == {"ok": {"status": 404, "path": "ok", "code": "not_found"}}
    assert failures_by_path(404, {"paths": [1, "y"], "code": "c"}) == {"y": {"status": 404, "code": "c", "message": ""}}
