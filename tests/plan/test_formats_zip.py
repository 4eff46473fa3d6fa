"""The zip format: stored entries whose CRC-32 the storage layer knows, read back by zipfile,
Info-ZIP unzip and bsdtar, hostile names included; a file edited in place never keeps an old CRC."""

from __future__ import annotations

import io
import os
import shutil
import struct
import subprocess
import time
import zipfile
import zlib

import pytest

from axon.errors import ServiceUnavailable
from axon.limits import Limits
from axon.plan.batch import plan_batch
from axon.plan.formats import zip_stored
from axon.storage.local import FileStore

from archive_support import HOSTILE, extracted, make_hostile, render, tool

KEY = b"k" * 32
LIMITS = Limits()


def known_crcs(store: FileStore, *paths: str) -> list[int | None]:
    """The CRC-32s the store knows for ``paths`` as they are now, asked without reading any
    (None: not known). With ``settled_ns = 0`` the store keeps every CRC it reads, so a None
    also says the file was not read."""
    files = [store.open(path) for path in paths]
    try:
        return store.crc32s(files, read=False)
    finally:
        for f in files:
            f.close()


def test_zip_round_trip_in_zipfile(root, store):
    paths = ["a.txt", "sub/../b.bin", "empty.txt", "sub/deeper/d.txt"]
    response = plan_batch(store, paths, LIMITS, key=KEY, headers={}, fmt=zip_stored)
    headers = dict(response.headers)
    assert headers["Content-Type"] == "application/zip"
    assert headers["Content-Disposition"] == 'attachment; filename="batch.zip"'
    body = render(response)
    assert int(headers["Content-Length"]) == len(body)
    with zipfile.ZipFile(io.BytesIO(body)) as archive:
        assert archive.testzip() is None
        infos = archive.infolist()
        assert [i.filename for i in infos] == ["a.txt", "b.bin", "empty.txt", "sub/deeper/d.txt"]
        for info, path in zip(infos, ["a.txt", "b.bin", "empty.txt", "sub/deeper/d.txt"]):
            data = (root / path).read_bytes()
            assert info.compress_type == zipfile.ZIP_STORED and info.CRC == zlib.crc32(data)
            assert info.external_attr >> 16 == 0o100644
            assert archive.read(info) == data
            assert b"\x01\x00" not in info.extra[:2]  # no Zip64 field for small entries


def test_hostile_names_come_out_the_same_in_every_tool(root, tmp_path):
    made = make_hostile(root)
    body = render(plan_batch(FileStore(root), HOSTILE, LIMITS, key=KEY, headers={}, fmt=zip_stored))
    with zipfile.ZipFile(io.BytesIO(body)) as archive:
        assert archive.testzip() is None
        assert archive.namelist() == HOSTILE
        assert {n: archive.read(n) for n in HOSTILE} == made
        # UTF-8 names say so (bit 11); ASCII ones need not.
        assert [bool(i.flag_bits & 0x800) for i in archive.infolist()] == [not n.isascii() for n in HOSTILE]
    path = tmp_path / "batch.zip"
    path.write_bytes(body)
    assert "No errors detected" in tool("unzip", "-t", str(path))
    assert tool("bsdtar", "-tvf", str(path)).count("\n") == len(HOSTILE)
    out = tmp_path / "bsdtar"
    out.mkdir()
    tool("bsdtar", "-xf", str(path), "-C", str(out))
    assert extracted(out) == made
    # Info-ZIP unzip rewrites control characters in names it extracts (CR, LF): every other
    # name comes out as it went in.
    out = tmp_path / "unzip"
    tool("unzip", "-q", str(path), "-d", str(out))
    got = extracted(out)
    assert {n: d for n, d in made.items() if n.isprintable()} == {n: d for n, d in got.items() if n in made}
    assert len(got) == len(made)


def test_same_bytes_as_zipfile_writes(root, store):
    # zipfile is the reference: the same stored entries with the same facts are the same bytes.
    paths = ["a.txt", "b.bin", "sub/c.json"]
    ours = render(plan_batch(store, paths, LIMITS, key=KEY, headers={}, fmt=zip_stored))
    reference = io.BytesIO()
    with zipfile.ZipFile(reference, "w", zipfile.ZIP_STORED) as archive:
        for info in zipfile.ZipFile(io.BytesIO(ours)).infolist():
            fresh = zipfile.ZipInfo(info.filename, info.date_time)
            fresh.external_attr, fresh.create_system = info.external_attr, info.create_system
            fresh.extra = info.extra  # the UT time field
            archive.writestr(fresh, (root / info.filename).read_bytes())
    assert ours == reference.getvalue()


def test_a_path_named_twice_is_two_entries(root, store, tmp_path):
    body = render(plan_batch(store, ["a.txt", "b.bin", "./a.txt"], LIMITS, key=KEY, headers={}, fmt=zip_stored))
    with zipfile.ZipFile(io.BytesIO(body)) as archive:
        assert archive.namelist() == ["a.txt", "b.bin", "a.txt"] and archive.testzip() is None
    (tmp_path / "twice.zip").write_bytes(body)
    assert "No errors detected" in tool("unzip", "-t", str(tmp_path / "twice.zip"))



def test_formats_have_their_own_etags(store):
    from axon.plan.formats import multipart_mixed, tar

    def etag(fmt):
        response = plan_batch(store, ["a.txt"], LIMITS, key=KEY, headers={}, fmt=fmt)
        response.close()
        return dict(response.headers)["ETag"]

    assert len({etag(multipart_mixed), etag(tar), etag(zip_stored)}) == 3


def test_a_file_edited_in_place_gets_a_new_crc(root, tmp_path):
    # Keep the size and put the mtime back: only the ctime says the file changed.
    store = FileStore(root)
    store.crcs.settled_ns = 0  # keep every CRC, even of a file written a moment ago
    path = root / "b.bin"
    before = os.stat(path)

    def crc_served():
        body = render(plan_batch(store, ["b.bin"], LIMITS, key=KEY, headers={}, fmt=zip_stored))
        with zipfile.ZipFile(io.BytesIO(body)) as archive:
            assert archive.testzip() is None
            return archive.infolist()[0].CRC, archive.read("b.bin")

    assert known_crcs(store, "b.bin") == [None]
    first, data = crc_served()
    assert first == zlib.crc32(path.read_bytes()) and known_crcs(store, "b.bin") == [first]  # kept
    fd = os.open(path, os.O_WRONLY)
    try:
        time.sleep(0.02)  # past one tick of the filesystem clock, so the ctime moves
        os.pwrite(fd, b"EDITED", 100)
    finally:
        os.close(fd)
    os.utime(path, ns=(before.st_atime_ns, before.st_mtime_ns))
    after = os.stat(path)
    assert (after.st_size, after.st_mtime_ns) == (before.st_size, before.st_mtime_ns)
    assert after.st_ctime_ns != before.st_ctime_ns
    assert known_crcs(store, "b.bin") == [None]  # a new version: the old CRC is not its
    second, data = crc_served()
    assert second != first and data == path.read_bytes() and second == zlib.crc32(data)
    assert known_crcs(store, "b.bin") == [second]


class GrowingStore:
    """A real store whose files are appended to each time their CRC is asked: they change
    between being opened and being read, as a file being written does."""

    ready_files = None  # each file opened

    def __init__(self, store: FileStore, root, times: int) -> None:
        self.store, self.root, self.times = store, root, times

    def open(self, requested):
        return self.store.open(requested)

    def crc32s(self, files, read=True):
        if read and self.times > 0:
            self.times -= 1
            for f in files:
                with open(self.root / f.name, "ab") as out:
                    out.write(b"+")
        return self.store.crc32s(files, read)


def test_a_file_that_changes_while_read_is_opened_again(root, store):
    growing = GrowingStore(store, root, times=2)
    body = render(plan_batch(growing, ["a.txt"], LIMITS, key=KEY, headers={}, fmt=zip_stored))
    with zipfile.ZipFile(io.BytesIO(body)) as archive:
        assert archive.read("a.txt") == b"hello, axon\n++" and archive.testzip() is None


def test_a_file_that_keeps_changing_is_a_503(root, store, open_fds):
    before = open_fds()
    with pytest.raises(ServiceUnavailable) as caught:
        plan_batch(GrowingStore(store, root, times=10), ["b.bin", "a.txt"], LIMITS, key=KEY, headers={}, fmt=zip_stored)
    assert caught.value.code == "file_changing" and caught.value.paths == ["b.bin"]
    assert ("Retry-After", "1") in caught.value.headers
    assert open_fds() <= before


def test_head_reads_no_file_for_its_crc(root):
    store = FileStore(root)
    store.crcs.settled_ns = 0  # keep every CRC read: a CRC not known was not read
    head = plan_batch(store, ["a.txt", "b.bin"], LIMITS, key=KEY, headers={}, method="HEAD", fmt=zip_stored)
    head.close()
    assert known_crcs(store, "a.txt", "b.bin") == [None, None]
    get = plan_batch(store, ["a.txt", "b.bin"], LIMITS, key=KEY, headers={}, fmt=zip_stored)
    get.close()
    assert None not in known_crcs(store, "a.txt", "b.bin")
    assert dict(head.headers) == dict(get.headers)


def test_on_the_loop_a_long_crc_read_is_refused_before_reading(root, store):
    from axon.errors import WouldBlock
    from axon.plan.batch import INLINE_READ_BYTES
    from axon.storage.crc_cache import CrcCache

    store.crcs = CrcCache(settled_ns=0)  # kept at once: no clock tick to wait for
    (root / "big.bin").write_bytes(os.urandom(INLINE_READ_BYTES + 1))
    before = set(os.listdir("/proc/self/fd"))
    with pytest.raises(WouldBlock):
        plan_batch(store, ["a.txt", "big.bin"], LIMITS, key=KEY, headers={}, fmt=zip_stored, on_loop=True)
    assert known_crcs(store, "a.txt", "big.bin") == [None, None]  # nothing was read, not even the small file
    assert set(os.listdir("/proc/self/fd")) <= before  # and every file it opened is closed
    # Where it may block, the same batch is read and framed; after that, it is planned on the
    # loop too: its CRCs are known.
    first = render(plan_batch(store, ["a.txt", "big.bin"], LIMITS, key=KEY, headers={}, fmt=zip_stored))
    assert None not in known_crcs(store, "a.txt", "big.bin")
    again = render(plan_batch(store, ["a.txt", "big.bin"], LIMITS, key=KEY, headers={}, fmt=zip_stored, on_loop=True))
    assert again == first  # on the loop, and not refused: nothing left to read


def test_on_the_loop_a_short_crc_read_stays_inline(root, store):
    from axon.plan.batch import INLINE_READ_BYTES

    store.crcs.settled_ns = 0  # keep every CRC read
    (root / "edge.bin").write_bytes(os.urandom(INLINE_READ_BYTES - 12))
    # Two cold files, INLINE_READ_BYTES in all, an empty one and a repeat: read here.
    paths = ["a.txt", "edge.bin", "empty.txt", "a.txt"]
    body = render(plan_batch(store, paths, LIMITS, key=KEY, headers={}, fmt=zip_stored, on_loop=True))
    assert (root / "a.txt").stat().st_size == 12 and None not in known_crcs(store, "a.txt", "edge.bin", "empty.txt")
    with zipfile.ZipFile(io.BytesIO(body)) as archive:
        assert archive.testzip() is None and archive.namelist() == paths


# An odd second (a DOS time holds even ones only) in November, when New York is UTC-5.
ODD_MTIME = 1_700_000_001  # 2023-11-14 22:13:21 UTC, 17:13:21 in New York


def _in_new_york(*argv: str, cwd=None) -> str:
    assert shutil.which(argv[0]), f"{argv[0]} is not installed: scripts/setup.sh --all installs it"
    done = subprocess.run(argv, capture_output=True, text=True, cwd=cwd, timeout=60,
                          env={**os.environ, "TZ": "America/New_York"})
    assert done.returncode == 0, (argv, done.stdout, done.stderr)
    return done.stdout


def _zip_of_odd_mtime(root, tmp_path):
    os.utime(root / "a.txt", (ODD_MTIME, ODD_MTIME))
    path = tmp_path / "times.zip"
    path.write_bytes(render(plan_batch(FileStore(root), ["a.txt"], LIMITS, key=KEY, headers={}, fmt=zip_stored)))
    return path


def _ut_fields(extra: bytes) -> list[bytes]:
    found, at = [], 0
    while at + 4 <= len(extra):
        tag, size = struct.unpack_from("<HH", extra, at)
        if tag == 0x5455:
            found.append(extra[at + 4 : at + 4 + size])
        at += 4 + size
    return found


def test_zip_times_carry_the_ut_field_in_local_and_central_records(root, tmp_path):
    path = _zip_of_odd_mtime(root, tmp_path)
    data = path.read_bytes()
    with zipfile.ZipFile(path) as archive:
        info = archive.infolist()[0]
        # The central record's: flags 1 (mtime), then the mtime as unix seconds.
        assert _ut_fields(info.extra) == [struct.pack("<BL", 1, ODD_MTIME)]
        assert info.date_time == (2023, 11, 14, 22, 13, 20)  # the DOS time: UTC, as before
    name_len, extra_len = struct.unpack_from("<HH", data, 26)  # the local header's
    assert _ut_fields(data[30 + name_len : 30 + name_len + extra_len]) == [struct.pack("<BL", 1, ODD_MTIME)]


def test_zip_times_are_right_in_another_time_zone(root, tmp_path):
    path = _zip_of_odd_mtime(root, tmp_path)
    # zipinfo's decimal time, local to the reader: 17:13:21 in New York, not 22:13:20.
    assert "20231114.171321" in _in_new_york("zipinfo", "-T", str(path))
    assert "2023-11-14 17:13" in _in_new_york("unzip", "-l", str(path))
    for extractor in (["unzip", "-q", str(path), "-d"], ["bsdtar", "-xf", str(path), "-C"]):
        out = tmp_path / extractor[0]
        out.mkdir()
        _in_new_york(*extractor, str(out))
        assert os.stat(out / "a.txt").st_mtime == ODD_MTIME, extractor[0]


def test_ut_time_is_clamped_to_32_unsigned_bits(tmp_path):
    from axon.http.archive import zip_entry

    assert _ut_fields(zip_entry("a", 0, -5 * 10**9, 0).extra) == [struct.pack("<BL", 1, 0)]
    assert _ut_fields(zip_entry("a", 0, 2**33 * 10**9, 0).extra) == [struct.pack("<BL", 1, 0xFFFFFFFF)]


def test_the_zip_etag_changed_with_its_bytes():
    # A resume (If-Range) from a zip made before the UT field must not splice in the new bytes.
    from axon.http.batch_identity import Signature, identity_of

    a = Signature("a.txt", "text/plain; charset=utf-8", device=4, inode=3, size=12, mtime_ns=1, ctime_ns=2, name="a.txt")
    assert zip_stored(KEY, None, (a,), (0,))[0] != identity_of(KEY, (a,), None, "zip").etag
