"""Every request limit crossed over real sockets (Limits defaults), on every runtime.

A front server may refuse an over-long request line itself before Axon sees it; which runtimes
do, and from what length, is recorded in ``conftest.RUNTIMES`` (``max_request_line``) and
asserted exactly, so that neither Axon's JSON nor the runtime's refusal goes unnoticed.
"""

from __future__ import annotations

import json

import pytest

from e2e_wire import (
    JSON_HEADERS,
    ConnectionClosedEarly,
    MiB,
    check_length,
    files_body,
    parse_multipart,
)

pytestmark = [pytest.mark.slow, pytest.mark.timeout(60)]  # every runtime over real sockets


def test_max_files_post(server, served_root):
    """1,000 files (the default cap) are served; 1,001 and 10,000 are 413 JSON."""
    resp = server.post_files(["examples/small.txt"] * 1000, timeout=30)
    assert resp.status == 200, resp.describe()
    assert resp.header("content-length") == str(len(resp.body))
    parts = list(parse_multipart(resp).iter_parts())
    assert len(parts) == 1000
    small = (served_root / "examples/small.txt").read_bytes()
    assert all(p.get_payload(decode=True) == small for p in parts[::97])
    for count in (1001, 10_000):
        err = server.post_files(["examples/small.txt"] * count).error(413)
        assert err["code"], err


def test_max_files_post_refused_before_opening(server):
    """10,000 names, none of which exists: still 413 (the count is checked first, not 404)."""
    err = server.post_files([f"nope/{i}.bin" for i in range(10_000)]).error(413)
    assert len(json.dumps(err)) < 64 * 1024, "the error echoes 10,000 paths"


def test_json_body_too_large(server):
    """A JSON body over 1 MiB is 413, whether or not Axon reads it before refusing."""
    paths = ["examples/small.txt"] * 60_000
    body = files_body(paths)
    assert len(body) > MiB
    try:
        resp = server.request("POST", "/api/stream-files", JSON_HEADERS, body, timeout=20)
    except ConnectionClosedEarly as exc:
        pytest.fail(f"{server.name}: connection dropped with no response to a 1 MiB+ body: {exc}")
    resp.error(413)
    server.assert_alive()


def test_json_body_declared_too_large(server):
    """Content-Length over the limit, body never sent: refused from the header alone."""
    with server.connect() as conn:
        head = (
            f"POST /api/stream-files HTTP/1.1\r\nHost: {conn.host}\r\nContent-Type: application/json\r\n"
            f"Content-Length: {2 * MiB}\r\nConnection: close\r\n\r\n"
        ).encode()
        conn.send_raw(head + b'{"files": [')
        if server.runtime.buffers_request_body:
            # This runtime (waitress) calls the app only once the whole body is in, so send it;
            # Axon must still refuse it.
            server.quirk("reads the whole request body before calling the app")
            conn.send_raw(b" " * (2 * MiB - len(b'{"files": [')))
        resp = conn.read("POST", timeout=10)
    resp.error(413)


def _long_query(server, length: int):
    """GET a batch URL whose request line is about ``length`` bytes long."""
    target = "/api/stream-files?file1=" + "x" * (length - len("GET /api/stream-files?file1= HTTP/1.1"))
    line = len(f"GET {target} HTTP/1.1")
    limit = server.runtime.max_request_line
    try:
        resp = server.get(target, timeout=15)
    except ConnectionClosedEarly as exc:
        assert limit is not None and line > limit, (
            f"{server.name} dropped a {line}-byte request line without a response: {exc}"
        )
        server.quirk(f"drops the connection without a response on a {line}-byte request line")
        return None
    if limit is not None and line > limit:
        # The runtime's own refusal, before Axon: any 4xx, in Axon's JSON shape only where the
        # front server is set up to answer so (deploy/'s nginx site).
        assert 400 <= resp.status < 500, resp.describe()
        assert resp.is_axon_json() == server.runtime.front_refusals_are_json, (
            f"expected {server.name} to refuse this itself\n{resp.describe()}"
        )
        server.quirk(f"refuses a {line}-byte request line itself with {resp.status} {resp.reason}")
        return None
    return resp


@pytest.mark.parametrize("length", [20_000, 200_000], ids=["20KB", "200KB"])
def test_query_too_long_is_414(server, length):
    resp = _long_query(server, length)
    if resp is not None:
        err = resp.error(414)
        assert err["code"], err
    server.assert_alive()


def test_query_just_under_limit_is_not_414(server):
    """A 15 KiB query (under Limits.max_query_bytes) is not refused for its length."""
    resp = _long_query(server, 15 * 1024)
    if resp is not None:
        assert resp.status != 414, resp.describe()
        resp.error(404)  # the name "xxx...x" is too long for the file system: not found


# Header limits are enforced by whoever parses the request head: the front server under WSGI
# and ASGI (each with its own rules), Axon itself only on its native server.


def test_native_header_bytes_too_large_is_431(server):
    if server.runtime.interface != "native":
        pytest.skip("request heads are parsed by the runtime, not by Axon")
    resp = server.get("/api/health", [("X-Filler", "y" * (20 * 1024))])
    resp.error(431)
    server.assert_alive()


def test_native_too_many_headers_is_431(server):
    if server.runtime.interface != "native":
        pytest.skip("request heads are parsed by the runtime, not by Axon")
    resp = server.get("/api/health", [(f"X-H{i}", "1") for i in range(150)])
    resp.error(431)
    server.assert_alive()


def test_the_server_tells_its_limits(server):
    """GET /api/limits is the Limits a client sizes its batches by (the defaults here); HEAD too."""
    from axon.limits import Limits

    resp = server.get("/api/limits")
    assert resp.status == 200, resp.describe()
    assert resp.header("content-type") == "application/json"
    assert resp.header("cache-control") == "no-cache"
    check_length(resp)
    limits = resp.json()
    defaults = Limits()
    assert {k: limits[k] for k in ("max_files", "max_batch_bytes", "max_body_bytes", "max_url_bytes", "max_ranges")} == {
        "max_files": defaults.max_files, "max_batch_bytes": defaults.max_batch_bytes,
        "max_body_bytes": defaults.max_body_bytes, "max_url_bytes": defaults.max_url_bytes,
        "max_ranges": defaults.max_ranges,
    }
    assert limits["formats"] == ["multipart/mixed", "application/zip", "application/x-tar"]
    assert limits["browse"] == "/browse/"  # the e2e servers run with AXON_BROWSE=1
    assert isinstance(limits["version"], str) and limits["version"]
    head = server.head("/api/limits")
    assert head.status == 200 and head.body == b""
    assert head.header("content-length") == resp.header("content-length")
