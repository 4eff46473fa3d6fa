"""Builders for multipart bodies in Axon's wire layout, and a collector for parser events.

The bodies are written here by hand from the wire contract (not by Axon's server code), so the
client is checked against the contract rather than against the server's own framing.
"""

from __future__ import annotations

import random
from collections.abc import Iterable, Iterator, Sequence
from urllib.parse import quote

from axon.http.multipart_parser import Event, MultipartParser, PartData

BOUNDARY = "axon-test-7f3a9c2e51d04b68"
CONTENT_TYPE = f"multipart/mixed; boundary={BOUNDARY}"

Headers = Sequence[tuple[str, str]]


def axon_headers(path: str, data: bytes, *, length: int | None = None, legacy: bool = False) -> list[tuple[str, str]]:
    """A part's headers as an Axon server sends them, in its order (``length`` overrides
    Content-Length): Content-Location is the file's URL under ``/files/``, or with ``legacy``
    (older servers) the requested path alone."""
    name = path.rsplit("/", 1)[-1]
    ascii_name = name.encode("ascii", "replace").decode().replace('"', "_").replace("?", "_")
    return [
        ("Content-Type", "application/octet-stream"),
        ("Content-Disposition", f"attachment; filename=\"{ascii_name}\"; filename*=UTF-8''{quote(name)}"),
        ("Content-Location", ("" if legacy else "/files/") + quote(path, safe="/")),
        ("Content-Length", str(len(data) if length is None else length)),
    ]


def replaced(headers: Headers, name: str, value: str) -> list[tuple[str, str]]:
    """``headers`` with the value of ``name`` replaced, in its place."""
    return [(k, value if k == name else v) for k, v in headers]


def build_body(parts: Iterable[tuple[Headers, bytes]], boundary: str = BOUNDARY) -> bytes:
    """``--B\\r\\n<headers>\\r\\n\\r\\n<data>\\r\\n`` for each part, then ``--B--\\r\\n``."""
    out = []
    for headers, data in parts:
        head = "".join(f"{name}: {value}\r\n" for name, value in headers)
        out.append(f"--{boundary}\r\n{head}\r\n".encode("latin-1") + data + b"\r\n")
    out.append(f"--{boundary}--\r\n".encode())
    return b"".join(out)


def axon_body(files: Sequence[tuple[str, bytes]], boundary: str = BOUNDARY, *, legacy: bool = False) -> bytes:
    return build_body([(axon_headers(path, data, legacy=legacy), data) for path, data in files], boundary)


def random_splits(data: bytes, rng: random.Random, max_piece: int = 64) -> list[bytes]:
    pieces, pos = [], 0
    while pos < len(data):
        size = rng.randint(1, max_piece)
        pieces.append(data[pos : pos + size])
        pos += size
    return pieces


def parse(chunks: Iterable[bytes], boundary: str = BOUNDARY, **options: int | bool) -> list[Event]:
    """Feed ``chunks`` then end the input; consecutive PartData are merged so that events from
    different splits of the same stream compare equal. ``options``: the parser's keywords."""
    parser = MultipartParser(boundary, **options)  # type: ignore[arg-type]
    events: list[Event] = []
    for chunk in chunks:
        events += parser.feed(chunk)
    events += parser.close()
    return merge_data(events)


def merge_data(events: Iterable[Event]) -> list[Event]:
    merged: list[Event] = []
    for event in events:
        if isinstance(event, PartData) and merged and isinstance(merged[-1], PartData):
            merged[-1] = PartData(merged[-1].data + event.data)
        else:
            merged.append(event)
    return merged


def rechunk(pieces: Iterable[bytes], size: int) -> Iterator[bytes]:
    """Re-cut a stream of pieces into chunks of exactly ``size`` bytes (the last may be short)."""
    pending = bytearray()
    for piece in pieces:
        pending += piece
        while len(pending) >= size:
            yield bytes(pending[:size])
            del pending[:size]
    if pending:
        yield bytes(pending)
