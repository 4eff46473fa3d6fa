"""Archive framing from plain facts: Zip64 exactly where a value does not fit 32 bits (or the
count 16), and the same layouts zipfile reads."""

from __future__ import annotations

import struct
import tarfile
import zipfile

import pytest

from axon.http.archive import (
    ZIP64_FROM, plain_ustar_member, tar_header, tar_padding, zip_central_record, zip_end, zip_entry, zip_local_header,
)


def zip64_field(record: bytes, fixed: int, name_len_at: int) -> bytes:
    """The Zip64 extra field (header id 1) of a local (30 bytes fixed) or central (46) record."""
    name_len, extra_len = struct.unpack_from("<HH", record, name_len_at)
    extra, at, found = record[fixed + name_len : fixed + name_len + extra_len], 0, b""
    while at < len(extra):  # fields by id, in any order (the UT time field is there too)
        tag, size = struct.unpack_from("<HH", extra, at)
        if tag == 1:
            found = extra[at : at + 4 + size]
        at += 4 + size
    assert at == len(extra)
    return found


def test_zip64_only_from_0xffffffff():
    # Every Python that requires-python admits: 3.10 and 3.11.2's zipfile refuse this size
    # without Zip64, so nothing here may lean on their checks.
    below = zip_entry("a", ZIP64_FROM - 1, 0, 0)
    assert zip64_field(zip_local_header(below), 30, 26) == b""
    assert zip64_field(zip_central_record(below, ZIP64_FROM - 1), 46, 28) == b""
    at = zip_entry("a", ZIP64_FROM, 0, 0)
    local = zip_local_header(at)
    assert zip64_field(local, 30, 26) == struct.pack("<HHQQ", 1, 16, ZIP64_FROM, ZIP64_FROM)
    assert struct.unpack_from("<LL", local, 18) == (0xFFFFFFFF, 0xFFFFFFFF)
    assert struct.unpack_from("<H", local, 4) == (45,)  # version needed: Zip64
    central = zip_central_record(at, 1 << 33)
    assert zip64_field(central, 46, 28) == struct.pack("<HHQQQ", 1, 24, ZIP64_FROM, ZIP64_FROM, 1 << 33)
    # The offset alone: only it in the field.
    small_far = zip_entry("b", 10, 0, 0)
    assert zip64_field(zip_central_record(small_far, 1 << 33), 46, 28) == struct.pack("<HHQ", 1, 8, 1 << 33)


def zipfile_local_header(name: str, size: int, mtime_ns: int, crc: int) -> bytes | None:
    """What ``zipfile`` writes as the local header of the same stored entry (None where this
    Python's ``ZipInfo.FileHeader`` refuses it: before 3.11.7, any size over 2 GiB - 1 without Zip64)."""
    entry = zip_entry(name, size, mtime_ns, crc)
    info = zipfile.ZipInfo(name, entry.date_time)
    info.extra, info.CRC, info.file_size, info.compress_size = entry.extra, crc, size, size
    try:
        return info.FileHeader(zip64=size >= ZIP64_FROM)
    except zipfile.LargeZipFile:
        return None


@pytest.mark.parametrize("size", [0, 1, 2**31 - 1, 2**31, 3 << 30, ZIP64_FROM - 1, ZIP64_FROM, 1 << 40])
@pytest.mark.parametrize("name", ["a", "sub/b.txt", "ü/é.txt"])
def test_local_header_is_what_zipfile_writes_on_any_python(size, name):
    ours = zip_local_header(zip_entry(name, size, 1_700_000_000 * 10**9, 0x12345678))
    reference = zipfile_local_header(name, size, 1_700_000_000 * 10**9, 0x12345678)
    assert reference is None or ours == reference
    # Where this Python's zipfile refuses, the fields say what the later ones write.
    version, flags, method, crc, compressed, plain = struct.unpack_from("<HHH4xLLL", ours, 4)
    wide = size >= ZIP64_FROM
    assert (version, method, crc) == (45 if wide else 20, 0, 0x12345678)
    assert compressed == plain == (0xFFFFFFFF if wide else size)
    assert flags == (0 if name.isascii() else 0x800)


def test_end_records():
    classic = zip_end(3, 100, 200)
    assert classic[:4] == zipfile.stringEndArchive and len(classic) == 22
    for count, offset, size in [(0xFFFF + 1, 100, 200), (3, ZIP64_FROM, 200), (3, 100, ZIP64_FROM)]:
        wide = zip_end(count, offset, size)
        assert wide[:4] == zipfile.stringEndArchive64 and len(wide) == 56 + 20 + 22
        assert struct.unpack_from("<QQQQ", wide, 24) == (count, count, size, offset)
        assert struct.unpack_from("<4sLQL", wide, 56) == (zipfile.stringEndArchive64Locator, 0, offset + size, 1)
        assert struct.unpack_from("<HHLL", wide, 76 + 8) == (min(count, 0xFFFF), min(count, 0xFFFF),
                                                             min(size, ZIP64_FROM), min(offset, ZIP64_FROM))
    assert zip_end(0xFFFF, 100, 200)[:4] == zipfile.stringEndArchive  # as zipfile: 65,535 fits


def test_dates_clamped_to_what_dos_holds():
    assert zip_entry("a", 0, 0, 0).date_time == (1980, 1, 1, 0, 0, 0)
    assert zip_entry("a", 0, 10**19, 0).date_time == (2107, 12, 31, 23, 59, 58)
    assert zip_entry("a", 0, 1_700_000_000_123_456_789, 0).date_time == (2023, 11, 14, 22, 13, 20)


@pytest.mark.parametrize("name, size, mtime", [
    ("a/b.txt", 5, 1_700_000_000), ("x" * 100, 0, 0), ("x" * 101, 1, 1), ("d/" * 49 + "ab", 8**11 - 1, 8**11 - 1),
    ("big", 8**11, 0), ("late", 1, 8**11), ("ü.txt", 1, 0), ("a b\tc~!.bin", 3, 12345), ("", 0, 0),
])
def test_tar_header_is_the_one_tarfile_writes(name, size, mtime):
    """Byte for byte what ``TarInfo.tobuf`` gives, the plain ustar blocks built without it too."""
    info = tarfile.TarInfo(name)
    info.size, info.mtime, info.mode = size, mtime, 0o644
    assert tar_header(name, size, mtime * 10**9 + 999_999_999) == info.tobuf(tarfile.PAX_FORMAT, "utf-8", "surrogateescape")


def test_tar_header_is_ustar_unless_a_name_needs_pax():
    plain = tar_header("a/b.txt", 5, 1_700_000_000 * 10**9)
    assert len(plain) == 512 and plain[257:265] == b"ustar\x0000"
    assert len(tar_header("ü.txt", 5, 0)) == 3 * 512  # a pax header block, its records, the header
    assert tar_padding(0) == b"" and tar_padding(1) == bytes(511) and tar_padding(512) == b""


@pytest.mark.parametrize("name, size, mtime", [
    ("a/b.txt", 5, 1_700_000_000), ("x" * 100, 0, 0), ("d/" * 49 + "ab", 8**11 - 1, 8**11 - 1), ("a b\tc~!.bin", 3, 1),
])
def test_plain_ustar_member_reads_what_tarfile_reads_of_a_plain_header(name, size, mtime):
    block = tar_header(name, size, mtime * 10**9)
    info = tarfile.TarInfo.frombuf(block, "utf-8", "surrogateescape")
    assert plain_ustar_member(block) == (info.name, info.size) == (name, size)


def resum(block: bytes) -> bytes:
    """``block`` with its checksum made right again (the byte sum, its own field read as spaces)."""
    return block[:148] + b"%06o\0 " % (sum(block[:148]) + 8 * 32 + sum(block[156:])) + block[156:]


def other_blocks() -> dict[str, bytes]:
    """Header blocks tarfile reads and the plain reading leaves to it."""
    plain = tar_header("a.bin", 5, 0)
    assert resum(plain) == plain
    owned = tarfile.TarInfo("a.bin")
    owned.uid, owned.uname = 1000, "me"
    folder = tarfile.TarInfo("d")
    folder.type = tarfile.DIRTYPE
    return {
        "pax": tar_header("ü.txt", 5, 0)[:512],
        "gnu": tarfile.TarInfo("a.bin").tobuf(tarfile.GNU_FORMAT),
        "an owner": owned.tobuf(tarfile.USTAR_FORMAT),
        "a directory": folder.tobuf(tarfile.USTAR_FORMAT),
        "a wrong checksum": plain[:148] + b"%06o\0 " % (int(plain[148:154], 8) + 1) + plain[156:],
        "a size not octal": resum(plain[:124] + b"0000000000a\0" + plain[136:]),
        "a name not ASCII": resum(b"\xc3\xa9" + plain[2:]),
        "no name": resum(bytes(100) + plain[100:]),
        "the end": bytes(512),
        "a cut block": plain[:300],
    }


@pytest.mark.parametrize("kind", list(other_blocks()))
def test_plain_ustar_member_leaves_every_other_block_to_tarfile(kind):
    assert plain_ustar_member(other_blocks()[kind]) is None
