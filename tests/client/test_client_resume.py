"""Resumable batches over real sockets: Axon under gunicorn (WSGI), uvicorn (ASGI) and its own server.

The server side: a batch has a stable strong ETag, and a ``Range`` on it is the full body
sliced, byte for byte, wherever the range falls. The client side: a connection cut by a proxy
at an exact byte (inside a part's data, its headers, a boundary, the closing delimiter) is
resumed by the next ``fetch(..., resume=True)`` and ends with files identical to the source; a
file changed in between brings the whole new batch.
"""

from __future__ import annotations

import argparse
import asyncio
import http.client
import os
from pathlib import Path
from urllib.parse import quote

import pytest
from multipart_support import CONTENT_TYPE, axon_body
from cut_proxy import CutProxy
from live_server import LiveAxon, make_files
from scripted_server import Reply, ScriptedServer

from axon.client import FetchedFile, FetchError, UnsafePathError, afetch, fetch
from axon.client import cli as fetch_cli
from axon.client.journal import JOURNAL_DIR
from axon.http.multipart_parser import boundary_from_content_type
from axon.batchclient.request import build_request


def raw(live: LiveAxon, files: list[str], headers: dict[str, str] | None = None, method: str = "GET"):
    """(status, headers, body) of one signed batch request, read whole."""
    request = build_request(live.url, files, headers=headers, secret=live.secret)
    connection = http.client.HTTPConnection(request.host, request.port, timeout=10)
    try:
        connection.request(method, request.target, request.body or None, dict(request.headers))
        response = connection.getresponse()
        return response.status, {k.lower(): v for k, v in response.getheaders()}, response.read()
    finally:
        connection.close()


def listing(directory: Path) -> set[str]:
    return {str(p.relative_to(directory)) for p in directory.rglob("*") if not p.is_dir()}


class Recorder:
    """A fetch's progress: the Content-Length of each answer and the files written."""

    def __init__(self) -> None:
        self.lengths: list[int | None] = []
        self.files: list[str] = []

    def response_started(self, content_length: int | None) -> None:
        self.lengths.append(content_length)

    def data_received(self, nbytes: int) -> None:
        pass

    def file_written(self, file: FetchedFile) -> None:
        self.files.append(file.path)


# -- the server: ETag, Range and If-Range on a batch


def test_range_on_a_batch_is_the_body_sliced(live_axon: LiveAxon) -> None:
    files = make_files(live_axon, "ranges")
    names = list(files)
    status, head, full = raw(live_axon, names)
    assert status == 200 and head["accept-ranges"] == "bytes"
    etag = head["etag"]
    assert etag.startswith('"') and len(etag) >= 34
    boundary = boundary_from_content_type(head["content-type"]).encode()
    assert raw(live_axon, names)[1]["etag"] == etag  # the same batch, the same bytes
    second_part = full.index(b"Content-Location: /files/" + quote(names[1]).encode())
    closing = full.rindex(b"\r\n--" + boundary + b"--")
    spans = {
        "inside part headers": (second_part - 7, second_part + 30),
        "inside file data": (1000, 250_000),
        "across a boundary": (full.index(files[names[0]]) + 299_990, second_part + 3),
        "inside the closing delimiter": (closing + 5, len(full) - 2),
        "to the end": (closing - 10, None),
        "one byte": (0, 0),
    }
    for what, (first, last) in spans.items():
        spec = f"bytes={first}-{'' if last is None else last}"
        status, head, body = raw(live_axon, names, {"Range": spec, "If-Range": etag})
        stop = len(full) if last is None else last + 1
        assert status == 206, what
        assert head["content-range"] == f"bytes {first}-{stop - 1}/{len(full)}", what
        assert body == full[first:stop], what
    # A stale If-Range gets the whole (current) batch; so do several ranges at once.
    assert raw(live_axon, names, {"Range": "bytes=10-", "If-Range": '"stale"'})[:3:2] == (200, full)
    assert raw(live_axon, names, {"Range": "bytes=0-9,100-109"})[:3:2] == (200, full)
    status, head, body = raw(live_axon, names, {"Range": f"bytes={len(full)}-"})
    assert status == 416 and head["content-range"] == f"bytes */{len(full)}"
    status, head, body = raw(live_axon, names, {"Range": "bytes=5-"}, method="HEAD")
    assert status == 206 and head["content-length"] == str(len(full) - 5) and body == b""


def test_range_on_one_whole_file_of_a_batch(live_axon: LiveAxon) -> None:
    # A slice that is exactly one whole file: gunicorn's file_wrapper path must send just it.
    data = os.urandom(70_000)
    live_axon.put("single/only.bin", data)
    status, head, full = raw(live_axon, ["single/only.bin"])
    start = full.index(data)
    status, head, body = raw(live_axon, ["single/only.bin"], {"Range": f"bytes={start}-{start + len(data) - 1}"})
    assert status == 206 and body == data


# -- the client: resume where the connection was cut


def cut_points(full: bytes, boundary: bytes, files: dict[str, bytes]) -> dict[str, int]:
    names = list(files)
    second_part = full.index(b"Content-Location: /files/" + quote(names[1]).encode())
    delimiter_after_first = full.index(files[names[0]]) + len(files[names[0]])
    return {
        "first byte": 1,
        "inside part headers": second_part + 9,
        "inside file data": full.index(files[names[1]]) + 77_777,
        "inside a boundary": delimiter_after_first + 2 + len(boundary) // 2,
        "inside the closing delimiter": full.rindex(b"--" + boundary + b"--") + 4,
    }


@pytest.mark.parametrize(
    "where",
    ["first byte", "inside part headers", "inside file data", "inside a boundary", "inside the closing delimiter"],
)
def test_fetch_resumes_where_the_connection_was_cut(live_axon: LiveAxon, tmp_path: Path, where: str) -> None:
    files = make_files(live_axon, "cut-" + where.replace(" ", "-"))
    names = list(files)
    _, head, full = raw(live_axon, names)
    cut = cut_points(full, boundary_from_content_type(head["content-type"]).encode(), files)[where]
    dest = tmp_path / "dest"
    with CutProxy(live_axon.url) as proxy:
        proxy.cuts = [cut]
        with pytest.raises(FetchError):
            fetch(proxy.url, names, dest, resume=True, secret=live_axon.secret)
        assert (dest / JOURNAL_DIR).is_dir()
        progress = Recorder()
        result = fetch(proxy.url, names, dest, resume=True, secret=live_axon.secret, progress=progress)
    assert progress.lengths == [len(full) - cut]  # only the rest was sent
    assert sorted(f.path for f in result.files) == sorted(names)
    assert listing(dest) == set(names)  # no journal, no temporary file left
    for path, data in files.items():
        assert (dest / path).read_bytes() == data


def test_afetch_resumes_after_two_cuts(live_axon: LiveAxon, tmp_path: Path) -> None:
    files = make_files(live_axon, "two-cuts")
    names = list(files)
    _, _, full = raw(live_axon, names)
    dest = tmp_path / "dest"
    with CutProxy(live_axon.url) as proxy:
        proxy.cuts = [123_456, 200_000]  # the second cut is inside the resumed answer
        for _ in range(2):
            with pytest.raises(FetchError):
                asyncio.run(afetch(proxy.url, names, dest, resume=True, secret=live_axon.secret))
        progress = Recorder()
        asyncio.run(afetch(proxy.url, names, dest, resume=True, secret=live_axon.secret, progress=progress))
    assert progress.lengths == [len(full) - 323_456]
    assert listing(dest) == set(names)
    assert all((dest / p).read_bytes() == d for p, d in files.items())


def rewrite_same_size(path: Path) -> bytes:
    data = os.urandom(path.stat().st_size)
    mtime = path.stat().st_mtime_ns
    path.write_bytes(data)
    os.utime(path, ns=(mtime + 10**9, mtime + 10**9))  # a coarse clock must not hide the change
    return data


def replace_inode(path: Path) -> bytes:
    data = os.urandom(path.stat().st_size + 3)
    fresh = path.with_name(path.name + ".new")
    fresh.write_bytes(data)
    os.replace(fresh, path)
    return data


def touch(path: Path) -> bytes:
    os.utime(path, ns=(path.stat().st_mtime_ns + 10**9,) * 2)
    return path.read_bytes()


@pytest.mark.parametrize("change", [rewrite_same_size, replace_inode, touch])
@pytest.mark.parametrize("which", [0, 1], ids=["finished-file", "file-in-progress"])
def test_a_file_changed_before_the_resume_brings_the_whole_new_batch(
    live_axon: LiveAxon, tmp_path: Path, change, which: int
) -> None:
    files = make_files(live_axon, f"changed-{change.__name__}-{which}")
    names = list(files)
    _, _, full = raw(live_axon, names)
    dest = tmp_path / "dest"
    with CutProxy(live_axon.url) as proxy:
        proxy.cuts = [full.index(files[names[1]]) + 1000]  # the first file whole, the second begun
        with pytest.raises(FetchError):
            fetch(proxy.url, names, dest, resume=True, secret=live_axon.secret)
        assert listing(dest) - {names[0]}  # a partial part and its journal are kept
        files[names[which]] = change(live_axon.root / names[which])
        _, _, new_full = raw(live_axon, names)
        progress = Recorder()
        fetch(proxy.url, names, dest, resume=True, secret=live_axon.secret, progress=progress)
    assert progress.lengths == [len(new_full)]  # If-Range failed: the whole new batch came
    assert listing(dest) == set(names)
    for path, data in files.items():
        assert (dest / path).read_bytes() == data


def test_axon_fetch_command_resumes(live_axon: LiveAxon, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    files = make_files(live_axon, "cli")
    names = list(files)
    monkeypatch.setenv("AXON_SECRET", live_axon.secret)

    def run(url: str) -> int:
        parser = argparse.ArgumentParser(prog="axon")
        fetch_cli.add_parser(parser.add_subparsers(dest="command", required=True))
        args = parser.parse_args(["fetch", url, *names, "-o", str(tmp_path / "dest"), "--no-progress"])
        return args.func(args)

    with CutProxy(live_axon.url) as proxy:
        proxy.cuts = [250_000]
        assert run(proxy.url) == 1
        assert run(proxy.url) == 0
    assert listing(tmp_path / "dest") == set(names)
    assert all((tmp_path / "dest" / p).read_bytes() == d for p, d in files.items())


# -- the client against a scripted server that lies


def test_a_hostile_path_in_a_resumed_answer_is_refused(http_server: ScriptedServer, tmp_path: Path) -> None:

    one = b"1" * 5000
    honest = axon_body([("one.bin", one), ("xy/b.bin", b"two")])
    evil = axon_body([("one.bin", one), ("../b.bin", b"two")])  # same length, same first part
    offset = honest.index(one) + 100
    etag = '"v1"'

    def reply(request):
        if "range" not in request.headers:
            return Reply(200, [("Content-Type", CONTENT_TYPE), ("ETag", etag)], honest, cut_after=offset)
        assert request.headers["range"] == f"bytes={offset}-" and request.headers["if-range"] == etag
        headers = [("Content-Type", CONTENT_TYPE), ("ETag", etag),
                   ("Content-Range", f"bytes {offset}-{len(evil) - 1}/{len(evil)}")]
        return Reply(206, headers, evil[offset:])

    http_server.reply = reply
    dest = tmp_path / "sandbox" / "dest"
    with pytest.raises(FetchError):
        fetch(http_server.url, ["one.bin", "xy/b.bin"], dest, resume=True)
    assert (dest / JOURNAL_DIR).is_dir()
    with pytest.raises(UnsafePathError):
        fetch(http_server.url, ["one.bin", "xy/b.bin"], dest, resume=True)
    assert listing(tmp_path / "sandbox") == {"dest/one.bin"}  # no journal, nothing evil, nothing outside


def test_without_an_etag_nothing_is_saved(http_server: ScriptedServer, tmp_path: Path) -> None:
    body = axon_body([("one.bin", b"1" * 5000)])
    http_server.reply = lambda request: Reply(200, [("Content-Type", CONTENT_TYPE)], body, cut_after=3000)
    with pytest.raises(FetchError):
        fetch(http_server.url, ["one.bin"], tmp_path / "dest", resume=True)
    assert listing(tmp_path / "dest") == set()
    assert "range" not in http_server.requests[-1].headers
