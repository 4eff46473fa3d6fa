"""Batch formats: how one batch of files becomes one body. A format is one function.

It is given the batch key, an optional caller-chosen boundary, and its files' signatures (plain
facts, in request order, no descriptor: :data:`~axon.http.batch_identity.Signature`), and returns
a :data:`Layout`: the batch's ``ETag``, its ``Content-Type``, the file name a browser saves it
under, and the N + 1 blocks of bytes that
go before, between and after its N files. The planner (:func:`axon.plan.batch.plan_batch`) puts
each file's segment between the blocks, so the exact length is known before a byte is sent,
``Range`` and ``If-Range`` work on every format alike, and a repeated batch reuses its layout.

``multipart/mixed`` is the first. An archive is one more function of this shape: a tar header
before each file and its padding after, or a zip's local headers and its central directory at
the end, are such blocks.
"""

from __future__ import annotations

from typing import Callable, Optional

from ..http.batch_identity import Signature, identity_of
from ..http.multipart import file_part_headers, frame, new_boundary
from ..http.segments import FileSlice

#: (ETag or None without a key, Content-Type, file name, the N + 1 blocks around the N files)
Layout = tuple[Optional[str], str, str, tuple[bytes, ...]]
#: (key or None, boundary or None, signatures) -> Layout
Format = Callable[[Optional[bytes], Optional[str], tuple[Signature, ...]], Layout]


def multipart_mixed(key: bytes | None, boundary: str | None, signatures: tuple[Signature, ...]) -> Layout:
    """RFC 2046 ``multipart/mixed``, one part per file (:mod:`axon.http.multipart` frames it).
    With a key, its identity names the ETag and the boundary; without one, the batch has no
    ETag and a random boundary (or the one given)."""
    if key is None:
        etag, boundary = None, boundary or new_boundary()
    else:
        identity = identity_of(key, signatures, boundary)
        etag, boundary = identity.etag, identity.boundary
    # Each file stands in as a slice of no descriptor: frame() needs only its length.
    parts = [(file_part_headers(s[0], s[7], s[1]), FileSlice(-1, 0, s[2])) for s in signatures]
    framed = frame(boundary, parts)
    # The name the article's own ``curl -o`` gives a batch.
    return etag, f"multipart/mixed; boundary={boundary}", "batch.multipart", tuple(framed[0::2])  # type: ignore[arg-type]
