"""``curl -C -`` resumes an interrupted zip or tar batch to identical bytes: real curl, against Axon
under gunicorn (WSGI), uvicorn (ASGI) and its own server, the download cut by a proxy part way.

curl's ``-C -`` sends ``Range: bytes=<size of the file it has>-`` without ``If-Range``; the
batch's bytes stay the same as long as its files do (its ETag names their versions), so the rest
it gets fits what it had."""

from __future__ import annotations

import io
import os
import shutil
import subprocess
import tarfile
import zipfile
from pathlib import Path

import pytest
from cut_proxy import CutProxy
from live_server import LiveAxon

from axon.batchclient.request import build_request

pytestmark = pytest.mark.skipif(shutil.which("curl") is None, reason="curl is not installed")


def curl(*argv: str) -> subprocess.CompletedProcess:
    return subprocess.run(["curl", "--silent", "--show-error", *argv], capture_output=True, timeout=60)


@pytest.mark.parametrize("fmt", ["zip", "tar"])
def test_curl_continues_a_cut_archive_to_identical_bytes(live_axon: LiveAxon, tmp_path: Path, fmt: str) -> None:
    files = {f"curl-{fmt}/one.bin": os.urandom(400_000), f"curl-{fmt}/two é.bin": os.urandom(250_003)}
    for path, data in files.items():
        live_axon.put(path, data)
    target = build_request(live_axon.url, list(files), secret=live_axon.secret, fmt=fmt).target
    whole, resumed = tmp_path / f"whole.{fmt}", tmp_path / f"resumed.{fmt}"
    assert curl("-o", str(whole), "--fail", live_axon.url + target).returncode == 0

    with CutProxy(live_axon.url) as proxy:
        proxy.cuts = [300_000]  # inside the first file's bytes
        cut = curl("-o", str(resumed), proxy.url + target)
        assert cut.returncode == 18, cut.stderr  # "transfer closed with bytes remaining"
        assert resumed.stat().st_size == 300_000
        # The same command with -C -: Range from the size on disk, appended to the same file.
        done = curl("-C", "-", "-o", str(resumed), "--fail", "--write-out", "%{http_code}", proxy.url + target)
    assert done.returncode == 0, done.stderr
    assert done.stdout == b"206"
    assert resumed.read_bytes() == whole.read_bytes()
    body = io.BytesIO(resumed.read_bytes())
    if fmt == "zip":
        with zipfile.ZipFile(body) as archive:
            assert archive.testzip() is None
            assert {n: archive.read(n) for n in archive.namelist()} == files
    else:
        with tarfile.open(fileobj=body) as archive:
            assert {m.name: archive.extractfile(m).read() for m in archive.getmembers()} == files  # type: ignore[union-attr]
