"""Part heads: Axon's own, read in one match, and any other server's, read by the general steps;
both give the same events, whole or split at every byte, and refuse the same streams."""

from __future__ import annotations

import pytest
from multipart_support import BOUNDARY, axon_body, axon_headers, build_body, parse

from axon.http.multipart import frame, part_headers
from axon.http.multipart_parser import _AXON_HEAD, MultipartError, MultipartParser, Part, PartData, PartStart

FILES = [("a.bin", b"hello"), ("dir/b b.bin", b"\r\n--" + BOUNDARY.encode()[:5]), ("c.bin", b"")]


def server_body(files: list[tuple[str, bytes]]) -> bytes:
    """A batch framed by Axon's own server code (http/multipart.py), as ``axon serve`` sends it."""
    segments = frame(BOUNDARY, [(part_headers(path, path, "application/octet-stream"), data) for path, data in files])
    return b"".join(segments)


def whole(events: list) -> list[tuple]:
    """Each part as (headers, path, data), from a Part or from PartStart, PartData..., PartEnd."""
    out: list[tuple] = []
    for event in events:
        if isinstance(event, Part):
            out.append((event.start.headers, event.path, bytes(event.data)))
        elif isinstance(event, PartData):
            headers, path, data = out[-1]
            out[-1] = (headers, path, data + bytes(event.data))
        elif isinstance(event, PartStart):
            out.append((event.headers, event.path, b""))
    return out


def every_split(body: bytes, **options) -> list[list[tuple]]:
    """The parts of ``body`` fed whole, cut in two at every byte, and one byte at a time."""
    cuts = [[body]] + [[body[:at], body[at:]] for at in range(1, len(body))] + [[body[i : i + 1] for i in range(len(body))]]
    return [whole(parse(chunks, whole_parts=True, **options)) for chunks in cuts]


def test_axon_servers_heads_are_read_in_one_match() -> None:
    body = server_body(FILES)
    heads = [at + len(BOUNDARY) + 2 for at in range(len(body)) if body.startswith(b"--" + BOUNDARY.encode(), at)]
    assert [_AXON_HEAD.match(body, at) is not None for at in heads] == [True] * len(FILES) + [False]
    assert axon_body(FILES) == body  # the tests' bodies are laid out as the server's
    events = MultipartParser(BOUNDARY, whole_parts=True).feed(body)
    assert [type(e) for e in events[:-1]] == [Part] * len(FILES)
    assert [(e.path, e.data, e.start.filename, e.content_length) for e in events[:-1]] == [
        (path, data, path.rsplit("/", 1)[-1], len(data)) for path, data in FILES]


def heads(path: str, data: bytes) -> dict[str, list[tuple[str, str]]]:
    axon = axon_headers(path, data)
    return {
        "axon": axon,
        "length first": [axon[3], *axon[:3]],
        "extra field": [*axon[:2], ("X-Trace", "t1"), *axon[2:]],
        "lower case": [(k.lower(), v) for k, v in axon],
        "upper case": [(k.upper(), v) for k, v in axon],
        "no content type": axon[1:],
    }


SPACED = {  # raw head lines, as other servers space them: the values read are the same
    "no space": b"Content-Type:application/octet-stream\r\nContent-Location:/files/x.bin\r\nContent-Length:3\r\n",
    "tabs and trailing space": b"Content-Type:\tapplication/octet-stream \r\nContent-Disposition: attachment \t\r\n"
                               b"Content-Location:  /files/x.bin\r\nContent-Length: 3  \r\n",
    "axon's order, white space at the ends": b"Content-Type: application/octet-stream \r\n"
                                             b"Content-Disposition: attachment\r\n"
                                             b"Content-Location: /files/x.bin\t\r\nContent-Length: 3\r\n",
}


@pytest.mark.parametrize("kind", list(heads("x", b"")))
def test_other_servers_heads_give_the_same_parts_at_every_split(kind: str) -> None:
    body = build_body([(heads(path, data)[kind], data) for path, data in FILES])
    results = every_split(body)
    want = [(tuple(heads(path, data)[kind]), path, data) for path, data in FILES]
    assert all(result == want for result in results)


@pytest.mark.parametrize("kind", list(SPACED))
def test_spacing_of_other_servers_is_read_as_rfc_9110_has_it(kind: str) -> None:
    part = f"--{BOUNDARY}\r\n".encode() + SPACED[kind] + b"\r\nabc\r\n"
    body = part + axon_body([("y.bin", b"y")])  # then Axon's own head, after a foreign one
    results = every_split(body)
    assert all([(path, data) for _, path, data in result] == [("x.bin", b"abc"), ("y.bin", b"y")] for result in results)
    assert all(value == value.strip(" \t") for _, value in results[0][0][0])


REFUSED = {
    "a folded line": (build_body([([("Content-Type", "a"), ("Content-Location", "/files/a.bin\r\n b"),
                                    ("Content-Length", "1")], b"x")]), "folded"),
    "a length too short": (build_body([(axon_headers("a.bin", b"hello", length=4), b"hello")]), "boundary does not follow"),
    "a length too long": (build_body([(axon_headers("a.bin", b"hello", length=6), b"hello")]), "boundary does not follow"),
    "a path not UTF-8": (build_body([(axon_headers("a.bin", b"x")[:2] + [("Content-Location", "/files/%ff"),
                                                                         ("Content-Length", "1")], b"x")]),
                         "not percent-encoded UTF-8"),
    "a bare LF in a value": (axon_body(FILES).replace(b"attachment;", b"attach\nment;", 1), "bare CR or LF"),
}


@pytest.mark.parametrize("kind", list(REFUSED))
def test_axon_heads_refuse_what_the_general_reading_refuses(kind: str) -> None:
    body, message = REFUSED[kind]
    for chunks in ([body], [body[i : i + 1] for i in range(len(body))]):
        with pytest.raises(MultipartError, match=message):
            parse(chunks, whole_parts=True)


def test_axon_heads_keep_the_limits() -> None:
    body = axon_body(FILES)
    with pytest.raises(MultipartError, match="more than 2 parts") as caught:
        parse([body], whole_parts=True, max_parts=2)
    assert caught.value.part_index == 2
    sizes = [len("".join(f"{k}: {v}\r\n" for k, v in axon_headers(*file))) + 2 for file in FILES]
    parts = whole(parse([body], whole_parts=True, max_header_bytes=max(sizes)))
    assert [data for _, _, data in parts] == [data for _, data in FILES]
    with pytest.raises(MultipartError, match="exceed"):
        parse([body], whole_parts=True, max_header_bytes=max(sizes) - 1)
