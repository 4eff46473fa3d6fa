"""A body of object slices as a stream, against a real SeaweedFS: the bytes in order (sync for
WSGI, async for the others), pieces within the prefetch budget, and a replaced object ending the
stream with an error rather than its new bytes."""

from __future__ import annotations

import asyncio
import os
import uuid

import pytest

pytest.importorskip("obstore")

from axon.config import object_store_environment  # noqa: E402
from axon.storage import object_stream  # noqa: E402
from axon.storage.object_stream import ObjectBody, ObjectStreamBroken  # noqa: E402
from axon.storage.objects import OPEN_READ, ObjectSource  # noqa: E402

SIZE = 200_000  # past OPEN_READ: sent from the store, not from what opening brought


@pytest.fixture
def source(weed):
    prefix = f"stream-{uuid.uuid4().hex[:8]}"
    for name, byte in (("x.bin", b"x"), ("y.bin", b"y")):
        weed.put(f"{prefix}/{name}", byte * SIZE)
    return ObjectSource(weed.url(prefix), env=object_store_environment(weed.env()), timeout=5,
                        prefetch_bytes=3 * 16_384)


@pytest.fixture
def small_pieces(monkeypatch):
    monkeypatch.setattr(object_stream, "PIECE", 16_384)  # many pieces per object


def body(source):
    x, y = source.open("x.bin"), source.open("y.bin")
    assert x.data is None and y.data is None and x.head == b"x" * OPEN_READ
    return [b"<", x.segment(10, SIZE - 10), b"|", y.segment(0, SIZE), x.segment(0, 5), b">"]


EXPECTED = b"<" + b"x" * (SIZE - 20) + b"|" + b"y" * SIZE + b"xxxxx>"


def test_bytes_in_order_for_wsgi(source, small_pieces):
    stream = ObjectBody(source, body(source), 65536)
    try:
        chunks = list(stream)
    finally:
        stream.close()
    assert b"".join(chunks) == EXPECTED
    assert all(type(c) is bytes for c in chunks)  # WSGI's chunks are bytes, never a view
    # A chunk and at most one piece (or the head opening brought) more.
    assert max(map(len, chunks)) < 65536 + max(16_384, OPEN_READ)


def test_bytes_in_order_for_async_runtimes(source, small_pieces):
    segments = body(source)  # opened off the loop: on it, opening that asks the store is WouldBlock

    async def read() -> bytes:
        out = bytearray()
        async for chunk in ObjectBody(source, segments, 65536):
            out += chunk
        return bytes(out)

    assert asyncio.run(read()) == EXPECTED


def test_a_whole_piece_goes_out_as_a_read_only_view_of_the_stores_buffer(source, small_pieces):
    segments = body(source)

    async def read() -> list:
        return [chunk async for chunk in ObjectBody(source, segments, 4096)]

    chunks = asyncio.run(read())
    assert b"".join(chunks) == EXPECTED
    views = [c for c in chunks if type(c) is memoryview]
    # Past what opening brought, each whole piece of x and y is one view, not a copy (the short
    # last pieces, under a chunk, are joined to the bytes around them).
    assert len(views) == 2 * ((SIZE - OPEN_READ) // 16_384)
    assert all(v.readonly and len(v) == 16_384 for v in views)


def test_a_runtime_that_sends_files_itself_gets_the_slices_of_files(source, small_pieces, tmp_path):
    # Axon's server sends what lies in a file (an object the disk tier keeps, or fills) by
    # sendfile: those slices come as they are, at least `smallest` bytes; shorter ones, read.
    from axon.http.segments import FileSlice

    path = tmp_path / "kept.bin"
    path.write_bytes(b"k" * 40_000)
    fd = os.open(path, os.O_RDONLY)
    segments = [*body(source), FileSlice(fd, 100, 39_900), b"!"]
    expected = EXPECTED + b"k" * 39_900 + b"!"

    async def read(stream) -> list:
        return [chunk async for chunk in stream]

    try:
        chunks = asyncio.run(read(ObjectBody(source, segments, 4096).with_file_slices(10_000)))
        plain = asyncio.run(read(ObjectBody(source, segments, 4096)))
        text = b"".join(os.pread(c.fd, c.count, c.offset) if type(c) is FileSlice else bytes(c) for c in chunks)
    finally:
        os.close(fd)
    slices = [c for c in chunks if type(c) is FileSlice]
    # In pieces of at most PIECE (16 KiB here): two whole ones, and a last of 7,132 bytes, read.
    assert slices == [(fd, 100, 16_384), (fd, 16_484, 16_384)]
    assert text == expected
    assert all(type(c) is not FileSlice for c in plain) and b"".join(plain) == expected


def test_pieces_in_flight_stay_within_the_prefetch_budget(source, small_pieces, monkeypatch):
    real_get = object_stream._get
    state = {"now": 0, "most": 0}

    async def counted(store, key, options):
        start, stop = options["range"]
        state["now"] += stop - start
        state["most"] = max(state["most"], state["now"])
        try:
            return await real_get(store, key, options)
        finally:
            state["now"] -= stop - start

    monkeypatch.setattr(object_stream, "_get", counted)
    stream = ObjectBody(source, body(source), 65536)
    try:
        assert b"".join(stream) == EXPECTED
    finally:
        stream.close()
    assert 16_384 < state["most"] <= source.prefetch_bytes


def test_an_object_replaced_after_opening_breaks_the_stream(source, weed, small_pieces):
    segments = body(source)
    weed.put(f"{source.root.split('/', 3)[3]}/y.bin", b"Y" * SIZE)  # same size, new ETag
    stream = ObjectBody(source, segments, 65536)
    got = bytearray()
    with pytest.raises(ObjectStreamBroken, match="changed since it was opened"):
        for chunk in stream:
            got += chunk
    stream.close()
    assert b"Y" not in got and len(got) < len(EXPECTED)
    # An OSError, as a file failing midway: Axon's server logs one line and cuts the connection;
    # that every runtime cuts it is test_objects_served's (uvicorn, gunicorn, native).
    assert issubclass(ObjectStreamBroken, OSError)


def test_closing_early_stops_fetching(source, small_pieces):
    stream = ObjectBody(source, body(source), 16_384)
    first = next(iter(stream))
    stream.close()
    assert first.startswith(b"<x")
    stream.close()  # twice is fine


def test_a_store_failing_midway_is_one_line_and_an_os_error(source, weed, small_pieces):
    """The store refusing a piece (here: the keys it is fetched with are wrong) ends the stream
    with one line naming the object, without obstore's debug dump; an OSError, which Axon's
    server logs as one warning line rather than a traceback."""
    refused = ObjectSource(source.root, env=object_store_environment(weed.env(AWS_SECRET_ACCESS_KEY="wrong")),
                           timeout=5, check=False)
    stream = ObjectBody(refused, body(source), 16_384)
    with pytest.raises(ObjectStreamBroken) as caught:
        b"".join(stream)
    stream.close()
    said = str(caught.value)
    assert isinstance(caught.value, OSError)
    assert "\n" not in said and "Debug" not in said and "x.bin" in said and "403" in said
