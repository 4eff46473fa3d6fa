"""The identity of a batch: one keyed digest that names its exact bytes, as ETag and boundary.

A batch body is fully determined by the paths requested (in order), by each file's identity
(size, mtime and ctime in nanoseconds, inode, device: the ctime moves on every write and
``utime``, so content rewritten at the same size with its mtime put back is still seen; only a
rewrite within one tick of a coarse filesystem clock is not, the limit of every stat-based
validator) and by its content type. Hashing those under a server key gives a strong ``ETag`` and the multipart
``boundary``: the same batch of unchanged files is the same bytes on every request, which is what
lets a client resume it with ``Range`` and ``If-Range``.

The key (:mod:`axon.storage.batch_key` derives it) is what keeps the boundary of a batch
unknown to a client that has not received it, and the same in every worker of a deployment.
Everything here is computed from plain facts: nothing is opened or read.
"""

from __future__ import annotations

import hashlib
import struct
from functools import lru_cache
from collections.abc import Sequence
from operator import attrgetter
from typing import NamedTuple, Optional

from .multipart import CACHED_PATH_CHARS, OTHER_CACHE

# Bumped whenever the framing of a batch changes: old tags must stop matching new bytes.
_VERSION = b"axon-batch-v2"


class BatchIdentity(NamedTuple):
    etag: str  # strong, quoted
    boundary: str  # 32 hex characters: 128 bits


class Signature(NamedTuple):
    """What names one file's part of a batch, as plain facts. The first seven are hashed into the
    identity. Built by position where it is hot (one per file of a batch: ``plan.batch.file_signature``,
    ``storage.local.TrustedFile``); a test ties each such builder to these names."""

    path: str  # as requested
    content_type: str
    device: int  # the five facts of a file's version, in the order storage keeps them
    inode: int
    size: int
    mtime_ns: int
    ctime_ns: int  # moves on every write and utime
    name: str  # under the root: in the part's headers, and given by the path
    #: ``(start, stop)``: the part is that slice of the file (hashed too); None: the whole file.
    span: Optional[tuple[int, int]] = None


class KeptSignature(Signature):
    """The one Signature of a file version that storage keeps and gives to every batch sending
    it (a trusted file's, :class:`~axon.storage.local.TrustedFile`). Hashed and compared by
    identity, which agree: what is kept per signature (a part's header lines, its record) is then
    found without hashing nine fields, most of them cold in a batch of random files. It is equal
    to no other object, a plain Signature of the same facts included (:func:`plain_signature`
    gives that one); both name the same bytes."""

    __slots__ = ()
    __hash__ = object.__hash__  # the C function itself, not a Python call

    def __eq__(self, other: object) -> bool:
        # Found by identity in a dict, so never called on a hit.
        return self is other

    def __ne__(self, other: object) -> bool:
        return self is not other


def plain_signature(signature: Signature) -> Signature:
    """``signature``'s facts as a plain Signature, compared and hashed by them."""
    return signature if type(signature) is Signature else tuple.__new__(Signature, signature)


_SPAN = attrgetter("span")


def has_slices(signatures: Sequence[Signature]) -> bool:
    """Whether a part of the batch is a slice of its file (in C: a batch of whole files pays ~nothing)."""
    return any(map(_SPAN, signatures))


def identity_of(
    key: bytes, signatures: Sequence[Signature], boundary: str | None = None, fmt: str = "multipart"
) -> BatchIdentity:
    """The ETag and boundary of the batch whose files (one per requested path, in order) have
    these signatures, framed in the format named ``fmt``. A caller-chosen ``boundary`` is part of
    the bytes, so it is hashed in and returned as is."""
    if has_slices(signatures):
        return _sliced_identity(key, signatures, boundary, fmt)
    return identity_from(key, [record_of(signature) for signature in signatures], boundary, fmt)


def record_of(signature: Signature, cached: bool = True) -> bytes:
    """What one whole file adds to a batch's digest (kept per file version unless ``cached`` is false)."""
    return (_cached_record if cached and len(signature.path) <= CACHED_PATH_CHARS else _record)(signature)


def identity_from(key: bytes, records: Sequence[bytes], boundary: str | None = None, fmt: str = "multipart") -> BatchIdentity:
    """:func:`identity_of` for a batch of whole files whose records (:func:`record_of`) are known."""
    h = _keyed(key, fmt).copy()
    h.update(_field((boundary or "").encode("ascii")))
    h.update(b"".join(records))
    digest = h.hexdigest()
    # Two halves: the tag a client sees says nothing about the boundary, and the reverse.
    return BatchIdentity(f'"{digest[:32]}"', boundary or digest[32:])


def _sliced_identity(key: bytes, signatures: Sequence[Signature], boundary: str | None, fmt: str) -> BatchIdentity:
    """A batch holding slices hashes under a personalisation of its own, each record followed by
    its span (or a mark for a whole file): no batch of whole files, whose tags stay what they
    were, can hash the same bytes, and two batches differing only in a slice differ."""
    h = _keyed(key, fmt + "-slices").copy()
    h.update(_field((boundary or "").encode("ascii")))
    for signature in signatures:
        h.update(_record(signature))
        span = signature.span
        h.update(_WHOLE if span is None else struct.pack(">BQQ", 1, *span))
    digest = h.hexdigest()
    return BatchIdentity(f'"{digest[:32]}"', boundary or digest[32:])


_WHOLE = struct.pack(">BQQ", 0, 0, 0)

#: Each format hashes under its own personalisation, so that the same files as multipart, zip
#: and tar have three ETags (a Range validated by one must not slice another), while
#: multipart's tags stay what they were. Only multipart carries slices.
_PERSON = {
    "multipart": b"axon-batch-id", "zip": b"axon-batch-zip", "tar": b"axon-batch-tar",
    "multipart-slices": b"axon-batch-slice",
}


@lru_cache(maxsize=8)
def _keyed(key: bytes, fmt: str = "multipart") -> "hashlib._Hash":
    """The digest state after the key and the version: copied per batch (keying costs more)."""
    h = hashlib.blake2b(digest_size=32, key=key, person=_PERSON[fmt])
    h.update(_VERSION)
    return h


def _record(signature: Signature) -> bytes:
    """What one file adds to the digest (its span aside); cached, since a hot file's record rarely changes."""
    path, content_type, device, inode, size, mtime_ns, ctime_ns, _, _ = signature
    # Hashed in the identity's own order (the version's bytes): another order would change every ETag.
    stat = struct.pack(">QQQQQ", size, mtime_ns & (2**64 - 1), ctime_ns & (2**64 - 1), inode, device & (2**64 - 1))
    return _field(path.encode("utf-8", "surrogateescape")) + _field(content_type.encode("utf-8")) + stat


_cached_record = lru_cache(maxsize=OTHER_CACHE)(_record)


def _field(data: bytes) -> bytes:
    # Length-prefixed, so that no two different path lists hash the same bytes.
    return struct.pack(">I", len(data)) + data
