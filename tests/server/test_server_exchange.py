"""An exchange (axon/server/exchange.py) on a real loopback socket, with either head reader:
what its answer's framing needs is decided once from the request (keep-alive, the HTTP version,
HEAD), and the answer says it."""

from __future__ import annotations

import pytest
from conftest import FILES
from live import Live

from axon.app import App


@pytest.fixture
def conn(root, head_reader):
    live = Live(App(root))
    yield live
    live.close()


@pytest.mark.parametrize(("request_line", "headers", "connection", "kept"), [
    (b"GET /files/a.txt HTTP/1.1", b"", None, True),
    (b"GET /files/a.txt HTTP/1.1", b"Connection: close\r\n", "close", False),
    (b"GET /files/a.txt HTTP/1.0", b"", "close", False),
    (b"GET /files/a.txt HTTP/1.0", b"Connection: keep-alive\r\n", "keep-alive", True),
])
def test_keep_alive_and_the_version_are_decided_once(conn, request_line, headers, connection, kept) -> None:
    conn.client.sendall(request_line + b"\r\nHost: t\r\n" + headers + b"\r\n")
    resp = conn.response()
    assert (resp.body, resp.header("connection")) == (FILES["a.txt"], connection)
    if kept:  # proven by the next request's answer, not by waiting for an EOF that never comes
        conn.client.sendall(b"GET /api/health HTTP/1.1\r\nHost: t\r\n\r\n")
        assert conn.response().status == 200
    else:
        assert conn.eof()


def test_a_head_request_is_answered_without_a_body(conn) -> None:
    conn.client.sendall(b"HEAD /files/a.txt HTTP/1.1\r\n\r\nGET /api/health HTTP/1.1\r\n\r\n")
    head = conn.response("HEAD")
    assert head.header("content-length") == str(len(FILES["a.txt"])) and head.body == b""
    assert conn.response().status == 200  # the next answer begins where the head ended


def test_a_chunked_body_s_trailer_may_say_close(conn) -> None:
    body = b'{"files": ["a.txt"]}'
    conn.client.sendall(
        b"POST /api/stream-files HTTP/1.1\r\nTransfer-Encoding: chunked\r\nContent-Type: application/json\r\n\r\n"
        + b"%x\r\n" % len(body) + body + b"\r\n0\r\nConnection: close\r\n\r\n"
    )
    resp = conn.response()
    assert resp.status == 200 and resp.header("connection") == "close"
    assert conn.eof()


def test_a_new_exchange_has_every_field_set() -> None:
    """``exchange()`` is the one way to make one: a field added to the class and not set there
    would fail the first request that reads it."""
    from axon.server.exchange import Exchange, exchange

    ex = exchange(b"/files/a.txt", {"host": "t"}, False, True)
    fields = {name: getattr(ex, name) for name in Exchange.__slots__}  # AttributeError for one not set
    assert (fields["url"], fields["headers"], fields["in_head"], fields["keep_alive"]) == (
        b"/files/a.txt", {"host": "t"}, False, True)
    assert exchange(b"/").headers is not exchange(b"/").headers  # each its own
