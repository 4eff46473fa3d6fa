"""Batches: many items cut into requests the server accepts, and the parts of an answer read back.

``pack`` sizes each batch by what the server says it takes (``GET /api/limits``): at most
``max_files`` items in a JSON body of at most ``max_body_bytes``. ``read_parts`` feeds an answer
to the streaming multipart parser as it arrives and hands each part's bytes to a sink, after
checking that the part is the one asked for (parts come in request order; ``Content-Location``
names the path, ``Content-Range`` the slice). Memory stays what the sinks keep.

A sink is handed read-only ``memoryview``s of the chunks received (the parser's ``views``), not
copies: one that keeps a part copies what it keeps, once.
"""

from __future__ import annotations

from collections.abc import AsyncIterable, Callable, Sequence
from typing import Protocol

from ..batchclient.parts import InOrder
from ..batchclient.reader import BatchReader
from ..batchclient.request import batch_body as body
from ..batchclient.request import compact_json
from ..http.multipart_parser import Part, PartData, PartEnd, PartStart
from .slices import Item

__all__ = ["PartSink", "body", "pack", "read_parts"]

_ENVELOPE = len(b'{"files":[]}')


def pack(items: Sequence[Item], max_files: int, max_body_bytes: int) -> list[list[int]]:
    """The indices of ``items`` cut into consecutive batches of at most ``max_files`` items whose
    :func:`body` is at most ``max_body_bytes``. An item too long for any body is a ValueError."""
    batches: list[list[int]] = []
    current: list[int] = []
    size = _ENVELOPE
    for index, item in enumerate(items):
        cost = len(compact_json(item)) + (1 if current else 0)  # the comma before it
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

    def write(self, data: memoryview) -> None:
        """A piece of the part: a view of a chunk received, valid for ever but holding the
        whole chunk (copy what you keep)."""
        ...

    def finish(self) -> None: ...

    def abort(self) -> None: ...


async def read_parts(
    chunks: AsyncIterable[bytes],
    content_type: str,
    items: Sequence[Item],
    open_sink: Callable[[int, int], PartSink],
) -> None:
    """Read an answer to the batch of ``items`` into sinks.

    ``open_sink(index, first)`` is called as part ``index`` starts, with the offset in the file
    of its first byte. The core reads the answer and checks each part against the item it
    answers (:class:`~axon.batchclient.parts.InOrder`): any mismatch, truncation or malformed
    framing is a :class:`~axon.http.multipart_parser.MultipartError` naming the part (a body that
    is not multipart a :class:`~axon.batchclient.errors.FetchError`), and the sink of the part
    under way is aborted.
    """
    reader = BatchReader(content_type, InOrder(items), max_parts=len(items), whole_parts=True, views=True)
    sink: PartSink | None = None
    try:
        async for chunk in chunks:
            for k, event in reader.feed(chunk):
                kind = type(event)
                if kind is PartData:
                    sink.write(event.data)  # type: ignore[union-attr]  # the parser starts a part first
                elif kind is Part:  # a part whole in one chunk (small files): one event
                    sink = open_sink(k, 0 if event.content_range is None else event.content_range.first)  # type: ignore
                    sink.write(event.data)  # type: ignore[union-attr]
                    sink.finish()
                    sink = None
                elif kind is PartStart:
                    content_range = event.content_range  # type: ignore[union-attr]
                    sink = open_sink(k, 0 if content_range is None else content_range.first)  # type: ignore[arg-type]
                elif kind is PartEnd:
                    sink.finish()  # type: ignore[union-attr]
                    sink = None
        reader.close()
    except BaseException:
        if sink is not None:
            sink.abort()
        raise
