"""The README's freshness table, over real sockets, for what neither a stat nor inotify sees.

A file written a second time through the same shared ``mmap`` (before the kernel writes the page
back) changes neither its size nor a time, and raises no inotify event: only its bytes tell. The
open-file cache keeps a small file's bytes, so its revalidation (every ``--file-cache-valid``
seconds of use) reads them again; a request that starts after the window gets the new bytes, in
``/files/``, a multipart batch, a zip (with the CRC-32 of exactly those bytes: ``unzip -t``) and a
tar, remembered heads included. Under gunicorn (no open-file cache) the bytes are read for every
request and a small file's kept CRC-32 is read again on the same window.
"""

from __future__ import annotations

import io
import mmap
import os
import shutil
import subprocess
import sys
import tarfile
import tempfile
import time
import urllib.request
import zipfile
from contextlib import contextmanager
from pathlib import Path

import pytest
from conftest import Client, batch_target, parse_multipart, shared_app

sys.path.insert(0, str(Path(__file__).parents[1] / "client"))
from live_server import live_server, runtime_available  # noqa: E402

from axon.app import App

SIZE = 4096
VALID = 0.5  # --file-cache-valid in the tests that may set it: short, to keep them fast
OLD, NEW = b"o" * SIZE, b"n" * SIZE


@contextmanager
def mapped(path: Path, content: bytes):
    """``path`` written with ``content`` through a shared mapping (``mmap.mmap(fd, 0)`` is
    MAP_SHARED), which stays open for the test to write through again."""
    path.write_bytes(bytes(len(content)))
    fd = os.open(path, os.O_RDWR)
    mapping = mmap.mmap(fd, 0)
    try:
        mapping[:] = content
        yield mapping
    finally:
        mapping.close()
        os.close(fd)


def rewrite(path: Path, mapping: mmap.mmap, content: bytes) -> None:
    """Write ``content`` through the same mapping; the case under test is one where the kernel
    changed no time and size (the page still dirty and writable since the first write)."""
    before = os.stat(path)
    mapping[:] = content
    after = os.stat(path)
    if (after.st_size, after.st_mtime_ns, after.st_ctime_ns) != (before.st_size, before.st_mtime_ns, before.st_ctime_ns):
        pytest.skip("the kernel wrote the page back between the two writes: the second moved the times")


def zip_members(body: bytes) -> dict[str, bytes]:
    """A zip's members, each checked against its CRC-32 (``testzip``; ``unzip -t`` where installed)."""
    if shutil.which("unzip"):
        with tempfile.NamedTemporaryFile(suffix=".zip") as f:
            f.write(body)
            f.flush()
            tested = subprocess.run(["unzip", "-t", f.name], capture_output=True, timeout=30)
        assert tested.returncode == 0, tested.stdout.decode(errors="replace")
    with zipfile.ZipFile(io.BytesIO(body)) as z:
        assert z.testzip() is None  # every member's bytes match its CRC-32
        return {name: z.read(name) for name in z.namelist()}


def tar_members(body: bytes) -> dict[str, bytes]:
    with tarfile.open(fileobj=io.BytesIO(body)) as t:
        return {m.name: t.extractfile(m).read() for m in t.getmembers()}  # type: ignore[union-attr]


def _served_app(root: Path) -> App:
    """An App over ``root`` as axon serve builds it: its open files shared, revalidated every ``VALID`` s."""
    from axon.server.config import ServerConfig

    return shared_app(root, ServerConfig(port=0, file_cache_valid=VALID))


def _mapped_root(tmp_path: Path) -> tuple[Path, Path]:
    root = tmp_path / "mapped"
    root.mkdir()
    return root, root / "m.bin"


@pytest.fixture
def settled(monkeypatch):
    """Files count as settled at once in this process (where the ThreadServer runs): their bytes
    are kept from the first use, without waiting ``SETTLED_NS``."""
    from axon.storage import file_cache

    monkeypatch.setattr(file_cache, "SETTLED_NS", -(10**18))


def test_bytes_rewritten_through_a_shared_mmap_are_served_within_the_window(serve, tmp_path, settled) -> None:
    root, path = _mapped_root(tmp_path)
    (root / "other.txt").write_bytes(b"other\n")
    server = serve(_served_app(root), file_cache_valid=VALID)
    query = batch_target(["m.bin", "other.txt"]).partition("?")[2]
    targets = ["/files/m.bin", f"/api/stream-files?{query}", f"/api/stream-files.zip?{query}",
               f"/api/stream-files.tar?{query}"]

    def served(c: Client) -> list[bytes]:
        """What each target answers for m.bin (asked twice: the second is a remembered head)."""
        got = []
        for _ in range(2):
            files, multipart, zipped, tarred = (c.get(t) for t in targets)
            assert [r.status for r in (files, multipart, zipped, tarred)] == [200] * 4
            got += [files.body, parse_multipart(multipart)[0][1], zip_members(zipped.body)["m.bin"],
                    tar_members(tarred.body)["m.bin"]]
        return got

    with mapped(path, OLD) as mapping, Client(server.port) as c:
        for _ in range(4):  # bytes kept, the kernel's watch added, the stat trusted, heads remembered
            assert served(c) == [OLD] * 8
        rewrite(path, mapping, NEW)
        time.sleep(VALID + 0.1)
        assert served(c) == [NEW] * 8


def test_a_zip_entry_of_kept_bytes_declares_their_crc_whatever_the_crc_cache_holds(serve, tmp_path, settled) -> None:
    """The CRC-32 of bytes in memory is computed from exactly them: here the store's CRC cache
    holds the first write's CRC for the same version (size and times), with its own window out
    of the way, and only the kept bytes' own CRC can make the zip right."""
    root, path = _mapped_root(tmp_path)
    app = _served_app(root)
    server = serve(app, file_cache_valid=VALID)
    crcs = app.store.store.crcs  # the directory's own, behind the shared files
    crcs.settled_ns, crcs.valid = -(10**18), 3600.0  # kept at once, and never read again
    with mapped(path, OLD) as mapping, Client(server.port) as c:
        for _ in range(4):  # the first CRC read by offset (kept by version), then the bytes kept
            assert zip_members(c.get("/api/stream-files.zip?f=m.bin").body) == {"m.bin": OLD}
        rewrite(path, mapping, NEW)
        time.sleep(VALID + 0.1)
        for _ in range(2):
            assert zip_members(c.get("/api/stream-files.zip?f=m.bin").body) == {"m.bin": NEW}


@pytest.mark.slow  # waits for the file to settle (2 s) and for the window
def test_axon_serve_zips_rewritten_bytes_with_their_crc(spawn, tmp_path) -> None:
    """The real command, as a user runs it: the file settles (its bytes are kept), is served,
    rewritten through the mapping, and a zip asked after the window passes ``unzip -t``."""
    root, path = _mapped_root(tmp_path)
    with mapped(path, OLD) as mapping:
        time.sleep(2.1)  # SETTLED_NS: the cache keeps the bytes of a file whose last change is this old
        server = spawn("--workers", "1", "--file-cache-valid", "1", serve_root=root)
        with Client(server.port) as c:
            for _ in range(5):
                assert zip_members(c.get("/api/stream-files.zip?f=m.bin").body) == {"m.bin": OLD}
                assert c.get("/files/m.bin").body == OLD
            rewrite(path, mapping, NEW)
            time.sleep(1.2)
            for _ in range(3):
                assert zip_members(c.get("/api/stream-files.zip?f=m.bin").body) == {"m.bin": NEW}
                assert c.get("/files/m.bin").body == NEW


@pytest.mark.slow  # gunicorn, a settled file and the default 5 s window
def test_gunicorn_zips_rewritten_bytes_with_their_crc_within_the_window(tmp_path) -> None:
    """WSGI reads a file's bytes for each response; the CRC-32 of a small file is kept per
    version, and read again once ``FILE_CACHE_VALID`` (5 s) old, so a zip asked after that
    passes ``unzip -t``."""
    from axon.storage import FILE_CACHE_VALID

    why = runtime_available("gunicorn")
    if why:
        pytest.skip(why)
    root, path = _mapped_root(tmp_path)
    with mapped(path, OLD) as mapping:
        time.sleep(2.1)  # settled: the CRC-32 read now is kept for the file's version
        with live_server("gunicorn", root) as base:
            def zipped() -> dict[str, bytes]:
                with urllib.request.urlopen(base + "/api/stream-files.zip?f=m.bin", timeout=10) as r:
                    return zip_members(r.read())

            assert zipped() == {"m.bin": OLD}
            rewrite(path, mapping, NEW)
            time.sleep(FILE_CACHE_VALID + 0.2)
            for _ in range(3):
                assert zipped() == {"m.bin": NEW}


@pytest.mark.slow  # a server process of its own, and the window
def test_permissions_revoked_are_refused_within_the_window(spawn) -> None:
    """``chmod 000`` leaves a cached descriptor readable (as nginx's are): the revalidation opens
    the path again and is refused, so requests from the window on get a 403. Root reads a file
    of mode 000 anyway (CAP_DAC_OVERRIDE), so as root the server runs as ``nobody`` (setpriv),
    where the mode is what decides."""
    wrap: list[str] = []
    if os.geteuid() == 0:
        if not shutil.which("setpriv"):
            pytest.skip("root reads a file of mode 000; setpriv (to serve as nobody) is not installed")
        wrap = ["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups"]
    root = Path(tempfile.mkdtemp(prefix="axon-perm-"))  # outside pytest's 0700 tree: nobody must reach it
    try:
        root.chmod(0o755)
        path = root / "p.txt"
        path.write_bytes(b"readable\n")
        path.chmod(0o644)
        server = spawn("--workers", "1", "--file-cache-valid", "1", serve_root=root, wrap=wrap)
        with Client(server.port) as c:
            for _ in range(5):  # cached, bytes kept, watched, trusted
                assert c.get("/files/p.txt").body == b"readable\n"
            path.chmod(0)
            time.sleep(1.2)
            refused = c.get("/files/p.txt")
            assert refused.status == 403 and refused.json()["error"]["paths"] == ["p.txt"]
            assert c.get("/api/stream-files?f=p.txt").status == 403
    finally:
        shutil.rmtree(root, ignore_errors=True)
