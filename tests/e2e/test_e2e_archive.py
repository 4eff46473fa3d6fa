"""Batches as zip and tar over real sockets, on every runtime: at their own URLs and by
``Accept``, read back by zipfile, tarfile and the tools nobody here wrote, resumed with Range."""

from __future__ import annotations

import io
import subprocess
import tarfile
import zipfile
from urllib.parse import quote

import pytest

from e2e_wire import HOSTILE_NAME, JSON_HEADERS, UNICODE_NAME, check_length, files_body

pytestmark = pytest.mark.timeout(60)

PATHS = [
    "examples/a.bin", "examples/b.bin", "deep/dir/c.bin", "examples/empty.bin",
    f"examples/{HOSTILE_NAME}", f"examples/{UNICODE_NAME}", "examples/./small.txt", "examples/a.bin",
]
#: As the archives name them: the requested path, normalized.
NAMES = [p.replace("/./", "/") for p in PATHS]


def target(suffix: str, paths=PATHS) -> str:
    return f"/api/stream-files{suffix}?" + "&".join(f"f{i}={quote(p, safe='/')}" for i, p in enumerate(paths))


def expected(served_root) -> list[bytes]:
    return [(served_root / p).read_bytes() for p in PATHS]


def whole(server, suffix: str):
    resp = server.get(target(suffix))
    assert resp.status == 200, resp.describe()
    check_length(resp)
    return resp


def run(tmp_path, name: str, body: bytes, *argv: str) -> str:
    path = tmp_path / name
    path.write_bytes(body)
    done = subprocess.run([*argv, str(path)], capture_output=True, timeout=60)
    assert done.returncode == 0, (argv, done.stdout, done.stderr)
    return done.stdout.decode("utf-8", "replace")


def test_zip_by_url(server, served_root, tmp_path):
    resp = whole(server, ".zip")
    assert resp.header("content-type") == "application/zip"
    assert resp.header("content-disposition") == 'attachment; filename="batch.zip"'
    assert resp.header("vary") is None and resp.header("etag")
    with zipfile.ZipFile(io.BytesIO(resp.body)) as archive:
        assert archive.testzip() is None
        assert archive.namelist() == NAMES
        assert [archive.read(i) for i in archive.infolist()] == expected(served_root)
    assert "No errors detected" in run(tmp_path, "batch.zip", resp.body, "unzip", "-t")
    assert run(tmp_path, "batch.zip", resp.body, "bsdtar", "-tvf").count("\n") == len(PATHS)


def test_tar_by_url(server, served_root, tmp_path):
    resp = whole(server, ".tar")
    assert resp.header("content-type") == "application/x-tar"
    assert resp.header("content-disposition") == 'attachment; filename="batch.tar"'
    with tarfile.open(fileobj=io.BytesIO(resp.body)) as archive:
        assert archive.getnames() == NAMES
        assert [archive.extractfile(m).read() for m in archive.getmembers()] == expected(served_root)
    for tool in ("tar", "bsdtar"):
        assert run(tmp_path, "batch.tar", resp.body, tool, "-tvf").count("\n") == len(PATHS)


@pytest.mark.parametrize("suffix", [".zip", ".tar"])
def test_post_is_the_same_archive(server, suffix):
    get = whole(server, suffix)
    post = server.request("POST", f"/api/stream-files{suffix}", JSON_HEADERS, files_body(PATHS))
    assert post.status == 200, post.describe()
    assert post.body == get.body and post.header("etag") == get.header("etag")


@pytest.mark.parametrize("accept, suffix", [("application/zip", ".zip"), ("application/x-tar;q=0.9, */*;q=0.1", ".tar")])
def test_accept_chooses_the_format(server, accept, suffix):
    by_url = whole(server, suffix)
    resp = server.get(target(""), [("Accept", accept)])
    assert resp.status == 200, resp.describe()
    assert resp.header("vary") == "Accept"
    assert resp.body == by_url.body and resp.header("etag") == by_url.header("etag")


def test_no_accept_is_still_multipart_and_varies(server):
    resp = server.get(target(""))
    assert resp.status == 200 and resp.header("content-type").startswith("multipart/mixed; boundary=")
    assert resp.header("vary") == "Accept"


def test_none_acceptable_is_406_json(server):
    resp = server.get(target(""), [("Accept", "text/html")])
    assert resp.error(406)["code"] == "not_acceptable"
    assert resp.header("vary") == "Accept"


@pytest.mark.parametrize("suffix", [".zip", ".tar"])
def test_head_matches_get(server, suffix):
    get = whole(server, suffix)
    head = server.head(target(suffix))
    assert head.status == 200, head.describe()
    assert head.body == b"" and head.trailing == b""
    for name in ("content-type", "content-length", "etag", "accept-ranges", "content-disposition"):
        assert head.header(name) == get.header(name), name


@pytest.mark.parametrize("suffix", [".zip", ".tar"])
def test_range_resumes_to_identical_bytes(server, suffix):
    full = whole(server, suffix)
    etag, body = full.header("etag"), full.body
    for cut in (1, 700, len(body) // 2, len(body) - 1):
        resp = server.get(target(suffix), [("Range", f"bytes={cut}-"), ("If-Range", etag)])
        assert resp.status == 206, resp.describe()
        assert resp.header("content-range") == f"bytes {cut}-{len(body) - 1}/{len(body)}"
        check_length(resp)
        assert body[:cut] + resp.body == body
    stale = server.get(target(suffix), [("Range", "bytes=100-"), ("If-Range", '"stale"')])
    assert stale.status == 200 and stale.body == body


@pytest.mark.parametrize("suffix", [".zip", ".tar", ""])
def test_missing_file_is_404_before_the_first_byte(server, suffix):
    headers = [("Accept", "application/zip")] if suffix == "" else []
    resp = server.get(target(suffix, ["examples/a.bin", "examples/nope.bin"]), headers)
    err = resp.error(404)
    assert err["paths"] == ["examples/nope.bin"]
