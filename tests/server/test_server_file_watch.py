"""Files served from memory while the kernel watches them (axon.storage.watch): every change made
before a request is sent is in that request's answer, over a real socket, as without the watch.

The files here count as settled at once (``SETTLED_NS`` patched in this process, where the
ThreadServer runs), so that their bytes are cached from the first hit and their stat trusted from
the third; each test then changes a file in a way only the kernel's event (or an ``fstat``) can
tell, and asks again.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from conftest import Client, batch_target, parse_multipart, shared_app



@pytest.fixture
def settled(monkeypatch):
    from axon.storage import file_cache

    monkeypatch.setattr(file_cache, "SETTLED_NS", -(10**18))


@pytest.fixture
def live_root(tmp_path: Path) -> Path:
    base = tmp_path / "live"
    base.mkdir()
    (base / "small.txt").write_bytes(b"version 1\n")
    (base / "other.txt").write_bytes(b"other\n")
    return base


def warm(c: Client, target: str = "/files/small.txt") -> None:
    for _ in range(5):  # the miss, the first read, the watch, the trusted stat, a trusted hit
        assert c.get(target).status == 200


def test_a_same_size_write_in_place_is_in_the_next_answer(serve, live_root, settled) -> None:
    server = serve(shared_app(live_root))
    path = live_root / "small.txt"
    with Client(server.port) as c:
        warm(c)
        warm(c, batch_target(["small.txt", "other.txt"]))
        st = os.stat(path)
        with open(path, "r+b") as f:
            f.write(b"VERSION 2\n")
        os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns))  # the mtime put back: the ETag must still move
        resp = c.get("/files/small.txt")
        assert resp.body == b"VERSION 2\n"
        assert parse_multipart(c.get(batch_target(["small.txt", "other.txt"])))[0][1] == b"VERSION 2\n"


def test_a_truncated_appended_or_deleted_file_is_in_the_next_answer(serve, live_root, settled) -> None:
    server = serve(shared_app(live_root))
    path = live_root / "small.txt"
    with Client(server.port) as c:
        warm(c)
        os.truncate(path, 3)
        assert c.get("/files/small.txt").body == b"ver"
        warm(c)
        with open(path, "ab") as f:
            f.write(b"sion 3\n")
        assert c.get("/files/small.txt").body == b"version 3\n"
        warm(c)
        os.remove(path)
        assert c.get("/files/small.txt").status == 404


def test_a_file_renamed_over_is_in_the_next_answer_and_its_etag_changes(serve, live_root, settled) -> None:
    server = serve(shared_app(live_root))
    with Client(server.port) as c:
        warm(c)
        etag = c.get("/files/small.txt").header("etag")
        (live_root / "new.txt").write_bytes(b"replaced!\n")  # the same size
        os.rename(live_root / "new.txt", live_root / "small.txt")
        resp = c.get("/files/small.txt")
        assert resp.body == b"replaced!\n" and resp.header("etag") != etag


def test_a_remembered_batch_is_not_sent_with_a_file_trusted_again_at_a_new_version(serve, live_root, settled) -> None:
    server = serve(shared_app(live_root))
    target = batch_target(["small.txt", "other.txt"])
    with Client(server.port) as c:
        warm(c, target)  # its head remembered; its files trusted
        (live_root / "small.txt").write_bytes(b"a longer version 2\n")
        warm(c)  # the file alone, until its new version is trusted in turn
        parts = parse_multipart(c.get(target))
        assert [body for _, body in parts] == [b"a longer version 2\n", b"other\n"]


def test_trusted_files_make_whole_zips_tars_and_ranges_and_follow_a_change(serve, live_root, settled) -> None:
    """A trusted file is opened without a descriptor (only its bytes): a zip's CRC, a tar's entry
    and a Range are made from those bytes, and a change in place is in the next of each."""
    import io
    import tarfile
    import zipfile

    server = serve(shared_app(live_root))
    query = batch_target(["small.txt", "other.txt"]).partition("?")[2]
    with Client(server.port) as c:
        for target in (f"/api/stream-files.zip?{query}", f"/api/stream-files.tar?{query}", "/files/small.txt"):
            warm(c, target)

        def check(content: bytes) -> None:
            with zipfile.ZipFile(io.BytesIO(c.get(f"/api/stream-files.zip?{query}").body)) as z:
                assert z.testzip() is None and z.read("small.txt") == content  # testzip checks each CRC
            with tarfile.open(fileobj=io.BytesIO(c.get(f"/api/stream-files.tar?{query}").body)) as t:
                assert t.extractfile("small.txt").read() == content  # type: ignore[union-attr]
            ranged = c.get("/files/small.txt", {"Range": "bytes=1-4"})
            assert (ranged.status, ranged.body) == (206, content[1:5])

        check(b"version 1\n")
        with open(live_root / "small.txt", "r+b") as f:
            f.write(b"VERSION 2\n")
        check(b"VERSION 2\n")


def test_single_files_asked_in_turn_follow_a_change_in_bytes_length_and_etag(serve, live_root, settled) -> None:
    """Each file asked alone, as /files/ and as a batch of one, in turn with another (a random
    draw from a pool: no answer is the last one made), is answered from what was made of its
    trusted version; a change in place (another length, the mtime put back) is in the next
    answer to each of its targets, with the new length and ETag, and the other file's answers
    stay as they were."""
    server = serve(shared_app(live_root))
    path = live_root / "small.txt"
    targets = ["/files/small.txt", "/files/other.txt", batch_target(["small.txt"]), batch_target(["other.txt"])]

    def facts(c: Client, target: str) -> tuple[bytes, str | None, str | None]:
        """The file's bytes, its declared length and the answer's ETag."""
        resp = c.get(target)
        assert resp.status == 200
        if target.startswith("/files/"):
            return resp.body, resp.header("content-length"), resp.header("etag")
        (headers, body), = parse_multipart(resp)  # noqa: RUF015 - one part
        return body, headers["Content-Length"], resp.header("etag")

    new = b"version 2, longer\n"
    with Client(server.port) as c:
        for _ in range(5):  # remembered and trusted, each asked between the others
            for target in targets:
                facts(c, target)
        before = {target: facts(c, target) for target in targets}
        st = os.stat(path)
        path.write_bytes(new)
        os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns))  # the mtime put back: the ETag must still move
        for _ in range(4):  # the change found, then its version trusted in turn: each answer follows it
            for target in targets:
                body, length, etag = facts(c, target)
                if "other" in target:
                    assert (body, length, etag) == before[target]
                else:
                    assert (body, length) == (new, str(len(new)))
                    assert etag != before[target][2]
