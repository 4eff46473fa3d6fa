"""A tar answer read as it arrives, each file's bytes read into one ``bytes`` object of its size.

A plain ustar header as Axon's server writes it is read by :func:`~axon.http.archive.plain_ustar_member`,
beside the function that writes it; from the first other block on (pax, GNU, another writer's
header, the end), ``tarfile`` reads the headers (its rules, not a copy of them) from a file that
only goes forward. Each member's data is asked for at once, ``read(size)``, which the
transport answers with ``http.client``'s buffered reader: it makes the ``bytes`` object and has
the socket fill it, so no chunk is copied into another on the way (``tarfile``'s own stream mode
reads 10 KiB at a time and joins and slices its buffers for every read). ``bytes``, not a
buffer of our own: what a reader of a file expects (hashable, pickled as they are between a
``DataLoader``'s processes, where a ``bytearray`` goes as a latin-1 string).
"""

from __future__ import annotations

import io
import tarfile
from collections.abc import Callable, Iterator
from tarfile import BLOCKSIZE

from ..http.archive import plain_ustar_member

__all__ = ["tar_files"]

Read = Callable[[int], bytes]  # up to n bytes of the body: n unless it ended
_SKIP = 64 * 1024


class _Forward:
    """The body as a file that ``tarfile`` may read, tell and seek forward in."""

    def __init__(self, read: Read) -> None:
        self._read = read
        self.position = 0
        self.ended = False  # a read found the body's end
        self._back = b""  # given back by unread, read again first

    def read(self, size: int = -1) -> bytes:
        if size < 0:
            raise io.UnsupportedOperation("a tar answer is read by the size of what comes next")
        if self._back:
            data, self._back = self._back[:size], self._back[size:]
            if len(data) < size and not self.ended:
                data += self._read(size - len(data))
        else:
            data = self._read(size)
        self.position += len(data)
        if len(data) < size:
            self.ended = True
        return data

    def unread(self, data: bytes) -> None:
        """Give back what the last read returned: the next read returns it again."""
        self._back = data + self._back
        self.position -= len(data)

    def tell(self) -> int:
        return self.position

    def seek(self, offset: int, whence: int = io.SEEK_SET) -> int:
        if whence != io.SEEK_SET or offset < self.position:
            raise io.UnsupportedOperation("a tar answer is read forward only")
        while self.position < offset and self.read(min(_SKIP, offset - self.position)):
            pass  # at the end: tarfile's next read says the data ended early
        return self.position

    def drain(self) -> None:
        while self.read(_SKIP):
            pass


def tar_files(read: Read) -> Iterator[tuple[str, bytes]]:
    """Each regular file of the tar body that ``read`` reads: its name and its bytes. The body is
    read to its end (what follows the archive too, so that its connection can carry the next
    request); a cut or malformed one is ``tarfile.ReadError``, one cut between two files too."""
    body = _Forward(read)
    # The headers Axon's server writes for plain names (http/archive.py) are read here; from the
    # first other block on (a pax or GNU header, another writer's, the end), tarfile reads.
    while (member := plain_ustar_member(block := body.read(BLOCKSIZE))) is not None:
        name, size = member
        data = body.read(size)
        if len(data) != size or (size % BLOCKSIZE and len(body.read(BLOCKSIZE - size % BLOCKSIZE)) != -size % BLOCKSIZE):
            raise tarfile.ReadError(f"unexpected end of data in {name!r}")
        yield name, data
    body.unread(block)
    archive = tarfile.TarFile(fileobj=body, mode="r")
    for member in archive:  # not next(): once it has found the end it would read on
        if not member.isfile():
            continue
        body.seek(member.offset_data)
        data = body.read(member.size)
        if len(data) != member.size:
            raise tarfile.ReadError(f"unexpected end of data in {member.name!r}")
        archive.members.clear()  # tarfile keeps every header it read; one at a time is enough here
        yield member.name, data
    if body.ended:  # tarfile takes a body that ends where a header should be for the archive's end
        raise tarfile.ReadError("the archive ended before its end-of-archive blocks")
    body.drain()
