"""The parser's ``views=True``: part data as read-only memoryviews of what was fed, the same bytes
as the default's at every split, and never a view of a buffer the caller reuses."""

from __future__ import annotations

import pytest
from multipart_support import BOUNDARY, axon_body, axon_headers, build_body, merge_data

from axon.http.multipart_parser import Event, MultipartParser, Part, PartData, PartStart

# Parts of every awkward size: empty, one byte, ones that look like a delimiter, a larger one.
FILES = [
    ("empty.bin", b""),
    ("one.bin", b"x"),
    ("trap.bin", b"\r\n--" + BOUNDARY.encode()[:-1]),
    ("empty-again.bin", b""),
    ("large.bin", bytes(range(256)) * 8),
]
COUNTED = axon_body(FILES)
SCANNED = build_body([([(k, v) for k, v in axon_headers(p, d) if k != "Content-Length"], d) for p, d in FILES])


def events_of(chunks: list, *, views: bool, whole_parts: bool) -> list[Event]:
    """Every event of ``chunks``, each chunk's views checked and copied the moment it is read
    (so that the comparison sees what the reader saw, not what the views show later)."""
    parser = MultipartParser(BOUNDARY, views=views, whole_parts=whole_parts)
    out: list[Event] = []
    for chunk in [*(c for c in chunks if c), b""]:  # b"" ends the input
        for event in parser.feed(chunk):
            if isinstance(event, (PartData, Part)):
                data = event.data
                assert isinstance(data, memoryview) is views
                assert not views or data.readonly
                event = event._replace(data=bytes(data)) if isinstance(event, Part) else PartData(bytes(data))
            out.append(event)
    return merge_data(out)


@pytest.mark.parametrize("body", [COUNTED, SCANNED], ids=["content-length", "scanned"])
@pytest.mark.parametrize("whole_parts", [False, True])
def test_views_are_the_bytes_of_every_split(body: bytes, whole_parts: bool) -> None:
    splits = [[body[:cut], body[cut:]] for cut in range(len(body) + 1)]
    for chunks in [*splits, [body[i : i + 1] for i in range(len(body))]]:
        want = events_of(chunks, views=False, whole_parts=whole_parts)
        assert events_of(chunks, views=True, whole_parts=whole_parts) == want, [len(c) for c in chunks]


def part_bytes(chunks, parser: MultipartParser) -> list[bytes]:
    """Each part's bytes, joined from the views kept until the whole stream was read."""
    parts: list[list] = []
    for chunk in chunks:
        for event in parser.feed(chunk):
            if isinstance(event, Part):
                parts.append([event.data])
            elif isinstance(event, PartData):
                parts[-1].append(event.data)
            elif isinstance(event, PartStart):
                parts.append([])
    parser.close()
    return [b"".join(views) for views in parts]


def reused_buffer(body: bytes, size: int):
    """``body`` read as a ``recv_into`` loop reads it: each chunk a view of one buffer, which
    the next read overwrites (and which is scribbled over once the reader is done with it)."""
    buffer = bytearray(size)
    for at in range(0, len(body), size):
        piece = body[at : at + size]
        buffer[: len(piece)] = piece
        yield memoryview(buffer)[: len(piece)]
        buffer[:] = b"\xee" * size


@pytest.mark.parametrize("size", [1, 7, 64, 1000])
def test_views_never_alias_a_buffer_the_caller_reuses(size: int) -> None:
    want = [data for _, data in FILES]
    for whole_parts in (False, True):
        parser = MultipartParser(BOUNDARY, views=True, whole_parts=whole_parts)
        assert part_bytes(reused_buffer(COUNTED, size), parser) == want

