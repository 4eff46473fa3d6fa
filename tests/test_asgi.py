"""The ASGI adapter driven in-process, for what no server installed here exercises: the
zero-copy extension, lifespan, and stopping at a disconnect. The wire contract itself is tested
over real sockets under uvicorn, hypercorn and granian in tests/e2e."""

from __future__ import annotations

import asyncio
import gc
import os

import pytest

from axon import App, Limits
from axon.asgi import create_app


@pytest.fixture
def files(tmp_path):
    (tmp_path / "a.bin").write_bytes(os.urandom(100_000))
    (tmp_path / "b.bin").write_bytes(os.urandom(3_000))
    return tmp_path


def http_scope(path, query=b"", method="GET", extensions=None):
    return {"type": "http", "method": method, "path": path, "raw_path": path.encode(), "query_string": query,
            "headers": [(b"host", b"x")], "extensions": extensions or {}}


async def call(asgi, scope, inbox, on_send=None):
    sent = []

    async def receive():
        return await inbox.get()

    async def send(message):
        sent.append(message)
        if on_send:
            await on_send(message)

    await asgi(scope, receive, send)
    return sent


def test_zerocopysend_hands_over_the_checked_descriptor(files, open_fds):
    asgi = create_app(files)
    received = bytearray()

    async def on_send(message):
        # What a zero-copy server does with the message: read count bytes at offset of that file.
        if message["type"] == "http.response.zerocopysend":
            received.extend(os.pread(message["file"].fileno(), message["count"], message["offset"]))
        elif message["type"] == "http.response.body":
            received.extend(message["body"])

    async def run():
        inbox = asyncio.Queue()
        scope = http_scope("/api/stream-files", b"f=a.bin&g=b.bin&h=a.bin", extensions={"http.response.zerocopysend": {}})
        return await call(asgi, scope, inbox, on_send)

    before = open_fds()
    sent = asyncio.run(run())
    kinds = [m["type"] for m in sent]
    assert kinds.count("http.response.zerocopysend") == 3
    start = sent[0]
    length = int(dict(start["headers"])[b"content-length"])
    assert len(received) == length
    a, b = (files / "a.bin").read_bytes(), (files / "b.bin").read_bytes()
    assert received.count(a) == 2 and b in received
    assert sent[-1] == {"type": "http.response.body", "body": b"", "more_body": False}
    gc.collect()  # what the run left to the collector closes its descriptors now
    assert open_fds() <= before  # no new descriptor (another may close meanwhile)


def test_disconnect_stops_reading_and_releases_files(files, open_fds):
    (files / "big.bin").write_bytes(b"x" * (8 * 1024 * 1024))
    asgi = create_app(files, limits=Limits(chunk_size=64 * 1024))
    chunks = 0

    async def run():
        nonlocal chunks
        inbox = asyncio.Queue()

        async def on_send(message):
            nonlocal chunks
            if message["type"] == "http.response.body" and message.get("more_body"):
                chunks += 1
                if chunks == 3:
                    await inbox.put({"type": "http.disconnect"})
                    await asyncio.sleep(0)  # let the watcher see it

        return await call(asgi, http_scope("/api/stream-files", b"f=big.bin"), inbox, on_send)

    before = open_fds()
    asyncio.run(run())
    assert 3 <= chunks < 10, "reading went on after the client left"
    gc.collect()  # what the run left to the collector closes its descriptors now
    assert open_fds() <= before  # no new descriptor (another may close meanwhile)


def test_lifespan_is_answered(files):
    async def run():
        inbox = asyncio.Queue()
        await inbox.put({"type": "lifespan.startup"})
        await inbox.put({"type": "lifespan.shutdown"})
        return await call(create_app(files), {"type": "lifespan"}, inbox)

    assert [m["type"] for m in asyncio.run(run())] == ["lifespan.startup.complete", "lifespan.shutdown.complete"]


def test_async_generator_stream_and_body_limit(files):
    app = App(files, limits=Limits(max_body_bytes=10))

    @app.route("/count")
    async def count(request):
        from axon.response import stream_response

        async def numbers():
            for i in range(3):
                data = f"{i}\n".encode()
                yield memoryview(data) if i == 1 else data  # an object body gives views

        return stream_response(numbers(), content_type="text/plain")

    asgi = create_app(app=app)

    async def run(scope, body_messages):
        inbox = asyncio.Queue()
        for m in body_messages:
            await inbox.put(m)
        return await call(asgi, scope, inbox)

    sent = asyncio.run(run(http_scope("/count"), []))
    assert b"".join(m.get("body", b"") for m in sent[1:]) == b"0\n1\n2\n"
    assert all(type(m["body"]) is bytes for m in sent[1:])  # a view a stream gave is sent as bytes
    assert b"content-length" not in dict(sent[0]["headers"])

    too_big = [{"type": "http.request", "body": b"x" * 6, "more_body": True}, {"type": "http.request", "body": b"x" * 6}]
    sent = asyncio.run(run(http_scope("/api/stream-files", method="POST"), too_big))
    assert sent[0]["status"] == 413
    assert b'"code": "body_too_large"' in sent[1]["body"]


def test_client_gone_while_sending_its_body_ends_quietly(files):
    async def run():
        inbox = asyncio.Queue()
        await inbox.put({"type": "http.request", "body": b'{"files": [', "more_body": True})
        await inbox.put({"type": "http.disconnect"})
        return await call(create_app(files), http_scope("/api/stream-files", method="POST"), inbox)

    assert asyncio.run(run()) == []  # nothing sent, nothing raised to the server
