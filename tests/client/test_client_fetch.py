"""fetch and afetch against a real HTTP server on a real socket, honest and hostile."""

from __future__ import annotations

import asyncio
import json
import os
import time
from collections.abc import Callable
from pathlib import Path

import pytest
from multipart_support import BOUNDARY, CONTENT_TYPE, axon_body, axon_headers, build_body, replaced
from scripted_server import Recorded, Reply, ScriptedServer

from axon.client import FetchError, FetchResult, MultipartError, UnsafePathError, afetch, fetch
from axon.batchclient.request import MAX_GET_TARGET, build_request

FILES = {
    "a.bin": b"alpha" * 1000,
    "dir/b.bin": bytes(range(256)) * 40,
    "dir/deeper/empty.bin": b"",
    "naïve résumé.txt": b"unicode name",
    "with space & more.bin": b"\r\n--" + BOUNDARY.encode() + b"-not-a-delimiter",
}

Fetcher = Callable[..., FetchResult]


def run_afetch(*args: object, **kwargs: object) -> FetchResult:
    return asyncio.run(afetch(*args, **kwargs))  # type: ignore[arg-type]


@pytest.fixture(params=[fetch, run_afetch], ids=["sync", "async"])
def fetcher(request: pytest.FixtureRequest) -> Fetcher:
    return request.param


@pytest.fixture
def served(tmp_path: Path) -> Path:
    """The files the scripted server serves, on disk under tmp_path/srv."""
    root = tmp_path / "srv"
    for path, data in FILES.items():
        (root / path).parent.mkdir(parents=True, exist_ok=True)
        (root / path).write_bytes(data)
    return root


def serve_files(root: Path, **reply: object) -> Callable[[Recorded], Reply]:
    """Answer each batch request as an Axon server would, from the files under ``root``."""

    def answer(request: Recorded) -> Reply:
        body = axon_body([(path, (root / path).read_bytes()) for path in request.files])
        return Reply(200, [("Content-Type", CONTENT_TYPE)], body, **reply)  # type: ignore[arg-type]

    return answer


def all_files(directory: Path) -> set[str]:
    return {str(p.relative_to(directory)) for p in directory.rglob("*") if not p.is_dir()}


# -- the honest server


def test_fetch_writes_every_file(
    fetcher: Fetcher, http_server: ScriptedServer, served: Path, tmp_path: Path
) -> None:
    http_server.reply = serve_files(served)
    dest = tmp_path / "dest"
    result = fetcher(http_server.url, list(FILES), dest)
    assert [f.path for f in result.files] == list(FILES)
    assert all_files(dest) == set(FILES)  # and no temporary files left
    for path, data in FILES.items():
        assert (dest / path).read_bytes() == data
    assert result.bytes_written == sum(map(len, FILES.values()))
    assert result.body_bytes > result.bytes_written and result.elapsed > 0
    (request,) = http_server.requests
    assert request.method == "GET" and request.path == "/api/stream-files"
    assert request.files == list(FILES)


def test_chunked_response(
    fetcher: Fetcher, http_server: ScriptedServer, served: Path, tmp_path: Path
) -> None:
    http_server.reply = serve_files(served, chunked=True)
    fetcher(http_server.url, ["a.bin", "dir/b.bin"], tmp_path / "dest")
    assert (tmp_path / "dest" / "dir/b.bin").read_bytes() == FILES["dir/b.bin"]


def test_long_lists_go_as_json_post(fetcher: Fetcher, http_server: ScriptedServer, tmp_path: Path) -> None:
    names = [f"file-with-a-long-name-{i:05d}.bin" for i in range(400)]
    assert len(build_request("http://h", names, method="GET").target) > MAX_GET_TARGET
    http_server.reply = lambda request: Reply(
        200, [("Content-Type", CONTENT_TYPE)], axon_body([(name, name.encode()) for name in request.files])
    )
    result = fetcher(http_server.url + "/", names, tmp_path / "dest")
    (request,) = http_server.requests
    assert request.method == "POST" and request.headers["content-type"] == "application/json"
    assert json.loads(request.body) == {"files": names}
    assert len(result.files) == 400 and (tmp_path / "dest" / names[-1]).read_bytes() == names[-1].encode()


def test_method_headers_and_url_prefix(
    fetcher: Fetcher, http_server: ScriptedServer, served: Path, tmp_path: Path
) -> None:
    http_server.reply = serve_files(served)
    fetcher(
        http_server.url + "/prefix/",
        ["a.bin"],
        tmp_path / "dest",
        method="POST",
        headers={"X-Signature": "s1"},
    )
    (request,) = http_server.requests
    assert request.method == "POST" and request.path == "/prefix/api/stream-files"
    assert request.headers["x-signature"] == "s1"


def test_repeated_paths_are_allowed(
    fetcher: Fetcher, http_server: ScriptedServer, served: Path, tmp_path: Path
) -> None:
    http_server.reply = serve_files(served)
    result = fetcher(http_server.url, ["a.bin", "a.bin"], tmp_path / "dest")
    assert len(result.files) == 2 and all_files(tmp_path / "dest") == {"a.bin"}


def test_content_location_is_decoded_once(
    fetcher: Fetcher, http_server: ScriptedServer, tmp_path: Path
) -> None:
    name = "%2e%2e/x.bin"  # a literal directory called "%2e%2e", not ".."
    http_server.reply = lambda request: Reply(
        200, [("Content-Type", CONTENT_TYPE)], axon_body([(name, b"ok")])
    )
    fetcher(http_server.url, [name], tmp_path / "dest")
    assert (tmp_path / "dest" / "%2e%2e" / "x.bin").read_bytes() == b"ok"


# -- refusals and failures


def test_json_error_raises_fetch_error(fetcher: Fetcher, http_server: ScriptedServer, tmp_path: Path) -> None:
    error = {"status": 404, "code": "not_found", "message": "no such file", "paths": ["missing.bin"]}
    http_server.reply = lambda request: Reply(
        404, [("Content-Type", "application/json")], json.dumps({"error": error}).encode()
    )
    with pytest.raises(FetchError, match="404 not_found: no such file") as caught:
        fetcher(http_server.url, ["missing.bin"], tmp_path / "dest")
    assert caught.value.status == 404 and caught.value.error == error
    assert caught.value.code == "not_found" and caught.value.paths == ["missing.bin"]
    assert not (tmp_path / "dest").exists()


def test_non_json_error(fetcher: Fetcher, http_server: ScriptedServer, tmp_path: Path) -> None:
    http_server.reply = lambda request: Reply(502, [("Content-Type", "text/html")], b"<h1>Bad Gateway</h1>")
    with pytest.raises(FetchError, match="502") as caught:
        fetcher(http_server.url, ["a.bin"], tmp_path / "dest")
    assert caught.value.status == 502 and caught.value.error is None and caught.value.code is None


def test_not_multipart(fetcher: Fetcher, http_server: ScriptedServer, tmp_path: Path) -> None:
    http_server.reply = lambda request: Reply(200, [("Content-Type", "application/json")], b"{}")
    with pytest.raises(FetchError, match="multipart"):
        fetcher(http_server.url, ["a.bin"], tmp_path / "dest")


@pytest.mark.parametrize(
    "cut, complete",
    [
        (-1, {"a.bin", "dir/b.bin"}),  # only the body's last byte is missing: both parts are whole
        (-20, {"a.bin"}),  # inside the closing delimiter
        (-200, {"a.bin"}),  # inside the second part
        (300, set()),  # inside the first part
        (5400, {"a.bin"}),  # inside the second part's headers
    ],
)
def test_truncated_response_leaves_no_final_file(
    fetcher: Fetcher, http_server: ScriptedServer, tmp_path: Path, cut: int, complete: set[str]
) -> None:
    files = ["a.bin", "dir/b.bin"]
    body = axon_body([(p, FILES[p]) for p in files])
    # Content-Length promises the whole body; the connection closes after part of it.
    http_server.reply = lambda request: Reply(
        200, [("Content-Type", CONTENT_TYPE)], body, cut_after=cut if cut > 0 else len(body) + cut
    )
    dest = tmp_path / "dest"
    with pytest.raises(FetchError):
        fetcher(http_server.url, files, dest)
    assert all_files(dest) == complete  # and no temporary file left behind
    for path in complete:
        assert (dest / path).read_bytes() == FILES[path]


def test_truncation_error_keeps_the_parser_error(
    http_server: ScriptedServer, served: Path, tmp_path: Path
) -> None:
    body = axon_body([("a.bin", FILES["a.bin"])])
    http_server.reply = lambda request: Reply(
        200, [("Content-Type", CONTENT_TYPE), ("Content-Length", "99999")], body, cut_after=body.index(b"alpha") + 20
    )
    with pytest.raises(FetchError) as caught:
        fetch(http_server.url, ["a.bin"], tmp_path / "dest")
    assert isinstance(caught.value.__cause__, MultipartError)
    assert "part 0 ('a.bin')" in str(caught.value)
    assert all_files(tmp_path / "dest") == set()


def test_part_longer_than_its_content_length(
    fetcher: Fetcher, http_server: ScriptedServer, tmp_path: Path
) -> None:
    body = build_body([(axon_headers("a.bin", b"hello", length=4), b"hello")])
    http_server.reply = lambda request: Reply(200, [("Content-Type", CONTENT_TYPE)], body)
    with pytest.raises(FetchError, match="longer or shorter"):
        fetcher(http_server.url, ["a.bin"], tmp_path / "dest")
    assert all_files(tmp_path / "dest") == set()


HOSTILE_LOCATIONS = [
    "../x", "/etc/x", "a/../../x", "a\x00b", "a\\b", "..%2Fx", "dir/../../../x",
    # the same under the /files/ prefix current servers send, and absolute paths it does not cover
    "/files/../x", "/files//etc/x", "/files/a/../../x", "/files/..%2Fx", "/files/a%00b", "/api/x", "/x",
]


@pytest.mark.parametrize("location", HOSTILE_LOCATIONS)
def test_hostile_content_location_is_refused(
    fetcher: Fetcher, http_server: ScriptedServer, tmp_path: Path, location: str
) -> None:
    # Raw header text, so "%2F" stays encoded: it decodes (once) to "../x" on the client.
    headers = replaced(axon_headers("x", b"evil"), "Content-Location", location.replace("\x00", "%00"))
    body = build_body([(axon_headers("a.bin", b"fine"), b"fine"), (headers, b"evil")])
    http_server.reply = lambda request: Reply(200, [("Content-Type", CONTENT_TYPE)], body)
    dest = tmp_path / "sandbox" / "dest"
    with pytest.raises(UnsafePathError):
        fetcher(http_server.url, ["a.bin", "x"], dest)
    assert all_files(tmp_path / "sandbox") == {"dest/a.bin"}  # nothing outside dest, nothing evil
    assert not Path("/etc/x").exists()


def test_symlink_in_destination_cannot_lead_out(
    fetcher: Fetcher, http_server: ScriptedServer, tmp_path: Path
) -> None:
    dest, outside = tmp_path / "dest", tmp_path / "outside"
    dest.mkdir()
    outside.mkdir()
    (dest / "link").symlink_to(outside)
    http_server.reply = lambda request: Reply(
        200, [("Content-Type", CONTENT_TYPE)], axon_body([("link/x", b"evil")])
    )
    with pytest.raises(UnsafePathError):
        fetcher(http_server.url, ["link/x"], dest)
    assert list(outside.iterdir()) == []


@pytest.mark.parametrize("legacy", [False, True], ids=["files-url", "older-server"])
def test_both_content_location_forms_land_where_requested(
    fetcher: Fetcher, http_server: ScriptedServer, tmp_path: Path, legacy: bool
) -> None:
    """A server of today (``/files/<path>``) and an older one (``<path>``) are both understood."""
    files = {
        "100%/x%41 %zz.bin": b"percent",
        "dir/with space.bin": b"space",
        "naïve/résumé ü 名前.txt": b"unicode",
        "files/a.bin": b"a directory called files",
    }
    body = axon_body(list(files.items()), legacy=legacy)
    assert (b"Content-Location: /files/" in body) is not legacy
    http_server.reply = lambda request: Reply(200, [("Content-Type", CONTENT_TYPE)], body)
    result = fetcher(http_server.url, list(files), tmp_path / "dest")
    assert [f.path for f in result.files] == list(files)
    assert {path: (tmp_path / "dest" / path).read_bytes() for path in files} == files


def test_a_full_url_as_content_location_is_not_taken_for_a_path(
    fetcher: Fetcher, http_server: ScriptedServer, tmp_path: Path
) -> None:
    headers = replaced(axon_headers("a.bin", b"x"), "Content-Location", "http://elsewhere/files/a.bin")
    http_server.reply = lambda request: Reply(200, [("Content-Type", CONTENT_TYPE)], build_body([(headers, b"x")]))
    with pytest.raises(FetchError, match="not requested"):
        fetcher(http_server.url, ["a.bin"], tmp_path / "dest")
    assert all_files(tmp_path) == set()


def test_unrequested_part_is_refused(fetcher: Fetcher, http_server: ScriptedServer, tmp_path: Path) -> None:
    body = axon_body([("a.bin", b"fine"), ("other.bin", b"unasked")])
    http_server.reply = lambda request: Reply(200, [("Content-Type", CONTENT_TYPE)], body)
    with pytest.raises(FetchError, match="not requested"):
        fetcher(http_server.url, ["a.bin"], tmp_path / "dest")
    assert all_files(tmp_path / "dest") == {"a.bin"}


def test_missing_part_is_an_error(fetcher: Fetcher, http_server: ScriptedServer, tmp_path: Path) -> None:
    http_server.reply = lambda request: Reply(
        200, [("Content-Type", CONTENT_TYPE)], axon_body([("a.bin", b"x")])
    )
    with pytest.raises(FetchError, match="did not send 1 requested file"):
        fetcher(http_server.url, ["a.bin", "b.bin"], tmp_path / "dest")


def test_part_without_content_length_is_refused(
    fetcher: Fetcher, http_server: ScriptedServer, tmp_path: Path
) -> None:
    headers = [(k, v) for k, v in axon_headers("a.bin", b"x") if k != "Content-Length"]
    http_server.reply = lambda request: Reply(
        200, [("Content-Type", CONTENT_TYPE)], build_body([(headers, b"x")])
    )
    with pytest.raises(FetchError, match="no Content-Length"):
        fetcher(http_server.url, ["a.bin"], tmp_path / "dest")


def test_unsafe_request_is_refused_before_sending(http_server: ScriptedServer, tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="refusing to request"):
        fetch(http_server.url, ["../etc/passwd"], tmp_path / "dest")
    assert http_server.requests == []


def test_connection_refused(fetcher: Fetcher, tmp_path: Path) -> None:
    with ScriptedServer() as server:
        url = server.url
    with pytest.raises(FetchError, match="failed while"):
        fetcher(url, ["a.bin"], tmp_path / "dest", timeout=5)


def test_stalled_server_times_out(fetcher: Fetcher, http_server: ScriptedServer, tmp_path: Path) -> None:
    body = axon_body([("a.bin", FILES["a.bin"])])
    http_server.reply = lambda request: Reply(
        200, [("Content-Type", CONTENT_TYPE)], body, cut_after=300, stall=3
    )
    started = time.monotonic()
    with pytest.raises(FetchError, match="receiving the response"):
        fetcher(http_server.url, ["a.bin"], tmp_path / "dest", timeout=0.3)
    assert time.monotonic() - started < 2
    assert all_files(tmp_path / "dest") == set()


def test_existing_file_is_replaced_only_when_the_new_one_is_whole(
    fetcher: Fetcher, http_server: ScriptedServer, tmp_path: Path
) -> None:
    dest = tmp_path / "dest"
    dest.mkdir()
    (dest / "a.bin").write_bytes(b"old")
    body = axon_body([("a.bin", b"new content")])
    http_server.reply = lambda request: Reply(
        200, [("Content-Type", CONTENT_TYPE)], body, cut_after=len(body) - 30
    )
    with pytest.raises(FetchError):
        fetcher(http_server.url, ["a.bin"], dest)
    assert (dest / "a.bin").read_bytes() == b"old"
    http_server.reply = lambda request: Reply(200, [("Content-Type", CONTENT_TYPE)], body)
    fetcher(http_server.url, ["a.bin"], dest)
    assert (dest / "a.bin").read_bytes() == b"new content"
    assert all_files(dest) == {"a.bin"}


def test_files_get_the_umask_permissions(http_server: ScriptedServer, tmp_path: Path) -> None:
    http_server.reply = lambda request: Reply(
        200, [("Content-Type", CONTENT_TYPE)], axon_body([("a.bin", b"x")])
    )
    old = os.umask(0o022)
    try:
        fetch(http_server.url, ["a.bin"], tmp_path / "dest")
    finally:
        os.umask(old)
    assert (tmp_path / "dest" / "a.bin").stat().st_mode & 0o777 == 0o644


def test_progress_reports(http_server: ScriptedServer, served: Path, tmp_path: Path) -> None:
    seen: dict[str, list] = {"started": [], "data": [], "files": []}

    class Recorder:
        def response_started(self, content_length: int | None) -> None:
            seen["started"].append(content_length)

        def data_received(self, nbytes: int) -> None:
            seen["data"].append(nbytes)

        def file_written(self, file: object) -> None:
            seen["files"].append(file)

    http_server.reply = serve_files(served)
    result = fetch(http_server.url, list(FILES), tmp_path / "dest", chunk_size=1000, progress=Recorder())
    assert seen["started"] == [result.body_bytes] and sum(seen["data"]) == result.body_bytes
    assert max(seen["data"]) <= 1000 and seen["files"] == result.files
