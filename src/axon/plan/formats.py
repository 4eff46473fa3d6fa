"""Batch formats: how one batch of files becomes one body. A format is one function.

It is given the batch key, an optional caller-chosen boundary, and its files' signatures (plain
facts, in request order, no descriptor: :data:`~axon.http.batch_identity.Signature`), and returns
a :data:`Layout`: the batch's ``ETag``, its ``Content-Type``, the file name a browser saves it
under, and the N + 1 blocks of bytes that
go before, between and after its N files. The planner (:func:`axon.plan.batch.plan_batch`) puts
each file's segment between the blocks, so the exact length is known before a byte is sent,
``Range`` and ``If-Range`` work on every format alike. What a format says of one file version
(a part's headers, its record in the identity) is kept, not made again for every batch.

``multipart/mixed`` is the first; tar and zip (:mod:`axon.http.archive` frames them) are the
same shape: a tar header before each file and its padding after, a zip's local headers and its
central directory at the end. A zip entry declares its CRC-32 before its bytes, so the formats
in :data:`NEEDS_CRC` are also given each file's CRC-32 (the planner asks the storage layer,
which keeps them per file version); the others get ``()``.

Each file is one entry named by its path as requested, normalized (no leading ``/``, no ``.``
or ``..``): a batch naming one path twice has two parts, two tar entries of the same name (an
extractor keeps the last), and two zip entries of the same name (``zipfile`` lists both, ``unzip``
asks before overwriting), so the layout of a batch is always one entry per requested path.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Callable, Optional

from ..http.archive import (
    TAR_END, tar_header, tar_padding, zip_central_record, zip_end, zip_entry, zip_local_header,
)
from ..http.batch_identity import (
    KeptSignature, Signature, has_slices, identity_from, identity_of, plain_signature, record_of,
)
from ..http.multipart import (
    CACHED_PATH_CHARS, CACHED_TEXT_BYTES, PER_FILE_CACHE, file_part_headers, frame, new_boundary, part_headers,
)
from ..http.ranges import content_range

#: (ETag or None without a key, Content-Type, file name, the N + 1 blocks around the N files)
Layout = tuple[Optional[str], str, str, tuple[bytes, ...]]
#: (key or None, boundary or None, signatures, CRC-32s or ()) -> Layout
Format = Callable[[Optional[bytes], Optional[str], tuple[Signature, ...], tuple[int, ...]], Layout]


def multipart_mixed(
    key: bytes | None, boundary: str | None, signatures: tuple[Signature, ...], crcs: tuple[int, ...] = ()
) -> Layout:
    """RFC 2046 ``multipart/mixed``, one part per file (:mod:`axon.http.multipart` frames it).
    With a key, its identity names the ETag and the boundary; without one, the batch has no
    ETag and a random boundary (or the one given)."""
    sliced = has_slices(signatures)
    if signatures and not sliced:
        return _whole_files(key, boundary, signatures)
    if key is None:
        etag, boundary = None, boundary or new_boundary()
    else:
        identity = identity_of(key, signatures, boundary)
        etag, boundary = identity.etag, identity.boundary
    # Each file stands in as its length: all that frame() needs of it. A
    # signature with a span (a slice of the file) frames that span, and says so.
    if sliced:
        parts = [_whole_part(s) if s.span is None else _sliced_part(s) for s in signatures]
    else:
        parts = [_whole_part(s) for s in signatures]
    framed = frame(boundary, parts)
    # The name the article's own ``curl -o`` gives a batch.
    return etag, f"multipart/mixed; boundary={boundary}", "batch.multipart", tuple(framed[0::2])  # type: ignore[arg-type]


def _whole_files(key: bytes | None, boundary: str | None, signatures: tuple[Signature, ...]) -> Layout:
    """``multipart_mixed`` of whole files, the common case, from what is kept per file version
    (:func:`_piece`): the bytes :func:`~axon.http.multipart.frame` would make, in one pass."""
    pieces = _pieces(signatures)
    if key is None:
        etag, boundary = None, boundary or new_boundary()
    else:
        identity = identity_from(key, [record for record, _ in pieces], boundary)
        etag, boundary = identity.etag, identity.boundary
    between = f"\r\n--{boundary}\r\n".encode("ascii")
    blocks = [between + lines for _, lines in pieces]
    blocks[0] = blocks[0][2:]  # the first delimiter has no CRLF before it
    blocks.append(f"\r\n--{boundary}--\r\n".encode("ascii"))
    return etag, f"multipart/mixed; boundary={boundary}", "batch.multipart", tuple(blocks)


def _pieces(signatures: tuple[Signature, ...]) -> list[tuple[bytes, bytes]]:
    """Each whole file's piece (:func:`_piece`), kept for its version when it can be."""
    # A hit is one lookup, no call of ours: the common case of a busy pool. A kept signature (a
    # trusted file's) is found in _KEPT by identity, a plain one in _PIECES by its facts.
    kept, known = _KEPT.get, _PIECES.get
    return [(kept(s) if type(s) is KeptSignature else known(s)) or _piece(s) for s in signatures]


def prepare_steps(fmt: Format, signatures: tuple[Signature, ...], every: int) -> Iterator[None]:
    """Make what ``fmt`` keeps per file version for ``signatures``, ``every`` files at a time,
    stopping after each slice: the format then frames the batch at a lookup a file. (Only
    ``multipart/mixed`` of whole files keeps anything; an archive is framed in one go.)"""
    if fmt is not multipart_mixed or has_slices(signatures):
        return
    for start in range(0, len(signatures), every):
        _pieces(signatures[start:start + every])
        yield


def _piece_of(s: Signature) -> tuple[bytes, bytes]:
    """One whole file's record in the batch identity, and its part's header lines to the blank line."""
    return record_of(s, cached=False), f"{part_headers(s.path, s.name, s.content_type)}Content-Length: {s.size}\r\n\r\n".encode("ascii")


#: Pieces by signature (a file version): emptied when full, as wire.py's header blocks (cheaper
#: per lookup than an LRU; a hot set fills it again at once). Kept signatures, one object per
#: version that storage keeps (:class:`~axon.http.batch_identity.KeptSignature`), have a table of
#: their own and the same bound: a file seen before its storage kept its signature is in both,
#: sharing one piece, and neither table empties the other's.
_PIECES: dict[Signature, tuple[bytes, bytes]] = {}
_KEPT: dict[KeptSignature, tuple[bytes, bytes]] = {}


def _piece(s: Signature) -> tuple[bytes, bytes]:
    """:func:`_piece_of` of a version not in its table, kept there unless its path or texts are
    long (``CACHED_PATH_CHARS``, ``CACHED_TEXT_BYTES``)."""
    table = _PIECES
    if type(s) is KeptSignature:
        table = _KEPT
        piece = _PIECES.get(plain_signature(s))  # the same facts, seen before they were kept
        if piece is not None:
            _keep(table, s, piece)
            return piece
    piece = _piece_of(s)
    if len(s.path) + len(s.name) <= CACHED_PATH_CHARS and len(piece[0]) + len(piece[1]) <= CACHED_TEXT_BYTES:
        _keep(table, s, piece)
    return piece


def _keep(table: dict, s: Signature, piece: tuple[bytes, bytes]) -> None:
    if len(table) >= PER_FILE_CACHE:
        table.clear()
    # A plain signature is kept as a plain tuple (equal to it, and hashed alike): the collector
    # stops tracking a tuple of strings and numbers, never a NamedTuple, which each collection
    # of the old generation would walk, once a file of the table (docs/design-notes.md).
    table[s if type(s) is KeptSignature else tuple(s)] = piece


def _whole_part(s: Signature) -> tuple[str, int]:
    return file_part_headers(s.path, s.name, s.content_type), s.size


def _sliced_part(s: Signature) -> tuple[str, int]:
    start, stop = s.span  # type: ignore[misc]
    headers = file_part_headers(s.path, s.name, s.content_type) + f"Content-Range: {content_range((start, stop), s.size)}\r\n"
    return headers, stop - start


def tar(key: bytes | None, boundary: str | None, signatures: tuple[Signature, ...], crcs: tuple[int, ...] = ()) -> Layout:
    """POSIX ustar (pax headers where a name or size needs them), one entry per file."""
    blocks, padding = [], b""
    for s in signatures:
        blocks.append(padding + tar_header(s.name, s.size, s.mtime_ns))
        padding = tar_padding(s.size)
    blocks.append(padding + TAR_END)
    return _etag(key, signatures, "tar"), "application/x-tar", "batch.tar", tuple(blocks)


def zip_stored(key: bytes | None, boundary: str | None, signatures: tuple[Signature, ...], crcs: tuple[int, ...] = ()) -> Layout:
    """A zip of stored entries (the file's bytes are the entry's), then its central directory."""
    blocks, directory, offset = [], [], 0
    for s, crc in zip(signatures, crcs, strict=True):
        info = zip_entry(s.name, s.size, s.mtime_ns, crc)
        local = zip_local_header(info)
        directory.append(zip_central_record(info, offset))
        blocks.append(local)
        offset += len(local) + s.size
    central = b"".join(directory)
    blocks.append(central + zip_end(len(directory), offset, len(central)))
    return _etag(key, signatures, "zip", _ZIP_LAYOUT), "application/zip", "batch.zip", tuple(blocks)


#: Hashed into a zip's ETag where a boundary would go: the zip's bytes changed when entries got
#: their UT time field, and a resume (If-Range) across that change must not splice the two.
_ZIP_LAYOUT = "zip-ut"


def _etag(key: bytes | None, signatures: tuple[Signature, ...], name: str, layout: str | None = None) -> str | None:
    return identity_of(key, signatures, layout, name).etag if key is not None else None


#: The formats by the name a request gives (a URL's suffix), and by media type (``Accept``).
FORMATS: dict[str, Format] = {"multipart": multipart_mixed, "zip": zip_stored, "tar": tar}
MEDIA_TYPES = {"multipart/mixed": "multipart", "application/zip": "zip", "application/x-tar": "tar"}
#: The formats that must be given each file's CRC-32.
NEEDS_CRC = frozenset({zip_stored})
