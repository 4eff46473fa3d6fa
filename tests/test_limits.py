"""Limits: validation, and for every limit the core enforces, a request just under and just over it.

The server-only limits (header bytes and count, timeouts) are crossed by the server's own tests;
here they only have to validate.
"""

from __future__ import annotations

import dataclasses
import json
import math

import pytest

from axon.app import App, Request
from axon.errors import HTTPError
from axon.limits import DEFAULT_LIMITS, GiB, KiB, MiB, Limits

FIELDS = [f.name for f in dataclasses.fields(Limits)]


def test_defaults():
    assert DEFAULT_LIMITS == Limits()
    assert (KiB, MiB, GiB) == (1024, 1024**2, 1024**3)
    d = Limits()
    assert d.max_files == 1000 and d.max_ranges == 16 and d.max_batch_bytes == 64 * GiB
    assert d.max_url_bytes == 16 * KiB and d.max_body_bytes == MiB and d.chunk_size == 64 * KiB


@pytest.mark.parametrize("name", FIELDS)
@pytest.mark.parametrize("bad", [0, -1, -0.5, math.nan])
def test_every_limit_must_be_positive(name, bad):
    with pytest.raises(ValueError, match=name):
        Limits(**{name: bad})


@pytest.mark.parametrize("name", FIELDS)
def test_every_limit_accepts_a_positive_value(name):
    assert getattr(Limits(**{name: 1}), name) == 1


@pytest.mark.parametrize("name", ["max_header_bytes", "max_headers", "header_timeout", "keepalive_timeout", "write_timeout"])
def test_server_only_limits_validate(name):
    assert getattr(Limits(**{name: 0.25 if "timeout" in name else 7}), name) > 0
    with pytest.raises(ValueError):
        Limits(**{name: 0})


def test_frozen_and_replace():
    limits = Limits()
    with pytest.raises(dataclasses.FrozenInstanceError):
        limits.max_files = 5  # type: ignore[misc]
    smaller = limits.replace(max_files=5)
    assert smaller.max_files == 5 and limits.max_files == 1000
    assert smaller == Limits(max_files=5)
    with pytest.raises(ValueError):
        limits.replace(max_files=0)


# -- crossing each limit the core enforces --------------------------------------------------------


def _get(app: App, target: str, headers: dict | None = None):
    path, _, query = target.partition("?")
    response = app.handle(Request("GET", path, query, headers or {}))
    response.close()
    return response


def _post(app: App, path: str, body: bytes):
    response = app.handle(Request("POST", path, "", {"content-type": "application/json"}, body))
    response.close()
    return response


def _error(response) -> dict:
    return json.loads(b"".join(response.body))["error"]


def test_max_files(root):
    app = App(root, limits=Limits(max_files=3))
    assert _get(app, "/api/stream-files?a=a.txt&b=a.txt&c=a.txt").status == 200
    r = _get(app, "/api/stream-files?a=a.txt&b=a.txt&c=a.txt&d=a.txt")
    assert (r.status, _error(r)["code"]) == (413, "too_many_files")
    assert _post(app, "/api/stream-files", json.dumps({"files": ["a.txt"] * 3}).encode()).status == 200
    r = _post(app, "/api/stream-files", json.dumps({"files": ["a.txt"] * 4}).encode())
    assert (r.status, _error(r)["code"]) == (413, "too_many_files")


def test_max_files_is_checked_before_any_file_is_opened(root):
    # Ten thousand names that do not exist: 413 (counted first), never 404 (opened first).
    app = App(root)
    names = [f"missing-{i}.bin" for i in range(10_000)]
    r = _post(app, "/api/stream-files", json.dumps({"files": names}).encode())
    assert (r.status, _error(r)["code"]) == (413, "too_many_files")
    names = names[: DEFAULT_LIMITS.max_files]
    r = _post(app, "/api/stream-files", json.dumps({"files": names}).encode())
    assert r.status == 404  # at the limit, the files are opened (and all found missing)
    assert len(_error(r)["paths"]) == DEFAULT_LIMITS.max_files


def test_max_batch_bytes(root):
    size = len(b"hello, axon\n")
    at = App(root, limits=Limits(max_batch_bytes=2 * size))
    assert _get(at, "/api/stream-files?f=a.txt&f=a.txt").status == 200  # a repeat counts twice
    over = App(root, limits=Limits(max_batch_bytes=2 * size - 1))
    r = _get(over, "/api/stream-files?f=a.txt&f=a.txt")
    assert (r.status, _error(r)["code"]) == (413, "batch_too_large")


def test_max_ranges(root):
    app = App(root, limits=Limits(max_ranges=2))
    assert _get(app, "/files/b.bin", {"range": "bytes=0-0,5-5"}).status == 206
    r = _get(app, "/files/b.bin", {"range": "bytes=0-0,5-5,9-9"})
    assert (r.status, _error(r)["code"]) == (416, "range_not_satisfiable")
    assert ("Content-Range", "bytes */10240") in r.headers


def test_max_url_bytes(root):
    app = App(root, limits=Limits(max_url_bytes=40))
    path = "/api/stream-files"
    query = "f=a.txt&pad=" + "x" * (40 - len(path) - len("f=a.txt&pad="))
    assert len(path) + len(query) == 40
    r = _get(app, f"{path}?{query}")
    assert r.status == 404  # within the limit: served (the padding names a missing file)
    r = _get(app, f"{path}?{query}x")
    assert (r.status, _error(r)["code"]) == (414, "uri_too_long")
    # The path alone counts too.
    r = _get(App(root, limits=Limits(max_url_bytes=8)), "/files/a.txt")
    assert r.status == 414


def test_max_query_bytes(root):
    app = App(root, limits=Limits(max_query_bytes=20))
    query = "f=a.txt&g=a.txt&h=ab"
    assert len(query) == 20
    assert _get(app, f"/api/stream-files?{query}").status == 404  # "ab" is missing; not 414
    r = _get(app, f"/api/stream-files?{query}c")
    assert (r.status, _error(r)["code"]) == (414, "uri_too_long")


def test_max_body_bytes(root):
    body = json.dumps({"files": ["a.txt"]}).encode()
    at = App(root, limits=Limits(max_body_bytes=len(body)))
    assert _post(at, "/api/stream-files", body).status == 200
    over = App(root, limits=Limits(max_body_bytes=len(body) - 1))
    r = _post(over, "/api/stream-files", body)
    assert (r.status, _error(r)["code"]) == (413, "body_too_large")


def test_check_body_is_the_one_decision():
    """Every runtime and the App refuse an oversized body through this one check."""
    limits = Limits(max_body_bytes=10)
    limits.check_body(10)
    with pytest.raises(HTTPError) as info:
        limits.check_body(11)
    assert (info.value.status, info.value.code) == (413, "body_too_large")
