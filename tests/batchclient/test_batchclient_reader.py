"""The core reads an answer with no socket: chunks in, checked events out, whole or a byte at a
time, and each part refused before a byte of it is handed on."""

from __future__ import annotations

import pytest
from multipart_support import CONTENT_TYPE, axon_body, axon_headers, build_body, replaced

from axon.batchclient.errors import FetchError, UnsafePathError
from axon.batchclient.parts import AnyOrder, InOrder
from axon.batchclient.reader import BatchReader
from axon.http.multipart_parser import MultipartError, Part, PartData, PartEnd, PartStart

FILES = [("a.bin", b"alpha" * 100), ("dir/b.bin", b"bravo"), ("a.bin", b"")]


def read(body: bytes, check, step: int | None = None, **options) -> list[tuple[object, object]]:
    """(key, what) for each part: its bytes once it ended."""
    reader = BatchReader(CONTENT_TYPE, check, content_length=len(body), **options)
    got, current, data = [], None, b""
    size = step or len(body)
    for i in range(0, len(body), size):
        for key, event in reader.feed(body[i : i + size]):
            if isinstance(event, Part):
                got.append((key, event.data))
            elif isinstance(event, PartStart):
                current, data = key, b""
            elif isinstance(event, PartData):
                data += event.data
            elif isinstance(event, PartEnd):
                got.append((current, data))
    reader.close()
    return got


@pytest.mark.parametrize("step", [None, 1, 7])
def test_any_order_keys_each_part_by_its_path(step):
    body = axon_body(FILES)
    assert read(body, AnyOrder([p for p, _ in FILES]), step) == FILES


@pytest.mark.parametrize("step", [None, 1, 7])
def test_in_order_keys_each_part_by_its_position(step):
    body = axon_body(FILES)
    expected = [(k, data) for k, (_, data) in enumerate(FILES)]
    assert read(body, InOrder([p for p, _ in FILES]), step, whole_parts=True) == expected


def test_a_part_is_refused_only_when_its_turn_comes():
    body = axon_body([("a.bin", b"fine"), ("other.bin", b"unasked")])
    reader = BatchReader(CONTENT_TYPE, AnyOrder(["a.bin"]))
    events = reader.feed(body)
    assert next(events) == ("a.bin", PartStart(0, tuple(axon_headers("a.bin", b"fine"))))
    assert [type(event) for _, event in [next(events), next(events)]] == [PartData, PartEnd]
    with pytest.raises(MultipartError, match="not requested"):
        next(events)


@pytest.mark.parametrize("location, error", [("../x", UnsafePathError), ("/etc/x", UnsafePathError),
                                             ("y", MultipartError)])
def test_any_order_refuses_hostile_and_unasked_names(location, error):
    headers = replaced(axon_headers("x", b"evil"), "Content-Location", location)
    with pytest.raises(error):
        read(build_body([(headers, b"evil")]), AnyOrder(["x"]))


def test_any_order_needs_a_length_and_every_file():
    no_length = [(k, v) for k, v in axon_headers("a.bin", b"x") if k != "Content-Length"]
    with pytest.raises(MultipartError, match="no Content-Length"):
        read(build_body([(no_length, b"x")]), AnyOrder(["a.bin"]))
    with pytest.raises(MultipartError, match="did not send 1 requested file"):
        read(axon_body([("a.bin", b"x")]), AnyOrder(["a.bin", "b.bin"]))


def test_in_order_refuses_a_part_out_of_place():
    with pytest.raises(MultipartError, match="names 'b.bin', not 'a.bin'"):
        read(axon_body([("b.bin", b"B"), ("a.bin", b"A")]), InOrder(["a.bin", "b.bin"]))


def test_the_body_must_be_as_long_as_announced():
    body = axon_body([("a.bin", b"x")])
    reader = BatchReader(CONTENT_TYPE, AnyOrder(["a.bin"]), content_length=len(body) - 1)
    with pytest.raises(FetchError, match="longer than its Content-Length"):
        list(reader.feed(body))
    reader = BatchReader(CONTENT_TYPE, AnyOrder(["a.bin"]), content_length=len(body) + 1)
    list(reader.feed(body))
    with pytest.raises(FetchError, match="ended after"):
        reader.close()


def test_a_body_that_is_not_multipart_is_a_fetch_error():
    with pytest.raises(FetchError, match="multipart"):
        BatchReader("application/json", AnyOrder(["a.bin"]))


def test_a_reader_restored_from_a_snapshot_goes_on_where_it_stood():
    body = axon_body(FILES)
    cut = len(body) // 2
    first = BatchReader(CONTENT_TYPE, AnyOrder([p for p, _ in FILES]), content_length=len(body))
    list(first.feed(body[:cut]))
    check = AnyOrder([p for p, _ in FILES])
    check.take("a.bin")  # the part under way at the cut
    again = BatchReader(CONTENT_TYPE, check, content_length=len(body), parser=first.parser.snapshot(), body_bytes=cut)
    keys = [key for key, event in again.feed(body[cut:]) if isinstance(event, PartStart)]
    again.close()
    assert keys == ["dir/b.bin", "a.bin"] and again.body_bytes == len(body)
