"""A zip over 4 GiB: Zip64 fields where (and only where) a size or offset needs them, read back
by zipfile and Info-ZIP unzip. Runs in the normal suite, cheaply: the big file is sparse
(truncate), and the archive is written sparse too (its file bodies are holes, its headers real
bytes), so only the server's CRC and unzip's check read the zeros (about 37 s on this 2-core machine)."""

from __future__ import annotations

import errno
import os
import zipfile

import pytest

from axon.limits import Limits
from axon.plan.batch import plan_batch
from axon.plan.formats import zip_stored
from axon.storage.local import FileStore

from archive_support import tool

pytestmark = [pytest.mark.slow, pytest.mark.timeout(300)]  # writes and reads back a 4 GiB archive
KEY = b"k" * 32
BIG = (1 << 32) + 1000  # past 0xFFFFFFFF: needs a Zip64 size, and pushes what follows past 4 GiB


def write_sparse(response, path) -> int:
    """The response's bytes into ``path``, a file slice that is all hole left as a hole (it
    reads as the zeros it is); returns the length."""
    pos = 0
    with open(path, "wb") as out:
        for seg in response.body:
            if isinstance(seg, bytes):
                os.pwrite(out.fileno(), seg, pos)
                pos += len(seg)
                continue
            try:
                data_at = os.lseek(seg.fd, seg.offset, os.SEEK_DATA)
            except OSError as exc:
                assert exc.errno == errno.ENXIO
                data_at = None
            if data_at is None or data_at >= seg.offset + seg.count:
                pos += seg.count  # a hole in the source: a hole here
            else:
                os.pwrite(out.fileno(), os.pread(seg.fd, seg.count, seg.offset), pos)
                pos += seg.count
        out.truncate(pos)
    response.close()
    return pos


def test_a_zip_over_4_gib_is_zip64_and_reads_back(tmp_path):
    root = tmp_path / "root"
    root.mkdir()
    with open(root / "big.bin", "wb") as f:
        f.truncate(BIG)
    (root / "after.txt").write_bytes(b"after four gibibytes\n")
    store = FileStore(root)
    response = plan_batch(store, ["big.bin", "after.txt"], Limits(), key=KEY, headers={}, fmt=zip_stored)
    length = int(dict(response.headers)["Content-Length"])
    path = tmp_path / "big.zip"
    assert write_sparse(response, path) == length > BIG
    with zipfile.ZipFile(path) as archive:
        big, after = archive.infolist()
        assert (big.filename, big.file_size, big.compress_size) == ("big.bin", BIG, BIG)
        assert after.header_offset > 0xFFFFFFFF  # its offset needs the Zip64 field
        assert archive.read("after.txt") == b"after four gibibytes\n"
    # unzip reads every entry through and checks its CRC (zipfile would read the zeros again).
    assert "No errors detected" in tool("unzip", "-t", str(path))
