"""Batches: many items cut into requests the server accepts, and the parts of an answer read back.

``pack`` sizes each batch by what the server says it takes (``GET /api/limits``): at most
``max_files`` items in a JSON body of at most ``max_body_bytes``. ``read_parts`` feeds an answer
to the streaming multipart parser as it arrives and hands each part's bytes to a sink, after
checking that the part is the one asked for (parts come in request order; ``Content-Location``
names the path, ``Content-Range`` the slice). Memory stays what the sinks keep.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterable, Callable, Sequence
from typing import Protocol

from ..http.multipart_parser import ContentRange, MultipartError, MultipartParser, Part, PartData, PartEnd, PartStart, StreamEnd
from .slices import Item, check_part

__all__ = ["PartSink", "body", "pack", "read_parts"]

_ENVELOPE = len(b'{"files":[]}')


# One encoder for every call: json.dumps with options other than its defaults builds a new one
# each time, which costs more than encoding a path (pack encodes each item).
_ENCODER = json.JSONEncoder(ensure_ascii=True, separators=(",", ":"))


def _json(value: object) -> bytes:
    return _ENCODER.encode(value).encode("ascii")


def body(items: Sequence[Item]) -> bytes:
    """The ``POST /api/stream-files`` body naming ``items``."""
    return _json({"files": list(items)})


def pack(items: Sequence[Item], max_files: int, max_body_bytes: int) -> list[list[int]]:
    """The indices of ``items`` cut into consecutive batches of at most ``max_files`` items whose
    :func:`body` is at most ``max_body_bytes``. An item too long for any body is a ValueError."""
    batches: list[list[int]] = []
    current: list[int] = []
    size = _ENVELOPE
    for index, item in enumerate(items):
        cost = len(_json(item)) + (1 if current else 0)  # the comma before it
        if current and (len(current) >= max_files or size + cost > max_body_bytes):
            batches.append(current)
            current, size, cost = [], _ENVELOPE, cost - 1
        if size + cost > max_body_bytes:
            raise ValueError(f"the item {item!r} alone is longer than the server's {max_body_bytes}-byte body limit")
        current.append(index)
        size += cost
    if current:
        batches.append(current)
    return batches


class PartSink(Protocol):
    """Where one part's bytes go: ``write`` as they arrive, ``finish`` once the part is whole,
    ``abort`` if the stream fails before that."""

    def write(self, data: bytes) -> None: ...

    def finish(self) -> None: ...

    def abort(self) -> None: ...


async def read_parts(
    chunks: AsyncIterable[bytes],
    content_type: str,
    paths: Sequence[str],
    items: Sequence[Item],
    open_sink: Callable[[int, int], PartSink],
) -> None:
    """Read an answer to the batch of ``items`` (asking for ``paths``) into sinks.

    ``open_sink(index, first)`` is called as part ``index`` starts, with the offset in the file
    of its first byte. Any mismatch, truncation or malformed framing is a :class:`MultipartError`
    naming the part, and the sink of the part under way is aborted.
    """
    parser = MultipartParser.from_content_type(content_type, max_parts=len(items), whole_parts=True)
    sink: PartSink | None = None
    started = 0

    def begin(index: int, path: str | None, content_range: ContentRange | None) -> PartSink:
        _check(index, path, content_range, paths[started], items[started])
        return open_sink(started, 0 if content_range is None else content_range.first)

    try:
        async for chunk in chunks:
            for event in parser.feed(chunk):
                if isinstance(event, Part):  # a part whole in one chunk (small files): one event
                    sink = begin(event.start.index, event.path, event.content_range)
                    started += 1
                    sink.write(event.data)
                    sink.finish()
                    sink = None
                elif isinstance(event, PartData):
                    sink.write(event.data)  # type: ignore[union-attr]  # the parser starts a part first
                elif isinstance(event, PartStart):
                    sink = begin(event.index, event.path, event.content_range)
                    started += 1
                elif isinstance(event, PartEnd):
                    sink.finish()  # type: ignore[union-attr]
                    sink = None
                elif isinstance(event, StreamEnd):
                    pass
        parser.close()
        if started != len(items):
            raise MultipartError(f"the answer holds {started} parts for the {len(items)} items asked")
    except BaseException:
        if sink is not None:
            sink.abort()
        raise


def _check(index: int, named: str | None, content_range: ContentRange | None, path: str, item: Item) -> None:
    """Part ``index`` (its Content-Location ``named``) must answer ``item``, which asked for ``path``."""
    if named != path:
        raise MultipartError(f"Content-Location names {named!r}, not {path!r}", part_index=index, path=path)
    why = check_part(item, content_range)
    if why is not None:
        raise MultipartError(why, part_index=index, path=path)
