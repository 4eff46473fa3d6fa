"""axon:// against a server that answers wrong on purpose (a scripted server on a real socket):
a part that is not the file asked for, a slice that is not the range asked for, a batch cut short.
Each is an OSError naming what went wrong; no bytes are ever filed under the wrong name."""

from __future__ import annotations

import json

import pytest
from multipart_support import CONTENT_TYPE, axon_headers, build_body
from scripted_server import Recorded, Reply, ScriptedServer

from axon.fsspec import AxonFileSystem

@pytest.fixture
def http_server():
    with ScriptedServer() as server:
        yield server


LIMITS = json.dumps({"max_files": 1000, "max_body_bytes": 1 << 20}).encode()


def serve(server: ScriptedServer, batch) -> str:
    """``server`` answers the limits, and every batch with ``batch(request) -> Reply``."""
    server.reply = lambda request: Reply(200, [("Content-Type", "application/json")], LIMITS) \
        if request.path == "/api/limits" else batch(request)
    return server.url.removeprefix("http://")


def multipart(parts) -> Reply:
    return Reply(200, [("Content-Type", CONTENT_TYPE)], build_body(parts))


def test_a_part_for_another_file_is_an_error(http_server: ScriptedServer):
    swapped = [(axon_headers("b.bin", b"B"), b"B"), (axon_headers("a.bin", b"A"), b"A")]
    netloc = serve(http_server, lambda r: multipart(swapped))
    with pytest.raises(OSError, match=r"part 0 \('a.bin'\): Content-Location names 'b.bin', not 'a.bin'"):
        AxonFileSystem(skip_instance_cache=True).cat([f"{netloc}/a.bin", f"{netloc}/b.bin"])


def test_a_slice_that_is_not_the_range_asked_is_an_error(http_server: ScriptedServer):
    def batch(request: Recorded) -> Reply:
        assert request.files == [{"path": "a.bin", "offset": 10, "length": 5}]
        return multipart([(axon_headers("a.bin", b"12345") + [("Content-Range", "bytes 11-15/100")], b"12345")])

    netloc = serve(http_server, batch)
    with pytest.raises(OSError, match="asked offset 10, length 5; the part holds bytes 11-15/100"):
        AxonFileSystem(skip_instance_cache=True).cat_ranges([f"{netloc}/a.bin"], [10], [15], on_error="raise")


def test_a_batch_cut_short_is_an_error(http_server: ScriptedServer):
    body = build_body([(axon_headers("a.bin", b"A" * 1000), b"A" * 1000)])
    netloc = serve(http_server, lambda r: Reply(200, [("Content-Type", CONTENT_TYPE)], body, cut_after=500))
    with pytest.raises(OSError, match="cut short"):
        AxonFileSystem(skip_instance_cache=True).cat([f"{netloc}/a.bin"])


def test_get_leaves_no_file_from_a_batch_cut_short(http_server: ScriptedServer, tmp_path):
    whole = (axon_headers("a.bin", b"A" * 10), b"A" * 10)
    body = build_body([whole, (axon_headers("b.bin", b"B" * 1000), b"B" * 1000)])
    cut = Reply(200, [("Content-Type", CONTENT_TYPE)], body, cut_after=len(body) - 600)
    netloc = serve(http_server, lambda r: cut)
    with pytest.raises(OSError, match="cut short"):
        AxonFileSystem(skip_instance_cache=True).get([f"{netloc}/a.bin", f"{netloc}/b.bin"], str(tmp_path) + "/")
    assert [p.name for p in tmp_path.iterdir()] == ["a.bin"]  # whole; b.bin, cut, was removed
