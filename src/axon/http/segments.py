"""A response body is a list of segments: ``bytes``, a ``FileSlice`` of an open file, or an
``ObjectSlice`` of an object in a remote store.

Runtimes consume the same list their own way (``sendfile``, ``pread`` into chunks, ASGI
zero-copy). Slicing a list by a byte range is pure, and gives Range on single files and batches.
An ``ObjectSlice`` is never handed to a runtime: the App turns a body holding them into a stream
its source fetches (:mod:`axon.storage.object_stream`), so the planners treat remote and local
bytes alike (lengths, framing, ranges) and the runtimes' local paths stay as they are.
"""

from __future__ import annotations

from typing import Any, NamedTuple, Union


class FileSlice(NamedTuple):
    """``count`` bytes of the open file ``fd`` starting at ``offset``."""

    fd: int
    offset: int
    count: int


class ObjectSlice(NamedTuple):
    """``count`` bytes of the remote object ``obj`` (as its source opened it) from ``offset``."""

    obj: Any
    offset: int
    count: int


Segment = Union[bytes, FileSlice, ObjectSlice]


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
                out.append(type(seg)(seg[0], seg.offset + lo - pos, hi - lo))  # FileSlice or ObjectSlice
        pos += size
        if pos >= stop:
            break
    return out

