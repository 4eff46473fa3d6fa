"""Packing items into batches by the server's limits, and reading an answer's parts back: byte at
a time and whole, with every way a part can differ from what was asked; a real server's answer
cut into reads at every position, around every read size, from a reused buffer, and cut short."""

from __future__ import annotations

import asyncio
import http.client
import json
import random

import pytest
from live_server import live_server, runtime_available
from multipart_support import BOUNDARY, CONTENT_TYPE, axon_headers, build_body
from scripted_server import Reply, ScriptedServer

from axon.fsspec import AxonFileSystem
from axon.fsspec.batches import body, pack, read_parts
from axon.fsspec.slices import plan
from axon.fsspec.transfer import Collect
from axon.http.multipart_parser import MultipartError

LIMITS = json.dumps({"max_files": 1000, "max_body_bytes": 1 << 20}).encode()


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


# -- the parts of a real answer, from `axon serve`: every size around a read, every split, views
# of a buffer reused, and a cut anywhere

# Empty parts, and parts just under, at and over the reads of aiohttp (64 KiB) and uvloop (256 KiB).
SIZES = [0, 1, 65535, 65536, 0, 65537, 262144, 262145, (1 << 20) + 7]
SMALL = [0, 1, 40, 0]  # small enough to be cut at every position


@pytest.fixture(scope="module")
def awkward(tmp_path_factory: pytest.TempPathFactory):
    """``axon serve`` on files of every size in SIZES and SMALL: (netloc, {path: bytes})."""
    why = runtime_available("native")
    if why is not None:
        pytest.skip(why)
    root = tmp_path_factory.mktemp("awkward")
    rng = random.Random(37)
    files = {}
    for name, sizes in (("big", SIZES), ("small", SMALL)):
        for i, size in enumerate(sizes):
            files[f"{name}/{i}.bin"] = data = rng.randbytes(size)
            (root / f"{name}/{i}.bin").parent.mkdir(exist_ok=True)
            (root / f"{name}/{i}.bin").write_bytes(data)
    with live_server("native", root) as url:
        yield url.removeprefix("http://"), files


def raw_answer(netloc: str, paths: list[str]) -> tuple[str, bytes]:
    """The batch's Content-Type and body, exactly as the server sent them."""
    host, _, port = netloc.partition(":")
    connection = http.client.HTTPConnection(host, int(port), timeout=30)
    connection.request("POST", "/api/stream-files", json.dumps({"files": paths}), {"Content-Type": "application/json"})
    response = connection.getresponse()
    assert response.status == 200
    answer = response.getheader("Content-Type"), response.read()
    connection.close()
    return answer


def collect(chunks, content_type: str, paths: list[str]) -> list[bytes]:
    """What ``fs.cat`` makes of these chunks: read_parts into its Collect sinks."""
    out: list = [None] * len(paths)

    async def run():
        async def source():
            for chunk in chunks:
                yield chunk

        def sink(k: int, first: int) -> Collect:
            return Collect(out, k, plan(paths[k], None, None), first)

        await read_parts(source(), content_type, paths, sink)

    asyncio.run(run())
    return out


def test_cat_reads_every_size_around_a_read_from_a_real_server(awkward):
    netloc, files = awkward
    paths = [p for p in files if p.startswith("big/")]
    fs = AxonFileSystem(skip_instance_cache=True)
    got = fs.cat([f"{netloc}/{p}" for p in paths])
    assert [got[f"{netloc}/{p}"] for p in paths] == [files[p] for p in paths]
    assert all(type(got[f"{netloc}/{p}"]) is bytes for p in paths)


def test_every_split_of_a_real_answer_gives_the_files(awkward):
    netloc, files = awkward
    paths = [p for p in files if p.startswith("small/")]
    content_type, body = raw_answer(netloc, paths)
    want = [files[p] for p in paths]
    for cut in range(1, len(body)):
        assert collect([body[:cut], body[cut:]], content_type, paths) == want, cut
    assert collect([body[i : i + 1] for i in range(len(body))], content_type, paths) == want


def test_a_part_that_is_exactly_one_read_gives_its_file(awkward):
    netloc, files = awkward
    paths = [p for p in files if p.startswith("big/")]
    content_type, body = raw_answer(netloc, paths)
    at = 0
    for path in paths:  # each part's data is one chunk, the bytes around it two more
        start = body.index(b"\r\n\r\n", body.index(b"Content-Location", at)) + 4
        at = start + len(files[path])
        chunks = [body[:start], body[start:at], body[at:]]
        assert collect([c for c in chunks if c], content_type, paths) == [files[p] for p in paths], path


def reused_buffer(body: bytes, size: int):
    """``body`` read as a ``recv_into`` loop reads it: each chunk a view of one buffer that the
    next read overwrites."""
    buffer = bytearray(size)
    for at in range(0, len(body), size):
        piece = body[at : at + size]
        buffer[: len(piece)] = piece
        yield memoryview(buffer)[: len(piece)]
        buffer[:] = bytes(size)


@pytest.mark.parametrize("size", [1000, 65536, 100_000])
def test_parts_stay_whole_when_the_reads_reuse_one_buffer(awkward, size):
    netloc, files = awkward
    paths = list(files)
    content_type, body = raw_answer(netloc, paths)
    assert collect(reused_buffer(body, size), content_type, paths) == [files[p] for p in paths]


@pytest.mark.parametrize("chunked", [False, True], ids=["content-length", "chunked"])
def test_a_real_answer_relayed_whole_or_cut_anywhere(awkward, chunked):
    """The server's bytes relayed by a scripted server over a real socket: whole they are the
    files (chunked coding too: aiohttp then marks each chunk's end); cut in a header, inside a
    large part, in a delimiter or before the closing one, fs.cat says the batch was cut short."""
    netloc, files = awkward
    paths = [p for p in files if p.startswith("big/")]
    content_type, body = raw_answer(netloc, paths)
    last = body.rindex(b"\r\n--")
    big = body.index(b"\r\n\r\n", body.index(b"big/8.bin")) + 4
    for cut in [None, 10, big - 3, big + 70_000, big + (1 << 20) + 2, last + 3, len(body) - 1]:
        with ScriptedServer() as server:
            reply = Reply(200, [("Content-Type", content_type)], body, cut_after=cut, chunked=chunked)
            server.reply = lambda request: Reply(200, [("Content-Type", "application/json")], LIMITS) \
                if request.path == "/api/limits" else reply
            fs = AxonFileSystem(skip_instance_cache=True)
            relayed = [f"{server.url.removeprefix('http://')}/{p}" for p in paths]
            if cut is None:
                got = fs.cat(relayed)
                assert [got[p] for p in relayed] == [files[p] for p in paths]
                continue
            with pytest.raises(OSError, match=rf"the batch from {server.url[7:]} failed: .*cut short"):
                fs.cat(relayed)

