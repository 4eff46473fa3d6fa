"""Packing items into batches by the server's limits, and reading an answer's parts back: byte at
a time and whole, with every way a part can differ from what was asked."""

from __future__ import annotations

import asyncio
import random

import pytest
from multipart_support import BOUNDARY, CONTENT_TYPE, axon_headers, build_body

from axon.fsspec.batches import body, pack, read_parts
from axon.http.multipart_parser import MultipartError


def test_pack_keeps_order_and_every_bound():
    rng = random.Random(3)
    items = [f"dir/{'x' * rng.randrange(1, 40)}-{i}" if i % 3 else {"path": f"p{i}", "offset": -i - 1}
             for i in range(500)]
    for max_files, max_body in [(1000, 1 << 20), (7, 1 << 20), (1000, 400), (3, 200), (1, 100)]:
        batches = pack(items, max_files, max_body)
        assert [i for batch in batches for i in batch] == list(range(len(items)))
        for batch in batches:
            assert 1 <= len(batch) <= max_files
            assert len(body([items[i] for i in batch])) <= max_body
        # Each batch is full: one item more would cross a bound.
        for batch, following in zip(batches, batches[1:]):
            grown = [items[i] for i in batch] + [items[following[0]]]
            assert len(grown) > max_files or len(body(grown)) > max_body


def test_pack_refuses_an_item_no_body_can_hold():
    assert pack([], 10, 100) == []
    with pytest.raises(ValueError, match="alone is longer"):
        pack(["a", "b" * 200], 10, 100)


def part(path: str, data: bytes, content_range: str | None = None, location: str | None = None) -> bytes:
    """One part as Axon frames it (multipart_support), with a Content-Range or another location."""
    headers = [(k, location if k == "Content-Location" and location is not None else v)
               for k, v in axon_headers(path, data)]
    if content_range:
        headers.append(("Content-Range", content_range))
    return build_body([(headers, data)]).removesuffix(END)


END = f"--{BOUNDARY}--\r\n".encode()


class Sink:
    def __init__(self, log, index, first):
        self.log, self.index, self.first, self.data = log, index, first, b""

    def write(self, data):
        self.data += data

    def finish(self):
        self.log.append(("done", self.index, self.first, self.data))

    def abort(self):
        self.log.append(("aborted", self.index, self.data))


def run(stream: bytes, items, step: int | None = None):
    log = []

    async def chunks():
        size = step or len(stream) or 1
        for i in range(0, len(stream), size):
            yield stream[i : i + size]

    asyncio.run(read_parts(chunks(), CONTENT_TYPE, items, lambda i, first: Sink(log, i, first)))
    return log


GOOD = part("a.bin", b"AAAA") + part("d/b c.bin", b"bc", "bytes 3-4/9", "/files/d/b%20c.bin") + part("a.bin", b"") + END
ITEMS = ["a.bin", {"path": "d/b c.bin", "offset": 3, "length": 2}, "a.bin"]


@pytest.mark.parametrize("step", [None, 1, 7, 150])  # whole parts, parts in pieces, and both
def test_parts_reach_their_sinks_in_order(step):
    assert run(GOOD, ITEMS, step) == [
        ("done", 0, 0, b"AAAA"), ("done", 1, 3, b"bc"), ("done", 2, 0, b""),
    ]


@pytest.mark.parametrize("stream, message", [
    (part("other.bin", b"AAAA") + END, "names 'other.bin', not 'a.bin'"),
    (part("a.bin", b"AAAA", "bytes 0-3/4") + END, "a whole file came with a Content-Range"),
    (part("a.bin", b"AAAA") + END, "1 parts for the 2 items"),
    (part("a.bin", b"AAAA") + part("a.bin", b"AAAA") + part("a.bin", b"AAAA") + END, "more than"),
    (part("a.bin", b"AAAA")[:-5], "stream ended"),
])  # fmt: skip
@pytest.mark.parametrize("step", [None, 1])
def test_an_answer_that_is_not_what_was_asked_is_an_error(stream, message, step):
    with pytest.raises(MultipartError, match=message):
        run(stream, ["a.bin", "a.bin"], step)


def test_a_part_cut_short_aborts_its_sink():
    log = []

    async def chunks():
        yield part("a.bin", b"AAAA") + part("a.bin", b"BBBB")[:-4]

    with pytest.raises(MultipartError):
        asyncio.run(read_parts(chunks(), CONTENT_TYPE, ["a.bin"] * 2, lambda i, f: Sink(log, i, f)))
    assert log == [("done", 0, 0, b"AAAA"), ("aborted", 1, b"BB")]
