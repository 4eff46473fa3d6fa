"""The bytes of a response head: status lines, header encoding, the Date line."""

from __future__ import annotations

import email.utils
import time

import pytest
# At import, as every server test does: a later directory's conftest takes the module name.
from conftest import get, wait_for

from axon.server.wire import (
    STATUS_LINES,
    UnsafeHeader,
    chunk_head,
    date_line,
    encode_head,
    status_line,
)


def test_status_lines_are_precomputed() -> None:
    assert STATUS_LINES[200] == b"HTTP/1.1 200 OK\r\n"
    assert STATUS_LINES[404] == b"HTTP/1.1 404 Not Found\r\n"
    assert status_line(299, "Custom") == b"HTTP/1.1 299 Custom\r\n"


def test_encode_head() -> None:
    head = encode_head(200, "OK", [("Content-Type", "text/plain"), ("Content-Length", "3")], b"X-Tail: 1\r\n")
    assert head == b"HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nContent-Length: 3\r\nX-Tail: 1\r\n\r\n"
    assert encode_head(204, "No Content", [], b"") == b"HTTP/1.1 204 No Content\r\n\r\n"
    assert encode_head(200, "OK", [("X-Latin", "caf\xe9")], b"").endswith(b"X-Latin: caf\xe9\r\n\r\n")


@pytest.mark.parametrize("header", [("X-A", "a\r\nSet-Cookie: x=1"), ("X-A", "a\nb"), ("X-A", "a\rb"),
                                    ("X-A\r\nX-B", "1"), ("X-A", "a\x00b")])
def test_encode_head_refuses_response_splitting(header) -> None:
    with pytest.raises(UnsafeHeader):
        encode_head(200, "OK", [("Content-Length", "0"), header], b"")


def test_encode_head_refuses_non_latin1() -> None:
    with pytest.raises(UnicodeEncodeError):
        encode_head(200, "OK", [("X-A", "\u2603")], b"")


def test_date_line_is_an_http_date() -> None:
    line = date_line()
    assert line.startswith(b"Date: ") and line.endswith(b"\r\nServer: axon\r\n")
    when = email.utils.parsedate_to_datetime(line[6:].split(b"\r\n")[0].decode())
    assert abs(when.timestamp() - time.time()) < 2
    assert date_line(784111777) == b"Date: Sun, 06 Nov 1994 08:49:37 GMT\r\nServer: axon\r\n"


def test_the_worker_keeps_its_date_current(serve) -> None:
    server = serve()
    first = get(server.port, "/api/health").header("date")
    # Asked until the next second begins (half a second on average), not a whole second later.
    assert wait_for(lambda: get(server.port, "/api/health").header("date") != first, timeout=2)


def test_chunk_head() -> None:
    assert chunk_head(255) == b"ff\r\n"
    assert chunk_head(1) == b"1\r\n"


def test_encoded_header_blocks_are_reused_and_still_checked() -> None:
    from axon.server.wire import UnsafeHeader, encode_head

    first = encode_head(200, "OK", [("Content-Type", "text/plain"), ("Content-Length", "5")], b"T: t\r\n")
    again = encode_head(200, "OK", [("Content-Type", "text/plain"), ("Content-Length", "5")], b"T: u\r\n")
    assert first == b"HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nContent-Length: 5\r\nT: t\r\n\r\n"
    assert again == first.replace(b"T: t", b"T: u")
    # Values equal as keys but written differently are never confused.
    assert b"X: 1\r\n" in encode_head(200, "OK", [("X", "1")], b"")
    assert b"X: True\r\n" in encode_head(200, "OK", [("X", True)], b"")  # type: ignore[list-item]
    assert b"X: 1.0\r\n" in encode_head(200, "OK", [("X", 1.0)], b"")  # type: ignore[list-item]
    assert b"X: 1\r\n" in encode_head(200, "OK", [["X", "1"]], b"")  # type: ignore[list-item]
    for _ in range(2):  # refused every time, not cached
        with pytest.raises(UnsafeHeader):
            encode_head(200, "OK", [("X", "a\r\nSet-Cookie: s=1")], b"")
