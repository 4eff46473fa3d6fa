"""Objects of a real SeaweedFS served by Axon's runtimes (its own server, uvicorn for ASGI,
gunicorn's gthread worker for WSGI) over real sockets: batches, ranges, missing keys, the key
jail, and the two failures a remote store adds. An object overwritten while its batch streams,
and a store that stops answering mid-batch, must both end in a cut connection: the client
gets fewer bytes than the ``Content-Length`` (an error), never another version's bytes nor a
short body that looks complete."""

from __future__ import annotations

import http.client
import json
import socket
import time
import uuid

import pytest

from conftest import HOST, RUNTIMES, serve
from conftest import get as get_from

pytestmark = pytest.mark.slow  # SeaweedFS served by three runtimes over sockets

pytest.importorskip("obstore")

MiB = 1 << 20
#: The large batch: more than any prefetch plus socket buffers can hold ahead of the client.
BIG_COUNT = 48
OLD, NEW = b"\x01", b"\x02"
#: A batch of small objects: enough of them to be listed (LIST_MIN).
SMALL_COUNT = 20


@pytest.fixture(scope="module")
def prefix(weed) -> str:
    name = f"served-{uuid.uuid4().hex[:8]}"
    weed.put(f"{name}/a.txt", b"hello, objects\n")
    weed.put(f"{name}/b.bin", bytes(range(256)) * 40)
    weed.put(f"{name}/.hidden", b"hidden\n")
    for i in range(BIG_COUNT):
        weed.put(f"{name}/big/{i:02d}.bin", OLD * MiB)
    for i in range(SMALL_COUNT):
        weed.put(f"{name}/small/{i:02d}.bin", b"%02d" % i * 1000)
    return name


@pytest.fixture(scope="module", params=sorted(RUNTIMES))
def server(request, weed, prefix, tmp_path_factory):
    served = serve(request.param, weed.url(prefix), weed, tmp_path_factory.mktemp(request.param))
    yield served
    served.stop()


def get(server, target: str, headers: dict | None = None):
    return get_from(server.port, target, headers)


def test_a_batch(server, parse_multipart):
    status, headers, body = get(server, "/api/stream-files?f=a.txt&f=b.bin&f=a.txt")
    assert status == 200 and int(headers["content-length"]) == len(body)
    parts = parse_multipart(headers["content-type"], body)
    assert [p.get_payload(decode=True) for p in parts] == [b"hello, objects\n", bytes(range(256)) * 40,
                                                           b"hello, objects\n"]


def test_a_large_batch_in_request_order(server):
    names = [f"big/{i:02d}.bin" for i in reversed(range(8))]
    status, headers, body = get(server, "/api/stream-files.tar?" + "&".join(f"f={n}" for n in names))
    assert status == 200 and int(headers["content-length"]) == len(body)
    import io
    import tarfile

    with tarfile.open(fileobj=io.BytesIO(body)) as t:
        members = t.getmembers()
        assert [m.name for m in members] == names
        assert all(t.extractfile(m).read() == OLD * MiB for m in members)


def test_the_start_line_names_what_sends_the_bytes(server):
    if server.runtime != "native":
        pytest.skip("the start line is axon serve's")
    line = next(line for line in server.log_text().splitlines() if "listening on" in line)
    assert "ranged GETs" in line and "sendfile" not in line, line
    assert "a listing per batch" in line, line  # --object-listing-valid 0, the default


def test_a_range(server):
    status, headers, body = get(server, "/files/b.bin", {"Range": "bytes=256-511"})
    assert (status, body) == (206, bytes(range(256)))
    assert headers["content-range"] == "bytes 256-511/10240"
    status, _, body = get(server, "/files/b.bin", {"If-None-Match": headers["etag"]})
    assert status == 304


@pytest.mark.parametrize(("target", "status", "paths"), [
    ("/api/stream-files?f=a.txt&f=missing.bin", 404, ["missing.bin"]),
    ("/files/missing.bin", 404, ["missing.bin"]),
    ("/api/stream-files?f=../elsewhere.txt", 403, ["../elsewhere.txt"]),
    ("/api/stream-files?f=.hidden", 403, [".hidden"]),
])  # fmt: skip
def test_refusals_are_json_naming_the_key(server, target, status, paths):
    got, headers, body = get(server, target)
    assert got == status and headers["content-type"] == "application/json"
    assert json.loads(body)["error"]["paths"] == paths


def _start_big_batch(server, names: list[str]) -> tuple[socket.socket, int, bytes]:
    """A batch request on a socket with a small receive buffer; the body's length and the
    body bytes read with the head."""
    sock = socket.socket()
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 64 * 1024)  # before connect: a small window
    sock.settimeout(30)
    sock.connect((HOST, server.port))
    query = "&".join(f"f={n}" for n in names)
    sock.sendall(f"GET /api/stream-files?{query} HTTP/1.1\r\nHost: x\r\n\r\n".encode())
    data = b""
    while b"\r\n\r\n" not in data:
        more = sock.recv(65536)
        assert more, "closed before the head"
        data += more
    head, _, body = data.partition(b"\r\n\r\n")
    assert head.startswith(b"HTTP/1.1 200"), head
    length = next(int(line.split(b":")[1]) for line in head.split(b"\r\n") if line.lower().startswith(b"content-length:"))
    return sock, length, body


def _read_rest(sock: socket.socket, body: bytes, length: int) -> bytes:
    while len(body) < length:
        try:
            more = sock.recv(1 << 20)
        except ConnectionResetError:
            break
        if not more:
            break
        body += more
    sock.close()
    return body


def _read_some(sock: socket.socket, body: bytes, at_least: int) -> bytes:
    while len(body) < at_least:
        more = sock.recv(65536)
        assert more
        body += more
    return body


def test_an_object_overwritten_mid_stream_cuts_the_connection(server, weed, prefix):
    key = f"changing-{server.runtime}.bin"
    weed.put(f"{prefix}/{key}", OLD * MiB)
    names = [f"big/{i:02d}.bin" for i in range(BIG_COUNT - 1)] + [key]
    sock, length, body = _start_big_batch(server, names)
    body = _read_some(sock, body, MiB)
    weed.put(f"{prefix}/{key}", NEW * MiB)  # the same size: only its ETag tells it apart
    body = _read_rest(sock, body, length)
    assert len(body) < length, "a changed object must cut the batch short of its Content-Length"
    assert NEW * 64 not in body, "bytes of the new version were sent"
    assert len(body) > BIG_COUNT // 2 * MiB  # the objects before it were sent


def test_a_store_that_stops_answering_mid_batch_cuts_the_connection(server, weed):
    names = [f"big/{i:02d}.bin" for i in range(BIG_COUNT)]
    sock, length, body = _start_big_batch(server, names)
    body = _read_some(sock, body, MiB)
    weed.pause()
    try:
        started = time.monotonic()
        body = _read_rest(sock, body, length)
        waited = time.monotonic() - started
    finally:
        weed.resume()
    assert len(body) < length, "a silent store must cut the batch short of its Content-Length"
    assert waited < 25
    if server.runtime == "native":  # one warning line, not a traceback with obstore's debug dump
        time.sleep(0.5)
        said = server.log_text()
        # The store's own client may give up first ("failed: ... error sending request") or our
        # wait does ("did not answer"): either way one line that names the store.
        assert "aborting a response: the object store" in said
        assert "Traceback" not in said and "Debug source" not in said
    # The server itself is fine once the store answers again.
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline:
        status, _, got = get(server, "/files/a.txt")
        if status == 200:
            break
        time.sleep(0.5)
    assert (status, got) == (200, b"hello, objects\n")


@pytest.mark.parametrize(("flags", "asked"), [
    (["--object-cache", "1"], {"GET": 0, "LIST": 1}),
    (["--object-cache", "0"], {"GET": SMALL_COUNT, "LIST": 1}),
    (["--no-object-listing"], {"GET": SMALL_COUNT, "LIST": 0}),
    (["--object-listing-valid", "60"], {"GET": 0, "LIST": 0}),
])  # fmt: skip
def test_a_repeated_batch_costs_the_store_one_listing(weed, prefix, tmp_path, flags, asked):
    """``axon serve --object-cache MIB``: a worker keeps small objects' bytes, and a repeated
    batch is then one listing and no GET, as the store's own metrics count them; with 0, every
    object is asked again; with ``--no-object-listing``, each key is opened; with
    ``--object-listing-valid 60``, the first batch's listing stands for the second: no request."""
    served = serve("native", weed.url(prefix), weed, tmp_path, *flags)
    try:
        target = "/api/stream-files?" + "&".join(f"f=small/{i:02d}.bin" for i in range(SMALL_COUNT))
        first = get(served, target)
        before = weed.requests()
        second = get(served, target)
        time.sleep(0.2)  # the store counts a request once its answer is written
        after = weed.requests()
    finally:
        served.stop()
    assert first[0] == second[0] == 200 and second[2] == first[2]
    assert b"%02d" % 7 * 1000 in second[2]
    assert {kind: after.get(kind, 0) - before.get(kind, 0) for kind in ("GET", "LIST")} == asked
    if "--object-listing-valid" in flags:
        assert "a listing valid 60 s for kept objects" in served.log_text()  # the start line says it
