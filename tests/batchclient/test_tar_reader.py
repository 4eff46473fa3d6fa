"""axon.batchclient.tar_reader: the files of a tar as tarfile wrote them, each in a buffer of its
own, from a body that only goes forward; a body cut anywhere is a ReadError."""

from __future__ import annotations

import io
import tarfile

import pytest

from axon.batchclient.tar_reader import tar_files

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
    """A body read in pieces of at most ``step`` bytes, as a socket gives them."""

    def __init__(self, data: bytes, step: int = 1000) -> None:
        self.data, self.step, self.position = data, step, 0
        self.fills: list[int] = []

    def readinto(self, view: memoryview) -> int:
        """As the transport's: fills the view unless the body ends."""
        filled = 0
        while filled < len(view) and self.position < len(self.data):
            count = min(self.step, len(view) - filled, len(self.data) - self.position)
            view[filled : filled + count] = self.data[self.position : self.position + count]
            filled += count
            self.position += count
        self.fills.append(len(view))
        return filled


@pytest.mark.parametrize("fmt", [tarfile.PAX_FORMAT, tarfile.GNU_FORMAT])
def test_every_file_comes_whole_in_a_bytearray_and_the_body_is_read_to_its_end(fmt):
    data = archive(FILES, fmt)
    body = Body(data, step=777)
    got = list(tar_files(body.readinto))
    assert [name for name, _ in got] == list(FILES)
    assert [bytes(content) for _, content in got] == list(FILES.values())
    assert all(type(content) is bytearray for _, content in got)
    assert body.position == len(data)  # the blocks after the archive too: the connection is free
    assert len(FILES["a.bin"]) in body.fills  # a file's bytes were asked for at once, into its buffer


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
        list(tar_files(Body(data[:cut]).readinto))


def test_an_empty_body_is_a_read_error():
    with pytest.raises(tarfile.ReadError):
        list(tar_files(Body(b"").readinto))
