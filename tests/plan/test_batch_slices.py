"""plan_batch with slices of files: each a segment of its file, framed with its Content-Range;
whole files framed as before; every refusal (416, 400, 413) before the first byte.

Bodies are rendered (FileSlices read with pread) and parsed back twice: by the standard
library's ``email`` package and by Axon's own streaming parser, which the clients use.
"""

from __future__ import annotations

import random

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from axon.errors import HTTPError
from axon.http.multipart_parser import MultipartParser, PartData, PartEnd, PartStart, StreamEnd
from axon.limits import Limits
from axon.plan.batch import plan_batch
from axon.plan.formats import tar, zip_stored
from axon.plan.slices import Slice
from axon.storage.local import FileStore

LIMITS = Limits()
KEY = b"k" * 32


def _render_parts(response, render):
    """The body read back by MultipartParser: [(PartStart, bytes)]."""
    headers = dict(response.headers)
    body = render(response.body)
    assert headers["Content-Length"] == str(len(body))
    parser = MultipartParser.from_content_type(headers["Content-Type"])
    parts, current = [], None
    events = parser.feed(body) + parser.feed(b"")
    for event in events:
        if isinstance(event, PartStart):
            current = [event, b""]
        elif isinstance(event, PartData):
            current[1] += event.data
        elif isinstance(event, PartEnd):
            parts.append(tuple(current))
    assert isinstance(events[-1], StreamEnd)
    return parts


def test_a_sliced_part_byte_exact(store, render):
    r = plan_batch(store, ["a.txt"], LIMITS, boundary="BOUNDARY", slices=[Slice(7, 4)])
    try:
        assert render(r.body) == (
            b"--BOUNDARY\r\n"
            b"Content-Type: text/plain; charset=utf-8\r\n"
            b"Content-Disposition: attachment; filename=\"a.txt\"; filename*=UTF-8''a.txt\r\n"
            b"Content-Location: /files/a.txt\r\n"
            b"Content-Range: bytes 7-10/12\r\n"
            b"Content-Length: 4\r\n"
            b"\r\n"
            b"axon"
            b"\r\n--BOUNDARY--\r\n"
        )
    finally:
        r.close()


def test_slices_and_whole_files_in_one_batch(root, store, render, parse_multipart, open_fds):
    before = open_fds()
    paths = ["b.bin", "a.txt", "b.bin", "sub/c.json", "b.bin", "b.bin"]
    slices = [Slice(1000, 64), None, Slice(-8, None), None, Slice(10_000, 5000), Slice(0, None)]
    spans = [(1000, 1064), None, (10232, 10240), None, (10_000, 10_240), (0, 10_240)]
    r = plan_batch(store, paths, LIMITS, key=KEY, slices=slices)
    try:
        assert len(r.files) == 3  # a path named four times is opened once
        parts = _render_parts(r, render)
        assert [start.path for start, _ in parts] == paths
        for (start, data), path, span in zip(parts, paths, spans):
            content = (root / path).read_bytes()
            if span is None:
                assert start.content_range is None and data == content
            else:
                assert data == content[span[0]:span[1]]
                assert (start.content_range.first, start.content_range.last + 1) == span
                assert start.content_range.complete_length == len(content)
                assert start.content_length == span[1] - span[0]
        # The standard library reads the same parts.
        email_parts = parse_multipart(dict(r.headers)["Content-Type"], render(r.body))
        assert [p.get_payload(decode=True) for p in email_parts] == [d for _, d in parts]
    finally:
        r.close()
    assert open_fds() <= before


def test_whole_file_parts_are_framed_as_without_slices(store, render):
    # A batch of whole files given slices=[None, ...] is today's batch, to the byte and the tag.
    plain = plan_batch(store, ["a.txt", "b.bin"], LIMITS, key=KEY)
    same = plan_batch(store, ["a.txt", "b.bin"], LIMITS, key=KEY, slices=[None, None])
    sliced = plan_batch(store, ["a.txt", "b.bin"], LIMITS, key=KEY, slices=[None, Slice(0, 10)])
    try:
        assert plain.headers == same.headers and render(plain.body) == render(same.body)
        etag = dict(plain.headers)["ETag"]
        assert dict(sliced.headers)["ETag"] != etag
        # The whole file's part is the same bytes in both (the boundary aside).
        whole_part = _render_parts(plain, render)[0]
        assert _render_parts(sliced, render)[0][1] == whole_part[1]
        assert _render_parts(sliced, render)[0][0].headers == whole_part[0].headers
    finally:
        for r in (plain, same, sliced):
            r.close()


def test_two_batches_differing_in_a_slice_differ(store):
    tags = set()
    for sliced in (Slice(0, 10), Slice(0, 11), Slice(1, 10), Slice(-10, None), Slice(0, None)):
        r = plan_batch(store, ["b.bin"], LIMITS, key=KEY, slices=[sliced])
        r.close()
        tags.add(dict(r.headers)["ETag"])
    assert len(tags) == 5


def test_unsatisfiable_slices_are_one_416_before_the_first_byte(store, open_fds):
    before = open_fds()
    with pytest.raises(HTTPError) as info:
        plan_batch(store, ["a.txt", "b.bin", "empty.txt", "b.bin"], LIMITS,
                   slices=[Slice(12, None), Slice(0, 5), Slice(-1, None), Slice(20_000, 1)])
    err = info.value
    assert (err.status, err.code) == (416, "range_not_satisfiable")
    assert err.paths == ["a.txt", "empty.txt", "b.bin"]
    assert {d["path"]: d["size"] for d in err.details} == {"a.txt": 12, "empty.txt": 0, "b.bin": 10240}
    assert open_fds() <= before


def test_a_missing_file_is_a_404_before_its_slice_is_judged(store):
    with pytest.raises(HTTPError) as info:
        plan_batch(store, ["nope.bin", "a.txt"], LIMITS, slices=[Slice(0, 1), Slice(99, None)])
    assert info.value.status == 404


@pytest.mark.parametrize("fmt", [zip_stored, tar])
def test_archives_refuse_slices(store, fmt, open_fds):
    before = open_fds()
    with pytest.raises(HTTPError) as info:
        plan_batch(store, ["a.txt", "b.bin"], LIMITS, fmt=fmt, slices=[None, Slice(0, 1)])
    assert (info.value.status, info.value.code) == (400, "slices_need_multipart")
    assert open_fds() <= before
    # Whole files only: the archive as always.
    plan_batch(store, ["a.txt"], LIMITS, fmt=fmt, slices=[None]).close()


def test_batch_bytes_count_what_is_sent(store):
    limits = Limits(max_batch_bytes=100)
    plan_batch(store, ["b.bin", "b.bin"], limits, slices=[Slice(0, 50), Slice(-50, None)]).close()
    with pytest.raises(HTTPError) as info:
        plan_batch(store, ["b.bin", "b.bin"], limits, slices=[Slice(0, 50), Slice(-51, None)])
    assert (info.value.status, info.value.code) == (413, "batch_too_large")
    with pytest.raises(HTTPError):  # a whole file counts whole
        plan_batch(store, ["b.bin"], limits, slices=[None])


def test_every_item_counts_against_max_files(store):
    limits = Limits(max_files=2)
    with pytest.raises(HTTPError) as info:
        plan_batch(store, ["b.bin"] * 3, limits, slices=[Slice(0, 1)] * 3)
    assert (info.value.status, info.value.code) == (413, "too_many_files")


def test_range_over_a_batch_with_slices(store, render):
    slices = [Slice(5, 100), None, Slice(-3, None)]
    whole = plan_batch(store, ["b.bin", "a.txt", "sub/c.json"], LIMITS, key=KEY, slices=slices)
    body = render(whole.body)
    etag = dict(whole.headers)["ETag"]
    whole.close()
    r = plan_batch(store, ["b.bin", "a.txt", "sub/c.json"], LIMITS, key=KEY, slices=slices,
                   headers={"range": "bytes=150-", "if-range": etag})
    try:
        assert r.status == 206
        assert dict(r.headers)["Content-Range"] == f"bytes 150-{len(body) - 1}/{len(body)}"
        assert render(r.body) == body[150:]
    finally:
        r.close()


# -- any list of slices: the parts are the slices ---------------------------------------------

_DATA = {f"f{i}.bin": random.Random(i).randbytes(size) for i, size in enumerate([0, 1, 7, 300, 5000])}


@pytest.fixture(scope="module")
def data_store(tmp_path_factory):
    base = tmp_path_factory.mktemp("slices")
    for name, data in _DATA.items():
        (base / name).write_bytes(data)
    return FileStore(base)


_slices = st.one_of(
    st.none(),
    st.builds(Slice, st.integers(-6000, 6000).filter(lambda o: o < 0), st.none()),
    st.builds(Slice, st.integers(0, 6000), st.one_of(st.none(), st.integers(1, 6000))),
)


@pytest.mark.slow  # hypothesis, many examples
@given(st.lists(st.tuples(st.sampled_from(sorted(_DATA)), _slices), min_size=1, max_size=12))
@settings(max_examples=200, deadline=None)
def test_any_slice_list_gives_the_slices(data_store, render, items):
    paths = [p for p, _ in items]
    slices = [s for _, s in items]
    expected = []
    for path, sliced in items:
        data = _DATA[path]
        if sliced is None:
            expected.append(data)
        elif not data or sliced.offset >= len(data):
            expected = None  # unsatisfiable: the batch is a 416
            break
        elif sliced.offset < 0:
            expected.append(data[sliced.offset:])
        else:
            stop = None if sliced.length is None else sliced.offset + sliced.length
            expected.append(data[sliced.offset:stop])
    if expected is None:
        with pytest.raises(HTTPError) as info:
            plan_batch(data_store, paths, LIMITS, key=KEY, slices=slices)
        assert info.value.status == 416
        return
    r = plan_batch(data_store, paths, LIMITS, key=KEY, slices=slices)
    try:
        parts = _render_parts(r, render)
        assert [d for _, d in parts] == expected
        for (start, data), sliced, path in zip(parts, slices, paths):
            assert start.path == path
            assert (start.content_range is None) == (sliced is None)
            if sliced is not None:
                cr = start.content_range
                assert _DATA[path][cr.first:cr.last + 1] == data and cr.complete_length == len(_DATA[path])
    finally:
        r.close()
