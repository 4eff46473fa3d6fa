"""A tar answer read as it arrives, each file's bytes put straight into a buffer of its size.

``tarfile`` reads the headers (ustar, pax, GNU: its rules, not a copy of them) from a file that
only goes forward; each member's data is then read by the caller's ``readinto`` into a
``bytearray`` made for it, which is what the reader hands out: no chunk is copied into another
on the way (``tarfile``'s own stream mode joins and slices its buffers for every read).
"""

from __future__ import annotations

import io
import tarfile
from collections.abc import Callable, Iterator

__all__ = ["tar_files"]

ReadInto = Callable[[memoryview], int]  # fills the view from the body; fewer bytes only at its end
_SKIP = 64 * 1024


class _Forward(io.RawIOBase):
    """The body as a file that ``tarfile`` may read, tell and seek forward in."""

    def __init__(self, readinto: ReadInto) -> None:
        self._readinto = readinto
        self.position = 0
        self.ended = False  # a read found the body's end

    def readable(self) -> bool:
        return True

    def readinto(self, buffer: memoryview | bytearray) -> int:  # type: ignore[override]
        view = memoryview(buffer).cast("B")
        count = self._readinto(view)
        self.position += count
        if count < len(view):
            self.ended = True
        return count

    def tell(self) -> int:
        return self.position

    def seek(self, offset: int, whence: int = io.SEEK_SET) -> int:
        if whence != io.SEEK_SET or offset < self.position:
            raise io.UnsupportedOperation("a tar answer is read forward only")
        scratch = memoryview(bytearray(min(_SKIP, offset - self.position)))
        while self.position < offset:
            if not self.readinto(scratch[: offset - self.position]):
                break  # the end: tarfile's next read says the data ended early
        return self.position

    def fill(self, buffer: bytearray) -> int:
        return self.readinto(memoryview(buffer))

    def drain(self) -> None:
        scratch = memoryview(bytearray(_SKIP))
        while self.readinto(scratch):
            pass


def tar_files(readinto: ReadInto) -> Iterator[tuple[str, bytearray]]:
    """Each regular file of the tar body that ``readinto`` reads: its name and its bytes, in a
    ``bytearray`` of its own. The body is read to its end (what follows the archive too, so that
    its connection can carry the next request); a cut or malformed one is ``tarfile.ReadError``,
    one cut between two files too."""
    body = _Forward(readinto)
    archive = tarfile.TarFile(fileobj=body, mode="r")
    while (member := archive.next()) is not None:
        if not member.isfile():
            continue
        body.seek(member.offset_data)
        data = bytearray(member.size)
        if body.fill(data) != member.size:
            raise tarfile.ReadError(f"unexpected end of data in {member.name!r}")
        archive.members.clear()  # tarfile keeps every header it read; one at a time is enough here
        yield member.name, data
    if body.ended:  # tarfile takes a body that ends where a header should be for the archive's end
        raise tarfile.ReadError("the archive ended before its end-of-archive blocks")
    body.drain()
