"""The client against the real Axon WSGI app under gunicorn, over a real socket.

Skipped when ``axon.wsgi`` or gunicorn cannot be imported. One server for the module.
"""

from __future__ import annotations

import asyncio
import http.client
import os
import shutil
from collections.abc import Iterator
from pathlib import Path

import pytest
from live_server import live_server, runtime_available

from axon.client import FetchError, MultipartParser, PartData, PartStart, afetch, fetch

if (why := runtime_available("gunicorn")) is not None:
    pytest.skip(why, allow_module_level=True)

FILES = {
    "a.bin": os.urandom(100_000),
    "dir/b.bin": os.urandom(1_000_003),
    "dir/naïve résumé.txt": b"unicode",
    "space and %25.bin": b"percent",
}


@pytest.fixture(scope="module")
def axon_url(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    root = tmp_path_factory.mktemp("served")
    for path, data in FILES.items():
        (root / path).parent.mkdir(parents=True, exist_ok=True)
        (root / path).write_bytes(data)
    with live_server("gunicorn", root) as url:
        yield url


def test_fetch_from_axon(axon_url: str, tmp_path: Path) -> None:
    result = fetch(axon_url, list(FILES), tmp_path / "sync")
    assert [f.path for f in result.files] == list(FILES)
    assert (
        asyncio.run(afetch(axon_url, list(FILES), tmp_path / "async")).bytes_written == result.bytes_written
    )
    for path, data in FILES.items():
        assert (tmp_path / "sync" / path).read_bytes() == data
        assert (tmp_path / "async" / path).read_bytes() == data


def test_long_list_posted_to_axon(axon_url: str, tmp_path: Path) -> None:
    names = ["a.bin"] * 50
    result = fetch(axon_url, names, tmp_path / "dest", method="POST")
    assert len(result.files) == 50 and (tmp_path / "dest" / "a.bin").read_bytes() == FILES["a.bin"]


def test_axon_error_is_a_fetch_error(axon_url: str, tmp_path: Path) -> None:
    with pytest.raises(FetchError) as caught:
        fetch(axon_url, ["a.bin", "missing.bin"], tmp_path / "dest")
    assert caught.value.status == 404 and caught.value.code == "not_found"
    assert "missing.bin" in caught.value.paths


def test_axon_byteranges_parse(axon_url: str) -> None:
    connection = http.client.HTTPConnection(*axon_url.removeprefix("http://").split(":"), timeout=10)
    connection.request("GET", "/files/dir/b.bin", headers={"Range": "bytes=0-9,500000-500099,-7"})
    response = connection.getresponse()
    assert response.status == 206
    parser = MultipartParser.from_content_type(response.getheader("Content-Type"))
    events = []
    while chunk := response.read1(4096):
        events += parser.feed(chunk)
    events += parser.close()
    ranges = [e.content_range for e in events if isinstance(e, PartStart)]
    data = FILES["dir/b.bin"]
    assert [(r.first, r.last, r.complete_length) for r in ranges] == [
        (0, 9, len(data)),
        (500000, 500099, len(data)),
        (len(data) - 7, len(data) - 1, len(data)),
    ]
    received = b"".join(e.data for e in events if isinstance(e, PartData))
    assert received == data[0:10] + data[500000:500100] + data[-7:]


@pytest.mark.skipif(shutil.which("nginx") is None and not os.path.exists("/usr/sbin/nginx"), reason="nginx is not installed")
def test_parser_reads_nginx_multirange_response(tmp_path):
    """Interop with a peer we did not write: nginx's own multipart/byteranges."""
    from axon.bench import nginx, procs

    files = tmp_path / "files"
    files.mkdir()
    data = os.urandom(50_000)
    (files / "r.bin").write_bytes(data)
    port = procs.free_port()
    with procs.Group(tmp_path, cpus=None) as group:
        group.start(nginx.static_command(tmp_path / "nginx", port, files))
        procs.wait_ready(f"http://127.0.0.1:{port}/api/health", group)
        connection = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
        connection.request("GET", "/files/r.bin", headers={"Range": "bytes=0-9,1000-1999,-500"})
        response = connection.getresponse()
        assert response.status == 206
        parser = MultipartParser.from_content_type(response.getheader("Content-Type"))
        events = []
        while chunk := response.read(997):  # odd-sized reads: events must not depend on the split
            events += parser.feed(chunk)
        events += parser.close()
        connection.close()
    spans, current = [], None
    for event in events:
        if isinstance(event, PartStart):
            cr = event.content_range
            current = [(cr.first, cr.last + 1), bytearray()]
            spans.append(current)
        elif isinstance(event, PartData):
            current[1] += event.data
    assert [(span, bytes(body)) for span, body in spans] == [
        (span, data[span[0] : span[1]]) for span in [(0, 10), (1000, 2000), (49_500, 50_000)]
    ]
