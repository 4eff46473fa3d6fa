"""Archive framing: the bytes a tar or a zip puts around each file, built from plain facts.

Pure, as :mod:`.multipart` is: no file is opened here; the planner puts each file's bytes
between the blocks these functions return, so a file's body still leaves by ``sendfile``.

* tar: POSIX ustar headers written by :mod:`tarfile` itself (``TarInfo.tobuf`` in pax format,
  which adds a pax extended header only when a field does not fit ustar: a name longer than
  ustar's fields or not ASCII, a size of 8 GiB or more). Each file is padded to 512 bytes; the
  archive ends with two zero blocks. The common header (an ASCII name of at most 100 bytes,
  numbers that fit) is assembled here from ``tarfile``'s own field formatters and a block it
  made, skipping ``tobuf``'s per-field checks (a cost paid once per file of a tar, measured in
  BENCHMARKS.md); the tests compare the two byte for byte.
* zip: stored entries (method 0: the bytes on disk are the entry). Every record, the local
  headers included, is packed here with :mod:`zipfile`'s own structure formats and constants,
  laid out as ``ZipFile`` writes them; ``zipfile``'s methods are not called, since their checks
  differ between Python releases (3.10 and 3.11.2's ``ZipInfo.FileHeader(zip64=False)`` refuse a
  size over 2 GiB - 1 that later releases write). Names are UTF-8 (flag bit 11 set when a name
  is not ASCII, as ``zipfile`` does). Zip64 fields appear only where a value does not fit 32
  bits (an entry or offset of 0xFFFFFFFF bytes or more), and the Zip64 end records only then or
  past 65,535 entries. ``zipfile`` itself switches to Zip64 from 2 GiB,
  for readers that took the fields as signed; every reader we test (``zipfile``, Info-ZIP
  ``unzip``, libarchive) reads unsigned, which is what the format says.
* zip times: a DOS date and time has no zone, and the server does not know the client's, so it
  holds the mtime in UTC (the same bytes on every server). Each entry also carries Info-ZIP's
  extended timestamp field (0x5455, "UT": the mtime as unix seconds), in its local header and
  its central record; ``unzip``, ``zipinfo``, libarchive and 7-Zip read it and show the time in
  the reader's own zone. ``zipfile`` ignores it and shows the DOS (UTC) time.
"""

from __future__ import annotations

import re
import struct
import tarfile
import zipfile
from datetime import datetime, timezone
from typing import NamedTuple

#: A 32-bit field holding this (or needing more) says "see the Zip64 extra field".
ZIP64_FROM = 0xFFFFFFFF
#: More entries than this need the Zip64 end records (the classic count is 16 bits).
ZIP_MAX_ENTRIES = 0xFFFF
_REGULAR_0644 = (0o100644 << 16)  # a zip's external attributes: Unix mode in the high half
_UNIX = 3  # "version made by" host system, as ZipFile writes on POSIX
_UTF8_NAME = 0x800  # general purpose flag bit 11: the name is UTF-8


def _ustar_template() -> bytes:
    """tarfile's own ustar block of a regular file of mode 0644, uid and gid 0, no owner names:
    the plain header's constant fields are cut from it, so none of them is spelled here."""
    info = tarfile.TarInfo("x")
    info.mode = 0o644
    return info.tobuf(tarfile.USTAR_FORMAT, "ascii", "strict")


_USTAR = _ustar_template()
_USTAR_MODE_IDS = _USTAR[100:124]  # mode, uid, gid
_USTAR_TAIL = _USTAR[156:]  # type, link name, magic, owner names, devices, prefix, padding
_USTAR_CONSTANT_SUM = sum(_USTAR_MODE_IDS) + sum(_USTAR_TAIL) + sum(b" " * 8)  # chksum read as spaces
_OCTAL_11 = 8**11  # a size or mtime of 11 octal digits fits without a pax header


def tar_header(name: str, size: int, mtime_ns: int) -> bytes:
    """The header block(s) of one regular file, mode 0644, owned by nobody in particular."""
    mtime = mtime_ns // 1_000_000_000
    if len(name) <= 100 and name.isascii() and 0 <= size < _OCTAL_11 and 0 <= mtime < _OCTAL_11:
        return _plain_ustar(name, size, mtime)
    info = tarfile.TarInfo(name)
    info.size = size
    info.mtime = mtime_ns // 1_000_000_000
    info.mode = 0o644
    return info.tobuf(tarfile.PAX_FORMAT, "utf-8", "surrogateescape")


def _plain_ustar(name: str, size: int, mtime: int) -> bytes:
    """The one ustar block tarfile's ``tobuf`` gives a name and numbers that need no pax header,
    without its per-field checks, which are paid per file of a tar.
    Every field is formatted by tarfile's own ``stn``/``itn`` and the constant ones come from its
    template; only the checksum (the block's byte sum, its own field read as eight spaces) is
    summed here. The tests hold the two byte for byte."""
    field = tarfile.stn(name, 100, "ascii", "strict")
    numbers = tarfile.itn(size, 12, tarfile.USTAR_FORMAT) + tarfile.itn(mtime, 12, tarfile.USTAR_FORMAT)
    checksum = _USTAR_CONSTANT_SUM + sum(field) + sum(numbers)
    return b"".join((field, _USTAR_MODE_IDS, numbers, b"%06o\0 " % checksum, _USTAR_TAIL))


# A plain block's numbers as ``tarfile.itn`` and ``_plain_ustar`` write them: size, mtime, checksum.
_PLAIN_NUMBERS = re.compile(rb"[0-7]{11}\0[0-7]{11}\0[0-7]{6}\0 ")


def plain_ustar_member(block: bytes) -> tuple[str, int] | None:
    """The name and size of a regular file whose header block is one :func:`_plain_ustar`
    writes (the same constant fields, octal numbers, a right checksum), or None for any other
    block, which ``tarfile`` reads (pax and GNU headers, other modes and owners, the end): the
    reader of a tar of small files reads the common header without ``tarfile``'s per-field work."""
    if (len(block) != tarfile.BLOCKSIZE or not block.startswith(_USTAR_MODE_IDS, 100)
            or not block.endswith(_USTAR_TAIL) or not _PLAIN_NUMBERS.fullmatch(block, 124, 156)):
        return None
    name = block[:100].partition(b"\0")[0]  # tarfile's nts: the field up to its first NUL
    if not name or not name.isascii() or _USTAR_CONSTANT_SUM + sum(block[:100]) + sum(block[124:148]) != int(block[148:154], 8):
        return None
    return name.decode("ascii"), int(block[124:135], 8)


def tar_padding(size: int) -> bytes:
    """What follows a file's bytes up to the next 512-byte block."""
    return bytes(-size % tarfile.BLOCKSIZE)


#: After the last file: two zero blocks (tarfile and GNU tar add zeros up to a 10 KiB record
#: when writing to a tape; readers need only these).
TAR_END = bytes(2 * tarfile.BLOCKSIZE)


class ZipEntry(NamedTuple):
    """The facts of one stored entry that its local header and central record carry."""

    name: str
    size: int  # stored: the compressed and the uncompressed size are both this
    crc: int
    date_time: tuple[int, int, int, int, int, int]  # the DOS date and time, UTC
    extra: bytes  # the UT field, which both the local header and the central record carry


def zip_entry(name: str, size: int, mtime_ns: int, crc: int) -> ZipEntry:
    """The entry of a regular file, mode 0644, stored."""
    return ZipEntry(name, size, crc, _dos_date_time(mtime_ns), _extended_timestamp(mtime_ns))


def zip_local_header(entry: ZipEntry) -> bytes:
    """The local file header (with its Zip64 extra field when the size needs one)."""
    size, extra, version = entry.size, entry.extra, zipfile.DEFAULT_VERSION
    if size >= ZIP64_FROM:
        # After the UT field, as ZipInfo.FileHeader appends it (the central record has it first).
        extra += struct.pack("<HHQQ", 1, 16, size, size)
        size, version = ZIP64_FROM, zipfile.ZIP64_VERSION
    name, flags = _encoded_name(entry.name)
    head = struct.pack(
        zipfile.structFileHeader, zipfile.stringFileHeader, version, 0, flags, zipfile.ZIP_STORED,
        *_dos_fields(entry.date_time), entry.crc, size, size, len(name), len(extra),
    )
    return head + name + extra


def zip_central_record(entry: ZipEntry, offset: int) -> bytes:
    """The central directory record of an entry whose local header starts at ``offset``.
    Laid out as ``ZipFile._write_end_record`` writes it (the Zip64 extra field lists the sizes,
    then the offset, each only if its 32-bit field overflows)."""
    size, wide = entry.size, []
    if size >= ZIP64_FROM:
        wide += [size, size]  # uncompressed, then compressed: stored, they are equal
        size = ZIP64_FROM
    if offset >= ZIP64_FROM:
        wide.append(offset)
        offset = ZIP64_FROM
    # Zip64 first, then the UT field, as ZipFile writes its central directory (its local headers
    # have them the other way round); readers look fields up by id, in any order.
    extra = struct.pack("<HH" + "Q" * len(wide), 1, 8 * len(wide), *wide) if wide else b""
    extra += entry.extra
    version = zipfile.ZIP64_VERSION if wide else zipfile.DEFAULT_VERSION
    name, flags = _encoded_name(entry.name)
    head = struct.pack(
        zipfile.structCentralDir, zipfile.stringCentralDir, version, _UNIX, version, 0, flags, zipfile.ZIP_STORED,
        *_dos_fields(entry.date_time), entry.crc, size, size, len(name), len(extra), 0, 0, 0, _REGULAR_0644, offset,
    )
    return head + name + extra


def zip_end(count: int, directory_offset: int, directory_size: int) -> bytes:
    """The end records after a central directory of ``count`` entries: the Zip64 end record and
    its locator only when a count, size or offset does not fit the classic record."""
    out = b""
    if count > ZIP_MAX_ENTRIES or directory_offset >= ZIP64_FROM or directory_size >= ZIP64_FROM:
        out = struct.pack(
            zipfile.structEndArchive64, zipfile.stringEndArchive64, 44, zipfile.ZIP64_VERSION,
            zipfile.ZIP64_VERSION, 0, 0, count, count, directory_size, directory_offset,
        ) + struct.pack(
            zipfile.structEndArchive64Locator, zipfile.stringEndArchive64Locator, 0,
            directory_offset + directory_size, 1,
        )
        count = min(count, ZIP_MAX_ENTRIES)
        directory_size = min(directory_size, ZIP64_FROM)
        directory_offset = min(directory_offset, ZIP64_FROM)
    return out + struct.pack(
        zipfile.structEndArchive, zipfile.stringEndArchive, 0, 0, count, count, directory_size, directory_offset, 0
    )


def _encoded_name(name: str) -> tuple[bytes, int]:
    """The name's bytes and the flag bits, as ``zipfile`` encodes them: ASCII as is, anything
    else UTF-8 with bit 11 set."""
    try:
        return name.encode("ascii"), 0
    except UnicodeEncodeError:
        return name.encode("utf-8"), _UTF8_NAME


#: Info-ZIP's extended timestamp: header id "UT", then a flags byte (bit 0: mtime follows).
_UT_ID, _UT_MTIME = 0x5455, 0x01
_UINT32_MAX = 0xFFFFFFFF


def _extended_timestamp(mtime_ns: int) -> bytes:
    """The UT extra field holding only the mtime, as unix seconds in 32 unsigned bits (clamped to
    1970 to 2106). The central record's field is the same: there it never holds more than the mtime."""
    seconds = min(max(mtime_ns // 1_000_000_000, 0), _UINT32_MAX)
    return struct.pack("<HHBL", _UT_ID, 5, _UT_MTIME, seconds)


_DOS_FIRST, _DOS_LAST = 315532800, 4354819198  # 1980-01-01 00:00:00 and 2107-12-31 23:59:58 UTC


def _dos_date_time(mtime_ns: int) -> tuple[int, int, int, int, int, int]:
    """The mtime in UTC (a zip's date has no zone; UTC makes the bytes the same on every
    server), clamped to what a DOS date can hold (1980 to 2107)."""
    seconds = min(max(mtime_ns // 1_000_000_000, _DOS_FIRST), _DOS_LAST)
    t = datetime.fromtimestamp(seconds, timezone.utc)
    return t.year, t.month, t.day, t.hour, t.minute, t.second


def _dos_fields(dt: tuple[int, ...]) -> tuple[int, int]:
    return dt[3] << 11 | dt[4] << 5 | (dt[5] // 2), (dt[0] - 1980) << 9 | dt[1] << 5 | dt[2]
