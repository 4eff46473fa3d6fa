"""axon.batchclient.tar_reader: the files of a tar as tarfile wrote them, each asked for at once,
from a body that only goes forward; a body cut anywhere is a ReadError."""

from __future__ import annotations

import io
import tarfile

import pytest

from axon.batchclient.tar_reader import tar_files
from axon.http.archive import TAR_END, tar_header, tar_padding

FILES = {
    "a.bin": bytes(range(256)) * 40,
    "empty.bin": b"",
    "dir/" + "long-name-" * 20 + ".bin": b"pax header for a long name",  # > 100 bytes: a pax header
    "été/ü.txt": "non-ASCII names go in pax headers too".encode(),
    "odd.bin": b"x" * 513,
}


def archive(files: dict[str, bytes], fmt: int = tarfile.PAX_FORMAT) -> bytes:
    out = io.BytesIO()
    with tarfile.open(fileobj=out, mode="w", format=fmt) as tar:
        folder = tarfile.TarInfo("dir")
        folder.type = tarfile.DIRTYPE
        tar.addfile(folder)  # not a file: skipped
        for name, data in files.items():
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    return out.getvalue()


class Body:
    """A body read as the transport's ``read_exactly``: the bytes asked for unless it ends."""

    def __init__(self, data: bytes) -> None:
        self.data, self.position = data, 0
        self.asked: list[int] = []

    def read(self, size: int) -> bytes:
        self.asked.append(size)
        data = self.data[self.position : self.position + size]
        self.position += len(data)
        return data


@pytest.mark.parametrize("fmt", [tarfile.PAX_FORMAT, tarfile.GNU_FORMAT])
def test_every_file_comes_whole_and_the_body_is_read_to_its_end(fmt):
    data = archive(FILES, fmt)
    body = Body(data)
    got = list(tar_files(body.read))
    assert got == list(FILES.items())
    assert all(type(content) is bytes for _, content in got)
    assert body.position == len(data)  # the blocks after the archive too: the connection is free
    assert len(FILES["a.bin"]) in body.asked  # a file's bytes were asked for at once


def end_of_files(data: bytes) -> int:
    """Where the archive's end-of-archive blocks start, after the last file's padded bytes."""
    with tarfile.open(fileobj=io.BytesIO(data)) as tar:
        last = tar.getmembers()[-1]
    return last.offset_data + -(-last.size // 512) * 512


@pytest.mark.parametrize("cut", [100, 512, 1024, 1536, 6000, "end", "end+100"])
def test_a_body_cut_anywhere_is_a_read_error(cut):
    data = archive(FILES)
    if isinstance(cut, str):  # where the end-of-archive blocks should come, or inside them
        cut = end_of_files(data) + (100 if cut == "end+100" else 0)
    with pytest.raises(tarfile.ReadError):
        list(tar_files(Body(data[:cut]).read))


def test_an_empty_body_is_a_read_error():
    with pytest.raises(tarfile.ReadError):
        list(tar_files(Body(b"").read))


def axon_tar(files: dict[str, bytes]) -> bytes:
    """A tar as Axon's server frames one (http/archive.py): plain ustar headers where a name
    allows, pax where not, each file padded, two zero blocks."""
    return b"".join(tar_header(name, len(data), 0) + data + tar_padding(len(data)) for name, data in files.items()) + TAR_END


PLAIN = {"a.bin": b"x" * 700, "b/empty.bin": b"", "c.bin": b"y" * 512}


@pytest.mark.parametrize("files", [PLAIN, {**PLAIN, "ü.bin": b"pax", "d.bin": b"after the pax member"}],
                         ids=["plain headers", "a pax header among them"])
def test_axon_tars_are_read_whole_plain_headers_and_others(files):
    data = axon_tar(files)
    body = Body(data)
    assert list(tar_files(body.read)) == list(files.items())
    assert body.position == len(data)


@pytest.mark.parametrize("cut", [512 + 100, 512 + 700, 512 + 1000, 2 * 512 + 1024 + 10])
def test_an_axon_tar_cut_in_a_plain_member_is_a_read_error(cut):
    data = axon_tar(PLAIN)
    with pytest.raises(tarfile.ReadError):
        list(tar_files(Body(data[:cut]).read))
