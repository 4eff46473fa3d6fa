"""The streaming multipart parser: framing, splits, truncation, limits, byteranges, memory."""

from __future__ import annotations

import io
import random
import re
import tracemalloc
import zlib
from email.encoders import encode_noop
from email.generator import BytesGenerator
from email.mime.application import MIMEApplication
from email.mime.multipart import MIMEMultipart
from email.parser import BytesParser
from email.policy import HTTP

import pytest
from multipart_support import BOUNDARY, axon_body, axon_headers, build_body, merge_data, parse, random_splits, rechunk
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from axon.http.multipart_parser import (
    ContentRange,
    MultipartError,
    MultipartParser,
    Part,
    PartData,
    PartEnd,
    PartStart,
    State,
    StreamEnd,
    boundary_from_content_type,
    requested_path,
)

# Bodies meant to look like a delimiter without being one.
TRAPS = [
    b"",
    b"x",
    b"\r\n",
    b"\r\n--",
    b"\r\n--" + BOUNDARY.encode()[:-1],
    b"--" + BOUNDARY.encode(),  # not preceded by CRLF: not a delimiter
    b"\r\r\n-\r\n--axon\r",
    bytes(range(256)) * 3,
]

TWO_FILES = axon_body([("a.bin", b"hello"), ("dir/b b.bin", b"\r\n--" + BOUNDARY.encode()[:5] + b"world")])


def payloads(events: list) -> list[bytes]:
    return [e.data for e in events if isinstance(e, PartData)]


def no_length(headers: list[tuple[str, str]]) -> list[tuple[str, str]]:
    return [(k, v) for k, v in headers if k != "Content-Length"]


# -- framing


def test_axon_body_gives_the_expected_events() -> None:
    events = parse([TWO_FILES])
    assert [type(e) for e in events] == [
        PartStart,
        PartData,
        PartEnd,
        PartStart,
        PartData,
        PartEnd,
        StreamEnd,
    ]
    first, second = events[0], events[3]
    assert isinstance(first, PartStart) and isinstance(second, PartStart)
    assert (first.index, second.index) == (0, 1)
    assert first.content_length == 5 and first.path == "a.bin" and first.filename == "a.bin"
    assert second.content_location == "/files/dir/b%20b.bin" and second.path == "dir/b b.bin"
    assert second.content_type == "application/octet-stream"
    assert payloads(events) == [b"hello", b"\r\n--" + BOUNDARY.encode()[:5] + b"world"]


@pytest.mark.parametrize("counted", [True, False], ids=["content-length", "scanned"])
def test_trap_bodies_come_back_intact(counted: bool) -> None:
    parts = []
    for i, data in enumerate(TRAPS):
        headers = axon_headers(f"t{i}", data)
        parts.append((headers if counted else no_length(headers), data))
    events = parse([build_body(parts)])
    assert payloads(events) == [d for d in TRAPS if d]  # empty parts send no PartData
    assert sum(isinstance(e, PartEnd) for e in events) == len(TRAPS)


def test_whole_and_byte_by_byte_give_identical_events() -> None:
    for body in (
        TWO_FILES,
        build_body([(no_length(axon_headers(f"t{i}", d)), d) for i, d in enumerate(TRAPS)]),
    ):
        whole = parse([body])
        assert parse([body[i : i + 1] for i in range(len(body))]) == whole
        assert parse([bytearray(body)]) == whole
        assert parse([memoryview(body)]) == whole


SPLIT_CORPUS = [
    TWO_FILES,
    build_body([(no_length(axon_headers(f"t{i}", d)), d) for i, d in enumerate(TRAPS)]),
    build_body([(axon_headers(f"t{i}", d), d) for i, d in enumerate(TRAPS)]),
    b"preamble to ignore\r\n" + TWO_FILES + b"epilogue to ignore",
    f"--{BOUNDARY}--\r\n".encode(),  # no parts at all
    f"--{BOUNDARY}  \t\r\n\r\nbody\r\n--{BOUNDARY}--".encode(),  # padding, no headers
]


@settings(max_examples=150, deadline=None, database=None)
@given(st.sampled_from(range(len(SPLIT_CORPUS))), st.randoms(use_true_random=False))
def test_random_splits_give_identical_events(index: int, rng: random.Random) -> None:
    body = SPLIT_CORPUS[index]
    assert parse(random_splits(body, rng, max_piece=rng.choice([1, 7, 64, 4096]))) == parse([body])


@pytest.mark.slow  # hypothesis, many examples
@settings(max_examples=100, deadline=None, database=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    st.lists(st.tuples(st.binary(max_size=300), st.booleans()), max_size=6),
    st.randoms(use_true_random=False),
)
def test_generated_parts_round_trip_under_random_splits(parts: list, rng: random.Random) -> None:
    body = build_body(
        [
            (axon_headers(f"f{i}", data) if counted else no_length(axon_headers(f"f{i}", data)), data)
            for i, (data, counted) in enumerate(parts)
        ]
    )
    events = parse(random_splits(body, rng, max_piece=rng.choice([1, 3, 50, 1000])))
    starts = [e for e in events if isinstance(e, PartStart)]
    assert [s.path for s in starts] == [f"f{i}" for i in range(len(parts))]
    # Re-assemble each part's data between its PartStart and PartEnd.
    got, current = [], None
    for event in events:
        if isinstance(event, PartStart):
            current = b""
        elif isinstance(event, PartData):
            current += event.data
        elif isinstance(event, PartEnd):
            got.append(current)
    assert got == [data for data, _ in parts]
    assert events[-1] == StreamEnd()


# -- header lines, against RFC 9110 read independently of the parser's patterns

TOKEN_CHARS = set("!#$%&'*+-.^_`|~0123456789abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ")


def expected_headers(lines: list[str]) -> tuple[tuple[str, str], ...] | None:
    """A field line is a token, a colon, and a value of visible characters, spaces and tabs
    (Latin-1 octets allowed) between optional whitespace; None when any line is not."""
    headers = []
    for line in lines:
        name, colon, value = line.partition(":")
        if not colon or not name or not set(name) <= TOKEN_CHARS:
            return None
        if any(c in "\x7f\r\n" or (c < " " and c != "\t") for c in value):
            return None
        headers.append((name, value.strip(" \t")))
    return tuple(headers)


# Names and values around the edges: whitespace to strip or keep, Latin-1, controls, colons.
HEADER_NAMES = st.sampled_from(["Content-Type", "X-a.b", "x", "!#$%&'*+-.^_`|~", "", "Na me", "N\x00", "é", " X"])
HEADER_VALUES = st.text(st.sampled_from(["a", " ", "\t", ":", "é", "\xff", "\x00", "\x1f", "\x7f", "\r", "%", '"']),
                        max_size=8)


@settings(max_examples=300, deadline=None, database=None)
@given(st.lists(st.tuples(HEADER_NAMES, HEADER_VALUES), max_size=4), st.booleans())
def test_header_lines_are_read_as_rfc_9110_has_them(fields: list[tuple[str, str]], colon_space: bool) -> None:
    lines = [f"{name}:{' ' if colon_space else ''}{value}" for name, value in fields]
    body = (f"--{BOUNDARY}\r\n" + "".join(f"{line}\r\n" for line in lines) + f"\r\nxy\r\n--{BOUNDARY}--").encode("latin-1")
    expected = expected_headers(lines)
    for chunks in ([body], [body[i : i + 1] for i in range(len(body))]):
        if expected is None:
            with pytest.raises(MultipartError):
                parse(chunks)
        else:
            start = parse(chunks)[0]
            assert isinstance(start, PartStart) and start.headers == expected


# -- streams written by the standard library's email package


def email_stream(parts: list[tuple[str, bytes]], *, with_length: bool) -> tuple[str, bytes]:
    """(Content-Type, body) of a multipart/mixed message flattened by email.generator (CRLF)."""
    outer = MIMEMultipart("mixed")
    for path, data in parts:
        part = MIMEApplication(data, _encoder=encode_noop)
        part["Content-Transfer-Encoding"] = "binary"
        part["Content-Location"] = path
        if with_length:
            part["Content-Length"] = str(len(data))
        outer.attach(part)
    out = io.BytesIO()
    BytesGenerator(out, policy=HTTP).flatten(outer)
    head, _, body = out.getvalue().partition(b"\r\n\r\n")
    return outer["Content-Type"], body


# The generator rewrites line endings inside payloads, so these use CRLF only.
EMAIL_PARTS = [
    ("a.bin", b"plain text\r\nsecond line\r\n"),
    ("b.bin", b""),
    ("c.bin", b"\x00\x01\xfe\xff binary \x7f"),
    ("d.bin", b"--looks like a boundary\r\n--\r\n"),
]


@pytest.mark.parametrize("with_length", [True, False])
def test_email_generator_streams_parse(with_length: bool) -> None:
    content_type, body = email_stream(EMAIL_PARTS, with_length=with_length)
    boundary = boundary_from_content_type(content_type)
    events = parse([body], boundary)
    starts = [e for e in events if isinstance(e, PartStart)]
    assert [s.path for s in starts] == [p for p, _ in EMAIL_PARTS]
    assert all(s.get("MIME-Version") == "1.0" for s in starts)
    # The email package's own parser is the independent oracle for the payloads.
    oracle = BytesParser(policy=HTTP).parsebytes(f"Content-Type: {content_type}\r\n\r\n".encode() + body)
    expected = [part.get_payload(decode=True) for part in oracle.iter_parts()]
    assert expected == [d for _, d in EMAIL_PARTS]
    got, current = [], b""
    for event in events:
        if isinstance(event, PartData):
            current += event.data
        elif isinstance(event, PartEnd):
            got.append(current)
            current = b""
    assert got == expected


# -- truncation and malformed input


TRUNCATIONS = {
    "empty": b"",
    "preamble only": b"some preamble without a boundary",
    "mid first delimiter": f"--{BOUNDARY[:5]}".encode(),
    "after first delimiter": f"--{BOUNDARY}".encode(),
    "mid headers": TWO_FILES[: TWO_FILES.index(b"Content-Disposition") + 5],
    "mid counted part": TWO_FILES[: TWO_FILES.index(b"hello") + 2],
    "mid boundary after counted part": TWO_FILES[: TWO_FILES.index(b"hello") + 5 + 6],
    "missing closing delimiter": TWO_FILES[: TWO_FILES.rindex(b"--" + BOUNDARY.encode())],
    "closing delimiter cut": TWO_FILES[: TWO_FILES.rindex(b"--\r\n") + 1],
    "mid scanned part": build_body([(no_length(axon_headers("s.bin", b"0123456789")), b"0123456789")])[:-30],
}


@pytest.mark.parametrize("body", TRUNCATIONS.values(), ids=TRUNCATIONS.keys())
@pytest.mark.parametrize("how", ["close", "feed-empty"])
def test_truncated_streams_raise(body: bytes, how: str) -> None:
    parser = MultipartParser(BOUNDARY)
    for i in range(len(body)):
        parser.feed(body[i : i + 1])
    with pytest.raises(MultipartError, match="ended"):
        parser.close() if how == "close" else parser.feed(b"")
    with pytest.raises(MultipartError):
        parser.feed(b"more")  # a failed parser stays failed


def test_truncation_error_names_the_part_and_its_path() -> None:
    parser = MultipartParser(BOUNDARY)
    parser.feed(TWO_FILES[: TWO_FILES.index(b"world")])
    with pytest.raises(MultipartError) as caught:
        parser.close()
    assert caught.value.part_index == 1
    assert caught.value.path == "dir/b b.bin"
    assert "part 1 ('dir/b b.bin')" in str(caught.value)
    assert isinstance(caught.value, ValueError)


@pytest.mark.parametrize("declared", [4, 6, 100])
def test_wrong_content_length_raises(declared: int) -> None:
    body = build_body([(axon_headers("a.bin", b"hello", length=declared), b"hello")])
    with pytest.raises(MultipartError, match="part 0 \\('a.bin'\\)"):
        parse([body])


def test_content_length_shorter_than_data_fails_as_soon_as_the_boundary_is_missing() -> None:
    parser = MultipartParser(BOUNDARY)
    body = build_body([(axon_headers("a.bin", b"hello", length=3), b"hello")])
    with pytest.raises(MultipartError, match="longer or shorter"):
        parser.feed(body[: body.index(b"hello") + 4])  # before the stream even ends


def one_part(after_delimiter: str) -> bytes:
    """A body whose only part starts with ``after_delimiter`` (padding, headers, data)."""
    return f"--{BOUNDARY}{after_delimiter}\r\n--{BOUNDARY}--".encode()


MALFORMED = {
    "junk after boundary": one_part("junk\r\n\r\n"),
    "header without colon": one_part("\r\nno colon here\r\n\r\n"),
    "space before colon": one_part("\r\nName : v\r\n\r\n"),
    "folded header": one_part("\r\nA: b\r\n c\r\n\r\n"),
    "bare LF in headers": one_part("\r\nA: b\nC: d\r\n\r\n"),
    "NUL in header value": one_part("\r\nA: b\x00\r\n\r\n"),
    "negative length": one_part("\r\nContent-Length: -1\r\n\r\n"),
    "signed length": one_part("\r\nContent-Length: +0\r\n\r\n"),
    "non-ascii digits": one_part("\r\nContent-Length: ²\r\n\r\n"),
    "conflicting lengths": one_part("\r\nContent-Length: 0\r\ncontent-length: 1\r\n\r\n"),
    "bad percent-encoding": one_part("\r\nContent-Location: %ff\r\n\r\n"),
    "delimiter inside scanned data": one_part(f"\r\n\r\nab\r\n--{BOUNDARY}x"),
}


@pytest.mark.parametrize("body", MALFORMED.values(), ids=MALFORMED.keys())
def test_malformed_streams_raise(body: bytes) -> None:
    with pytest.raises(MultipartError):
        parse([body])
    with pytest.raises(MultipartError):
        parse([body[i : i + 1] for i in range(len(body))])


def test_repeated_identical_content_length_is_accepted() -> None:
    body = f"--{BOUNDARY}\r\nContent-Length: 2\r\nContent-Length: 2\r\n\r\nok\r\n--{BOUNDARY}--".encode()
    assert payloads(parse([body])) == [b"ok"]


def test_epilogue_and_data_after_the_end_are_ignored() -> None:
    parser = MultipartParser(BOUNDARY)
    events = parser.feed(TWO_FILES + b"epilogue")
    assert events[-1] == StreamEnd() and parser.state is State.DONE
    assert parser.feed(b"more epilogue") == []
    assert parser.close() == [] and parser.feed(b"") == []



# -- whole parts: one event for a part that arrived in one feed


def unfold(events: list) -> list:
    """Each Part as the three events it stands for (no PartData for an empty part), merged."""
    out: list = []
    for event in events:
        if isinstance(event, Part):
            out += [event.start, PartData(event.data), PartEnd()] if event.data else [event.start, PartEnd()]
        else:
            out.append(event)
    return merge_data(out)


def test_whole_parts_come_as_one_event_each() -> None:
    events = parse([TWO_FILES], whole_parts=True)
    assert [type(e) for e in events] == [Part, Part, StreamEnd]
    assert [(e.start.path, e.path, e.data) for e in events[:2]] == [
        ("a.bin", "a.bin", b"hello"), ("dir/b b.bin", "dir/b b.bin", b"\r\n--" + BOUNDARY.encode()[:5] + b"world")]
    ranged = parse([byteranges_body(b"0123456789", [(2, 4)], with_length=True)], whole_parts=True)[0]
    assert isinstance(ranged, Part) and ranged.content_range == ContentRange(2, 4, 10) and ranged.data == b"234"
    # A part without Content-Length, or one whose delimiter is not yet followed by "--" or CRLF
    # (padding after it, or the feed ends there), comes as before.
    scanned = build_body([(no_length(axon_headers("s.bin", b"xy")), b"xy")])
    assert [type(e) for e in parse([scanned], whole_parts=True)] == [PartStart, PartData, PartEnd, StreamEnd]
    padded = TWO_FILES.replace(b"hello\r\n--" + BOUNDARY.encode() + b"\r\n", b"hello\r\n--" + BOUNDARY.encode() + b" \r\n")
    assert [type(e) for e in parse([padded], whole_parts=True)][:4] == [PartStart, PartData, PartEnd, Part]
    cut = TWO_FILES.index(b"hello") + len(b"hello\r\n--" + BOUNDARY.encode()) + 1
    assert [type(e) for e in MultipartParser(BOUNDARY, whole_parts=True).feed(TWO_FILES[:cut])] == [PartStart, PartData]


@pytest.mark.slow  # hypothesis, many examples
@settings(max_examples=150, deadline=None, database=None)
@given(st.sampled_from(range(len(SPLIT_CORPUS))), st.randoms(use_true_random=False))
def test_whole_parts_stand_for_the_events_of_any_split(index: int, rng: random.Random) -> None:
    body = SPLIT_CORPUS[index]
    chunks = random_splits(body, rng, max_piece=rng.choice([1, 7, 64, 4096, len(body) or 1]))
    events = parse(chunks, whole_parts=True)
    assert unfold(events) == parse([body])
    assert all((e.path, e.content_range) == (e.start.path, e.start.content_range) for e in events if isinstance(e, Part))


@pytest.mark.parametrize("body", [*MALFORMED.values(), *(build_body([(axon_headers("a.bin", b"hello", length=n), b"hello")])
                                                        for n in (4, 6, 100))])
def test_whole_parts_refuse_what_parts_refuse(body: bytes) -> None:
    with pytest.raises(MultipartError):
        parse([body], whole_parts=True)
    with pytest.raises(MultipartError, match="more than 1 parts"):
        parse([TWO_FILES], whole_parts=True, max_parts=1)


# -- limits


def test_header_limit() -> None:
    headers = [("X-Pad", "p" * 1000)]
    body = build_body([(headers, b"x")])
    block = len(b"X-Pad: " + b"p" * 1000 + b"\r\n\r\n")
    assert payloads(parse([body], max_header_bytes=block)) == [b"x"]
    with pytest.raises(MultipartError, match="exceed 1000 bytes"):
        parse([body], max_header_bytes=1000)
    with pytest.raises(MultipartError, match="exceed"):  # noticed before the block ends
        parser = MultipartParser(BOUNDARY, max_header_bytes=100)
        parser.feed(body[:300])


def test_header_limit_bounds_what_is_held_back() -> None:
    parser = MultipartParser(BOUNDARY, max_header_bytes=64)
    parser.feed(f"--{BOUNDARY}\r\n".encode())
    with pytest.raises(MultipartError):
        for _ in range(100):
            parser.feed(b"X-Endless: header line\r\n")
            assert parser.buffered_bytes <= 64 + len(b"X-Endless: header line\r\n")


def test_part_count_limit() -> None:
    body = build_body([([], b"")] * 5)
    assert len(parse([body], max_parts=5)) == 5 * 2 + 1
    with pytest.raises(MultipartError, match="more than 4 parts") as caught:
        parse([body], max_parts=4)
    assert caught.value.part_index == 4


# -- multipart/byteranges


def byteranges_body(content: bytes, spans: list[tuple[int, int]], *, with_length: bool) -> bytes:
    parts = []
    for first, last in spans:
        headers = [("Content-Type", "text/plain"), ("Content-Range", f"bytes {first}-{last}/{len(content)}")]
        if with_length:
            headers.append(("Content-Length", str(last - first + 1)))
        parts.append((headers, content[first : last + 1]))
    return build_body(parts)


@pytest.mark.parametrize("with_length", [True, False])
def test_byteranges(with_length: bool) -> None:
    content = bytes(range(256)) * 4
    spans = [(0, 9), (500, 1023), (100, 100)]
    body = byteranges_body(content, spans, with_length=with_length)
    assert boundary_from_content_type(f"multipart/byteranges; boundary={BOUNDARY}") == BOUNDARY
    for chunks in ([body], random_splits(body, random.Random(5), 40)):
        events = parse(chunks)
        ranges = [e.content_range for e in events if isinstance(e, PartStart)]
        assert ranges == [ContentRange(first, last, 1024) for first, last in spans]
        assert [r.span for r in ranges] == [10, 524, 1]
        assert payloads(events) == [content[first : last + 1] for first, last in spans]


def test_byteranges_length_disagreements_raise() -> None:
    content = b"0123456789"
    scanned_short = build_body([([("Content-Range", "bytes 0-9/10")], content[:8])])
    with pytest.raises(MultipartError, match="Content-Range promised 10"):
        parse([scanned_short])
    both_disagree = build_body([([("Content-Range", "bytes 0-9/10"), ("Content-Length", "8")], content[:8])])
    with pytest.raises(MultipartError, match="Content-Range covers 10"):
        parse([both_disagree])


@pytest.mark.parametrize("value", ["bytes 5-4/10", "bytes 0-10/10", "bytes */10", "items 0-1/2", "bytes 0-1"])
def test_invalid_content_range_raises(value: str) -> None:
    with pytest.raises(MultipartError, match="Content-Range"):
        parse([build_body([([("Content-Range", value)], b"xy")])])


def test_unknown_complete_length() -> None:
    (start, *_) = parse([build_body([([("Content-Range", "bytes 2-3/*")], b"xy")])])
    assert isinstance(start, PartStart) and start.content_range == ContentRange(2, 3, None)


# -- header helpers


def test_part_start_helpers() -> None:
    start = PartStart(
        0,
        (
            ("content-disposition", "attachment; filename=\"_.bin\"; filename*=UTF-8''%E2%82%AC%20x.bin"),
            ("Content-Location", "a%2520b/%E2%82%AC.bin"),
        ),
    )
    assert start.filename == "€ x.bin"  # filename* preferred
    assert start.path == "a%20b/€.bin"  # decoded exactly once
    assert start.get("CONTENT-LOCATION") == "a%2520b/%E2%82%AC.bin"
    assert start.content_length is None and start.content_range is None and start.content_type is None
    assert (
        PartStart(0, (("Content-Disposition", 'attachment; filename="plain.bin"'),)).filename == "plain.bin"
    )
    assert PartStart(0, ()).filename is None


# Paths whose Content-Location takes some decoding: '%', spaces, non-ASCII, a literal "%2e%2e",
# and names that themselves hold "files".
LOCATION_PATHS = ["a.bin", "dir/b b.bin", "100%/x%41 %zz.bin", "naïve/résumé ü 名前.txt", "%2e%2e/x.bin",
                  "files/a.bin", "dir/files/x"]


@pytest.mark.parametrize("legacy", [False, True], ids=["files-url", "older-server"])
@pytest.mark.parametrize("path", LOCATION_PATHS)
def test_both_content_location_forms_give_the_requested_path(path: str, legacy: bool) -> None:
    """Current servers send ``/files/<path>`` (a URL that fetches the file), older ones ``<path>``:
    both map back to the path as requested, decoded exactly once."""
    start = parse([axon_body([(path, b"x")], legacy=legacy)])[0]
    assert isinstance(start, PartStart)
    assert start.content_location.startswith("/files/") is not legacy
    assert start.path == path
    # The parser's errors name the same path.
    with pytest.raises(MultipartError, match=re.escape(f"part 0 ({path!r})")):
        parse([axon_body([(path, b"x")], legacy=legacy)[:-10]])


@pytest.mark.parametrize(
    "location, path",
    [("/files/a%2Fb", "a/b"), ("/files//etc/x", "/etc/x"), ("/files/../x", "../x"), ("/api/x", "/api/x"),
     ("/Files/x", "/Files/x"), ("http://host/files/x", "http://host/files/x"), ("/files%2Fx", "/files/x")],
)
def test_other_content_locations_are_decoded_as_they_are(location: str, path: str) -> None:
    """Only the leading "/files/" is taken off; whatever is left is for the caller to refuse
    (an absolute path or a ".." is never written, a path not asked for is not accepted)."""
    assert requested_path(location) == path


@pytest.mark.parametrize(
    "content_type, boundary",
    [
        (f"multipart/mixed; boundary={BOUNDARY}", BOUNDARY),
        ('multipart/mixed; boundary="with space:and=more"', "with space:and=more"),
        ('Multipart/Byteranges; charset=x; boundary="b"', "b"),
    ],
)
def test_boundary_from_content_type(content_type: str, boundary: str) -> None:
    assert boundary_from_content_type(content_type) == boundary
    assert MultipartParser.from_content_type(content_type).feed(f"--{boundary}--".encode()) == [StreamEnd()]


@pytest.mark.parametrize(
    "content_type",
    [
        "application/json",
        "multipart/mixed",
        'multipart/mixed; boundary=""',
        "multipart/mixed; boundary=" + "x" * 71,
        'multipart/mixed; boundary="bad\\\\char"',
        'multipart/mixed; boundary="semi;colon"',
    ],
)
def test_boundary_from_content_type_refuses(content_type: str) -> None:
    with pytest.raises(MultipartError):
        boundary_from_content_type(content_type)


# -- constant memory


def big_stream(block: bytes, blocks_per_part: int, parts: int) -> tuple[list, int]:
    """Pieces of a multipart body whose parts repeat ``block``, alternating counted and scanned;
    also the CRC of all the part data. Nothing here is larger than one block."""
    pieces: list = []
    crc = 0
    for i in range(parts):
        headers = axon_headers(f"big{i}.bin", b"", length=len(block) * blocks_per_part)
        if i % 2:
            headers = no_length(headers)
        pieces.append(build_body([(headers, b"")])[: -len(f"\r\n--{BOUNDARY}--\r\n")])
        pieces.append((block, blocks_per_part))
        pieces.append(b"\r\n")
    pieces.append(f"--{BOUNDARY}--\r\n".encode())
    for _ in range(parts):
        for _ in range(blocks_per_part):
            crc = zlib.crc32(block, crc)
    return pieces, crc


def expand(pieces: list):
    for piece in pieces:
        if isinstance(piece, tuple):
            block, count = piece
            for _ in range(count):
                yield block
        else:
            yield piece


@pytest.mark.slow  # parses 256 MiB
def test_256_mib_stream_in_64_kib_chunks_uses_constant_memory() -> None:
    chunk = 64 * 1024
    block = random.Random(1).randbytes(chunk - 7)  # misaligned, so delimiters straddle chunks
    pieces, expected_crc = big_stream(block, blocks_per_part=(256 << 20) // 4 // len(block), parts=4)
    parser = MultipartParser(BOUNDARY)
    crc, total, largest_buffer, largest_event, parts = 0, 0, 0, 0, 0
    tracemalloc.start()
    try:
        for piece in rechunk(expand(pieces), chunk):
            for event in parser.feed(piece):
                if isinstance(event, PartData):
                    crc = zlib.crc32(event.data, crc)
                    total += len(event.data)
                    largest_event = max(largest_event, len(event.data))
                elif isinstance(event, PartEnd):
                    parts += 1
            largest_buffer = max(largest_buffer, parser.buffered_bytes)
        parser.close()
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert parts == 4 and total >= 255 << 20 and crc == expected_crc
    assert largest_buffer <= 256  # a header block at most; inside bodies, under one delimiter
    assert largest_event <= chunk + len(f"\r\n--{BOUNDARY}")  # a chunk, plus what was held back
    assert peak < 1 << 20  # the whole run, test harness included, stayed under 1 MiB
