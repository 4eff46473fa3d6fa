"""HTTP/1.1 over real sockets: keep-alive, pipelining, 100-continue, chunked bodies both ways,
files through sendfile and through the copying fallback, and how few writes a batch costs."""

from __future__ import annotations

import asyncio
import json
import os
import socket
import threading
import time

import pytest
from conftest import (
    FILES,
    SMALL_COUNT,
    Client,
    batch_target,
    big_content,
    get,
    parse_multipart,
    slow_client,
)

from axon.app import App, Request
from axon.response import Response, stream_response
from axon.server.protocol import HTTPProtocol


@pytest.fixture(params=["sendfile", "copy"])
def mode(request) -> str:
    return request.param


def test_keep_alive_serves_many_requests_on_one_connection(serve) -> None:
    server = serve()
    with Client(server.port) as c:
        for _ in range(5):
            resp = c.get("/api/health")
            assert resp.status == 200 and resp.body == b'{"status":"available"}'
            assert resp.header("connection") is None
        assert c.get("/files/a.txt").body == FILES["a.txt"]
        assert not c.is_closed(timeout=0.2)


def test_pipelined_requests_are_answered_in_order(serve, root) -> None:
    app = App(root)

    @app.route("/slow-async")
    async def slow_async(request: Request) -> str:
        await asyncio.sleep(0.2)
        return "first"

    @app.route("/slow-sync")
    def slow_sync(request: Request) -> str:
        time.sleep(0.1)
        return "third"

    server = serve(app)
    with Client(server.port) as c:
        c.send(b"GET /slow-async HTTP/1.1\r\n\r\nGET /api/health HTTP/1.1\r\n\r\nGET /slow-sync HTTP/1.1\r\n\r\n"
               b"GET /files/b.bin HTTP/1.1\r\n\r\n")
        bodies = [c.response().body for _ in range(4)]
    assert bodies == [b"first", b'{"status":"available"}', b"third", FILES["b.bin"]]


def test_http10_closes_unless_asked_to_keep_alive(serve) -> None:
    server = serve()
    with Client(server.port) as c:
        c.send(b"GET /api/health HTTP/1.0\r\n\r\n")
        assert c.response().header("connection") == "close"
        assert c.is_closed()
    with Client(server.port) as c:
        c.send(b"GET /api/health HTTP/1.0\r\nConnection: keep-alive\r\n\r\n")
        assert c.response().header("connection") == "keep-alive"
        c.send(b"GET /api/health HTTP/1.0\r\nConnection: keep-alive\r\n\r\n")
        assert c.response().status == 200


def test_expect_100_continue(serve) -> None:
    server = serve()
    body = json.dumps({"files": ["a.txt", "b.bin"]}).encode()
    with Client(server.port) as c:
        c.send(b"POST /api/stream-files HTTP/1.1\r\nContent-Type: application/json\r\n"
               b"Expect: 100-continue\r\nContent-Length: %d\r\n\r\n" % len(body))
        assert c._line() == b"HTTP/1.1 100 Continue"  # before a byte of the body was sent
        assert c._line() == b""
        c.send(body)
        resp = c.response()
    assert resp.status == 200
    assert [p[1] for p in parse_multipart(resp)] == [FILES["a.txt"], FILES["b.bin"]]


def test_chunked_request_body(serve) -> None:
    server = serve()
    body = json.dumps({"files": [f"small/f{i:02d}.bin" for i in range(1, 9)]}).encode()
    chunked = b"".join(b"%x\r\n%s\r\n" % (len(body[i : i + 7]), body[i : i + 7]) for i in range(0, len(body), 7))
    with Client(server.port) as c:
        c.send(b"POST /api/stream-files HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n")
        for i in range(0, len(chunked), 50):
            c.send(chunked[i : i + 50])
            time.sleep(0.002)
        c.send(b"0\r\n\r\n")
        resp = c.response()
    assert resp.status == 200
    assert [p[1] for p in parse_multipart(resp)] == [FILES[f"small/f{i:02d}.bin"] for i in range(1, 9)]


def test_chunked_response_for_a_generator(serve, root) -> None:
    app = App(root)

    @app.route("/numbers")
    def numbers(request: Request):
        return stream_response(f"{i}\n".encode() for i in range(1000))

    server = serve(app)
    with Client(server.port) as c:
        resp = c.get("/numbers")
        assert resp.header("transfer-encoding") == "chunked"
        assert resp.body == b"".join(f"{i}\n".encode() for i in range(1000))
        assert c.get("/api/health").status == 200  # the connection is still usable


def test_a_streamed_buffer_is_sent_as_it_was_when_yielded(serve, root) -> None:
    """Chunks larger than the socket takes at once, to a slow client, arrive as they were when
    yielded: a writable view of a buffer the stream then reuses, and read-only views (how an
    object body hands over the store's buffers). Which are copied: the test below."""
    app = App(root)
    size = 8 << 20  # past what the socket takes at once: the transport must queue the rest

    @app.route("/reused")
    def reused(request: Request):
        def chunks():
            buffer = bytearray(size)
            for byte in b"abc":
                buffer[:] = bytes([byte]) * size
                yield memoryview(buffer)  # then overwritten for the next chunk, as readinto does

        return Response(200, [("Content-Length", str(3 * size))], stream=chunks())

    @app.route("/views")
    def views(request: Request):
        return Response(200, [("Content-Length", str(2 * size))],
                        stream=iter([memoryview(b"v" * size), memoryview(b"w" * size)]))

    server = serve(app)
    for target, expected in (("/reused", b"a" * size + b"b" * size + b"c" * size),
                             ("/views", b"v" * size + b"w" * size)):
        with slow_client(server.port) as c:
            resp = c.get(target)
            assert resp.status == 200 and resp.body == expected, target


def test_a_stream_that_hands_file_slices_has_them_sent_from_the_file(serve, root, tmp_path) -> None:
    """A stream that can hand slices of files (an object body: objects the disk tier keeps or
    fills) is asked for them, at least ``sendfile_min`` long, and they are sent from the file:
    with a declared length, and chunked (where an empty slice must not end the body)."""
    from axon.http.segments import FileSlice
    from axon.server.config import ServerConfig

    path = tmp_path / "slices.bin"
    data = os.urandom(300_000)
    path.write_bytes(data)
    fd = os.open(path, os.O_RDONLY)
    asked: list[int] = []

    class Slices:
        def __init__(self) -> None:
            self.closed = False

        def __aiter__(self):
            raise AssertionError("a runtime with sendfile reads the slices itself")

        async def _chunks(self):
            yield b"<"
            yield FileSlice(fd, 0, 200_000)
            yield FileSlice(fd, 0, 0)
            yield memoryview(b"|")
            yield FileSlice(fd, 200_000, 100_000)
            yield b">"

        def with_file_slices(self, smallest: int):
            asked.append(smallest)
            return self._chunks()

        def close(self) -> None:
            self.closed = True

    app = App(root)
    streams: list[Slices] = []

    @app.route("/slices")
    def slices(request: Request):
        streams.append(Slices())
        length = [("Content-Length", str(len(data) + 3))] if request.query_string == "length" else []
        return Response(200, length, stream=streams[-1])

    server = serve(app)
    try:
        with Client(server.port) as c:
            for query in ("length", "chunked"):
                resp = c.get(f"/slices?{query}")
                assert resp.status == 200 and resp.body == b"<" + data[:200_000] + b"|" + data[200_000:] + b">"
                assert (resp.header("transfer-encoding") == "chunked") == (query == "chunked")
            assert c.get("/api/health").status == 200  # the connection is still usable
    finally:
        os.close(fd)
    assert asked == [ServerConfig().sendfile_min] * 2 and all(s.closed for s in streams)


def test_only_a_read_only_view_of_bytes_is_sent_uncopied() -> None:
    from axon.server.writer import _unchanging

    data = b"x" * 100
    view = memoryview(data)
    assert _unchanging(view) is view  # an object body's piece: the store's buffer, not a copy
    for changeable in (memoryview(bytearray(data)), bytearray(data), memoryview(data)[::2]):
        sent = _unchanging(changeable)
        assert type(sent) is bytes and sent == bytes(changeable)


def test_files_and_batches_arrive_intact(serve, root, mode) -> None:
    server = serve(sendfile=mode == "sendfile")
    big = big_content(root)
    with Client(server.port) as c:
        resp = c.get("/files/big.bin")
        assert resp.status == 200 and resp.body == big
        resp = c.get("/files/big.bin", {"Range": "bytes=1000000-3000000"})
        assert resp.status == 206 and resp.body == big[1000000:3000001]
        paths = ["a.txt", "big.bin", "small/f01.bin", "mid.bin", "big.bin", "small/f02.bin"]
        resp = c.get(batch_target(paths))
        parts = parse_multipart(resp)
        expected = [big if p == "big.bin" else FILES[p] for p in paths]
        assert [p[1] for p in parts] == expected
        assert [p[0]["Content-Location"] for p in parts] == ["/files/" + p for p in paths]
        assert int(resp.header("content-length")) == len(resp.body)


class _CountingTransport:
    def __init__(self, transport, counts: dict[str, int]) -> None:
        self._t = transport
        self._counts = counts

    def write(self, data) -> None:
        self._counts["writes"] += 1
        self._t.write(data)

    def writelines(self, parts) -> None:
        self._counts["writes"] += 1
        self._t.writelines(parts)

    def __getattr__(self, name):
        return getattr(self._t, name)


@pytest.fixture
def counts(monkeypatch) -> dict[str, int]:
    """System calls that send, by kind: through the transport ("writes"), ``os.sendfile``,
    ``sendmsg`` with ``MSG_MORE`` on the socket ("more"), and any ``TCP_CORK`` set ("cork")."""
    counts = {"writes": 0, "sendfile": 0, "more": 0, "cork": 0}
    made = HTTPProtocol.connection_made

    def connection_made(self, transport) -> None:
        made(self, transport)
        self.transport = _CountingTransport(transport, counts)

    real_sendfile = os.sendfile

    def sendfile(*args):
        counts["sendfile"] += 1
        return real_sendfile(*args)

    real_sendmsg, real_setsockopt = socket.socket.sendmsg, socket.socket.setsockopt

    def sendmsg(sock, buffers, ancdata=(), flags=0, *args):
        counts["more"] += bool(flags & socket.MSG_MORE)
        return real_sendmsg(sock, buffers, ancdata, flags, *args)

    def setsockopt(sock, level, option, *args):
        counts["cork"] += level == socket.IPPROTO_TCP and option == socket.TCP_CORK
        return real_setsockopt(sock, level, option, *args)

    monkeypatch.setattr(HTTPProtocol, "connection_made", connection_made)
    monkeypatch.setattr(os, "sendfile", sendfile)
    monkeypatch.setattr(socket.socket, "sendmsg", sendmsg)
    monkeypatch.setattr(socket.socket, "setsockopt", setsockopt)
    return counts


def test_a_batch_of_small_files_is_a_few_writes(serve, counts) -> None:
    server = serve()
    paths = [f"small/f{i:02d}.bin" for i in range(1, SMALL_COUNT + 1)]
    with Client(server.port) as c:
        c.get("/api/health")
        counts.update(writes=0, sendfile=0)
        resp = c.get(batch_target(paths))
    assert [p[1] for p in parse_multipart(resp)] == [FILES[p] for p in paths]
    # 32 x 4 KiB + part headers = 137 KiB, gathered into writev calls of 64 KiB (the most a slow
    # reader may hold in user space): 3 system calls for 32 files, not 100
    assert counts == {"writes": 3, "sendfile": 0, "more": 0, "cork": 0}, counts


def test_a_large_file_goes_out_with_sendfile(serve, counts, root) -> None:
    server = serve()
    with Client(server.port) as c:
        resp = c.get(batch_target(["mid.bin"]))
    assert parse_multipart(resp)[0][1] == FILES["mid.bin"]
    # the head and part header held for the file's data (MSG_MORE), the file by sendfile, the
    # closing boundary in one write; no cork to set and clear
    assert counts["more"] == 1 and counts["sendfile"] >= 1 and counts["writes"] == 1, counts
    assert counts["cork"] == 0, counts


def test_a_large_single_file_is_its_head_and_sendfile(serve, counts) -> None:
    server = serve()
    with Client(server.port) as c:
        resp = c.get("/files/mid.bin")
    assert resp.body == FILES["mid.bin"]
    assert counts["more"] == 1 and counts["sendfile"] >= 1 and counts["writes"] == 0, counts
    assert counts["cork"] == 0, counts


@pytest.mark.parametrize("how", ["file", "batch"])
def test_a_64k_file_is_its_head_and_one_sendfile_written_at_once(serve, counts, how, monkeypatch) -> None:
    # One write_chunk of file data, sendfile_min, read from its descriptor (the open-file cache
    # keeping bytes of smaller files only, as where its byte budget is spent): written
    # synchronously (no task), the head held for the file's data (MSG_MORE), the file by one
    # sendfile (not copied twice by pread and writev), a batch's closing boundary in one write;
    # asked twice, the same each time.
    from axon.storage import file_cache

    monkeypatch.setattr(file_cache, "SMALL_FILE", 16 * 1024)
    server = serve()
    with Client(server.port) as c:
        for _ in range(2):
            if how == "file":
                body = c.get("/files/k64.bin").body
            else:
                body = parse_multipart(c.get(batch_target(["k64.bin"])))[0][1]
            assert body == FILES["k64.bin"]
    writes = 0 if how == "file" else 2
    assert counts == {"writes": writes, "sendfile": 2, "more": 2, "cork": 0}, counts


@pytest.mark.parametrize("how", ["file", "batch"])
def test_a_64k_file_kept_in_memory_is_one_write(serve, counts, how, monkeypatch) -> None:
    # A file of 64 KiB is small enough for the open-file cache to keep its bytes (SMALL_FILE):
    # once kept (from its second use here: settled at once), each answer leaves in one writev,
    # nothing read, no sendfile.
    from axon.storage import file_cache

    monkeypatch.setattr(file_cache, "SETTLED_NS", -(10**18))
    server = serve()
    with Client(server.port) as c:
        target = "/files/k64.bin" if how == "file" else batch_target(["k64.bin"])
        assert c.get(target).status == 200  # its first sight opens it; the next use keeps its bytes
        counts.update(writes=0, sendfile=0, more=0)
        for _ in range(3):
            resp = c.get(target)
            assert (resp.body if how == "file" else parse_multipart(resp)[0][1]) == FILES["k64.bin"]
    assert counts == {"writes": 3, "sendfile": 0, "more": 0, "cork": 0}, counts


def test_no_sendfile_when_switched_off(serve, counts, monkeypatch) -> None:
    monkeypatch.setenv("AXON_NO_SENDFILE", "1")
    server = serve()
    with Client(server.port) as c:
        resp = c.get("/files/mid.bin")
    assert resp.body == FILES["mid.bin"]
    assert counts["sendfile"] == 0 and counts["writes"] >= 4  # 200 KiB in 64 KiB chunks


def test_a_slow_plain_handler_does_not_block_the_loop(serve, root) -> None:
    app = App(root)

    @app.route("/slow")
    def slow(request: Request) -> str:
        time.sleep(1.0)
        return "done"

    server = serve(app)
    result: list[bytes] = []
    t = threading.Thread(target=lambda: result.append(get(server.port, "/slow").body))
    t.start()
    time.sleep(0.1)
    started = time.monotonic()
    assert get(server.port, "/api/health").status == 200
    assert time.monotonic() - started < 0.5
    t.join()
    assert result == [b"done"]


def test_responses_carry_date_and_server(serve) -> None:
    resp = get(serve().port, "/api/health")
    assert resp.header("server") == "axon"
    assert resp.header("date").endswith(" GMT")


def test_head_and_errors_over_a_socket(serve) -> None:
    server = serve()
    with Client(server.port) as c:
        head = c.request("HEAD", "/files/big.bin")
        assert head.status == 200 and head.body == b"" and int(head.header("content-length")) > 0
        missing = c.get(batch_target(["a.txt", "missing.bin"]))
        assert missing.status == 404 and missing.json()["error"]["paths"] == ["missing.bin"]
        assert c.get("/api/health").status == 200


def test_the_connection_survives_a_client_half_close(serve) -> None:
    server = serve()
    with Client(server.port) as c:
        c.send(b"GET /files/b.bin HTTP/1.1\r\n\r\nGET /api/health HTTP/1.1\r\n\r\n")
        c.sock.shutdown(socket.SHUT_WR)
        assert c.response().body == FILES["b.bin"]
        assert c.response().status == 200
        assert c.is_closed()


@pytest.mark.parametrize("loop", ["uvloop", "asyncio"])
def test_a_slow_reader_gets_every_byte(serve, root, mode, loop, monkeypatch) -> None:
    # A small receive buffer and pauses: sendfile meets a full socket (EAGAIN) again and again,
    # the copying path waits for the transport to drain; both must deliver every byte in order.
    if loop == "asyncio":
        monkeypatch.setenv("AXON_LOOP", "asyncio")
    else:
        pytest.importorskip("uvloop")
        monkeypatch.delenv("AXON_LOOP", raising=False)
    server = serve(sendfile=mode == "sendfile")
    assert type(server.worker.loop).__module__.startswith(loop)
    with slow_client(server.port, rcvbuf=8 * 1024) as c:
        paths = ["mid.bin", "big.bin", "a.txt", "mid.bin"]
        c.send(f"GET {batch_target(paths)} HTTP/1.1\r\n\r\nGET /api/health HTTP/1.1\r\n\r\n".encode())
        for _ in range(20):
            time.sleep(0.01)
            c._more()
        resp = c.response()
        assert [p[1] for p in parse_multipart(resp)] == [big_content(root) if p == "big.bin" else FILES[p] for p in paths]
        assert c.response().status == 200


def test_sendfile_falls_back_when_no_descriptor_is_left(serve, root, monkeypatch) -> None:
    # EAGAIN is normally waited out by watching a duplicate of the socket; with no descriptor
    # left for the duplicate, a small chunk goes through the transport instead.
    def no_fd(fd: int) -> int:
        raise OSError(24, "Too many open files")

    monkeypatch.setattr(os, "dup", no_fd)
    server = serve()
    with slow_client(server.port, rcvbuf=8 * 1024) as c:
        c.send(b"GET /files/big.bin HTTP/1.1\r\n\r\n")
        time.sleep(0.2)
        assert c.response().body == big_content(root)
