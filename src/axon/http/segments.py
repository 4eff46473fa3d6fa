"""A response body is a list of segments: ``bytes`` or a ``FileSlice`` of an open file.

Runtimes consume the same list their own way (``sendfile``, ``pread`` into chunks, ASGI
zero-copy). Slicing a list by a byte range is pure, and gives Range on single files and batches.
"""

from __future__ import annotations

from typing import NamedTuple, Union


class FileSlice(NamedTuple):
    """``count`` bytes of the open file ``fd`` starting at ``offset``."""

    fd: int
    offset: int
    count: int


Segment = Union[bytes, FileSlice]


def body_length(segments: list[Segment]) -> int:
    total = 0
    for s in segments:
        total += len(s) if isinstance(s, bytes) else s.count
    return total


def slice_segments(segments: list[Segment], start: int, stop: int) -> list[Segment]:
    """The segments covering bytes ``[start, stop)`` of the body, cut where they must be."""
    out: list[Segment] = []
    pos = 0
    for seg in segments:
        size = len(seg) if isinstance(seg, bytes) else seg.count
        lo, hi = max(start, pos), min(stop, pos + size)
        if lo < hi:
            if isinstance(seg, bytes):
                out.append(seg[lo - pos : hi - pos])
            else:
                out.append(FileSlice(seg.fd, seg.offset + lo - pos, hi - lo))
        pos += size
        if pos >= stop:
            break
    return out

