"""Read a segment list as a stream of bounded chunks, for runtimes that cannot send a file
by descriptor (WSGI, ASGI without zero-copy, TLS).

Small segments are gathered into one chunk (a batch of 32 small files is a handful of writes,
not a hundred); a large slice is read ``chunk_size`` bytes at a time with ``os.pread``, which
needs no seek and lets several parts share one descriptor. Memory stays at one chunk.
"""

from __future__ import annotations

import os
from typing import Iterator

from .errors import FileChanged
from .http.segments import Segment


def read_slice(fd: int, offset: int, count: int) -> bytes:
    data = os.pread(fd, count, offset)
    if len(data) != count:
        # pread may return less only at end of file: the file was truncated under us. The
        # runtime must abort the connection rather than send a part shorter than its length.
        while len(data) < count:
            more = os.pread(fd, count - len(data), offset + len(data))
            if not more:
                raise FileChanged(f"file shrank while streaming (fd {fd}, wanted {count} bytes at {offset})")
            data += more
    return data


def iter_chunks(segments: list[Segment], chunk_size: int) -> Iterator[bytes]:
    pending = bytearray()  # always shorter than chunk_size between steps
    for seg in segments:
        if isinstance(seg, bytes):
            pending += seg
            while len(pending) >= chunk_size:
                yield bytes(pending[:chunk_size])
                del pending[:chunk_size]
            continue
        fd, offset, count = seg
        while count:
            if pending:  # top the pending chunk up
                take = min(count, chunk_size - len(pending))
                pending += read_slice(fd, offset, take)
                if len(pending) >= chunk_size:
                    yield bytes(pending)
                    pending = bytearray()
            else:
                take = min(count, chunk_size)
                if take == chunk_size:  # a whole chunk goes straight out, uncopied
                    yield read_slice(fd, offset, take)
                else:
                    pending += read_slice(fd, offset, take)
            offset += take
            count -= take
    if pending:
        yield bytes(pending)
