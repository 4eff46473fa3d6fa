"""The identity of a batch: one keyed digest that names its exact bytes, as ETag and boundary.

A batch body is fully determined by the paths requested (in order), by each file's identity
(size, mtime and ctime in nanoseconds, inode, device: the ctime moves on every write and
``utime``, so content rewritten at the same size with its mtime put back is still seen; only a
rewrite within one tick of a coarse filesystem clock is not, the limit of every stat-based
validator) and by its content type. Hashing those under a server key gives a strong ``ETag`` and the multipart
``boundary``: the same batch of unchanged files is the same bytes on every request, which is what
lets a client resume it with ``Range`` and ``If-Range``.

The key matters twice. Every worker of a deployment must derive the same one, or a resume that
reaches another worker (pre-fork servers, restarts) would get a fresh 200 instead of a 206; and
a client must not be able to compute the boundary of a batch it has not received, or it could
plant the delimiter in a file it can write to. A wrong or changed key costs only efficiency:
``If-Range`` then fails to match and the client gets the whole new batch, never wrong bytes.

* With a secret (``App(secret=...)`` / ``AXON_SECRET``), the key is derived from it (domain
  separated from the signing keys). Set one for deployments on several hosts.
* Without one, the key is derived from the host's ``/etc/machine-id`` (readable only locally)
  and the root directory's real path, device and inode: stable across workers and restarts on
  one host, unknown to remote clients; it changes if the root is recreated, which only forces
  full downloads. Where there is no machine-id (some containers), what remains is guessable in
  principle, so set a secret there if the boundary's unpredictability matters to you.
"""

from __future__ import annotations

import hashlib
import hmac
import os
import struct
from functools import lru_cache
from collections.abc import Iterable
from typing import NamedTuple

from ..storage.local import OpenFile
from .multipart import CACHED_PATH_CHARS

# Bumped whenever the framing of a batch changes: old tags must stop matching new bytes.
_VERSION = b"axon-batch-v2"
_MACHINE_ID_FILES = ("/etc/machine-id", "/var/lib/dbus/machine-id")


class BatchIdentity(NamedTuple):
    etag: str  # strong, quoted
    boundary: str  # 32 hex characters: 128 bits


def derive_key(secret: str | bytes | None, root: str) -> bytes:
    """The 32-byte key batch identities are computed with, for the store rooted at ``root``."""
    if secret:
        raw = secret.encode("utf-8") if isinstance(secret, str) else secret
        return hmac.new(raw, b"axon/batch-identity/v1", hashlib.sha256).digest()
    st = os.stat(root)
    h = hashlib.blake2b(digest_size=32, person=b"axon-batch-key")
    h.update(_machine_id())
    h.update(os.fsencode(root) + b"\x00")
    h.update(struct.pack(">QQ", st.st_dev & (2**64 - 1), st.st_ino & (2**64 - 1)))
    return h.digest()


def batch_identity(key: bytes, files: Iterable[OpenFile], boundary: str | None = None) -> BatchIdentity:
    """The ETag and boundary of the batch of ``files`` (one per requested path, in order).

    A caller-chosen ``boundary`` is part of the bytes, so it is hashed in and returned as is.
    """
    return identity_of(key, [file_signature(f) for f in files], boundary)


Signature = tuple[str, str, int, int, int, int, int, str]


def file_signature(f: OpenFile) -> Signature:
    """What names a file's part of a batch: its path as requested, content type, size, mtime,
    ctime, inode and device (all hashed into the identity), and its name under the root (in
    the part's headers, and given by the path)."""
    return (f.path, f.content_type, f.size, f.mtime_ns, f.ctime_ns, f.inode, f.device, f.name)


def identity_of(key: bytes, signatures: Iterable[Signature], boundary: str | None = None) -> BatchIdentity:
    """:func:`batch_identity` from the files' :func:`file_signature` s."""
    h = _keyed(key).copy()
    h.update(_field((boundary or "").encode("ascii")))
    h.update(b"".join([
        (_cached_record if len(signature[0]) <= CACHED_PATH_CHARS else _record)(*signature) for signature in signatures
    ]))
    digest = h.hexdigest()
    # Two halves: the tag a client sees says nothing about the boundary, and the reverse.
    return BatchIdentity(f'"{digest[:32]}"', boundary or digest[32:])


@lru_cache(maxsize=8)
def _keyed(key: bytes) -> "hashlib._Hash":
    """The digest state after the key and the version: copied per batch (keying costs more)."""
    h = hashlib.blake2b(digest_size=32, key=key, person=b"axon-batch-id")
    h.update(_VERSION)
    return h


def _record(path: str, content_type: str, size: int, mtime_ns: int, ctime_ns: int, inode: int, device: int,
            name: str = "") -> bytes:
    """What one file adds to the digest; cached, since a hot file's record rarely changes."""
    stat = struct.pack(">QQQQQ", size, mtime_ns & (2**64 - 1), ctime_ns & (2**64 - 1), inode, device & (2**64 - 1))
    return _field(path.encode("utf-8", "surrogateescape")) + _field(content_type.encode("utf-8")) + stat


_cached_record = lru_cache(maxsize=4096)(_record)


def _field(data: bytes) -> bytes:
    # Length-prefixed, so that no two different path lists hash the same bytes.
    return struct.pack(">I", len(data)) + data


def _machine_id() -> bytes:
    for name in _MACHINE_ID_FILES:
        try:
            with open(name, "rb") as f:
                return f.read(256).strip()
        except OSError:
            continue
    return b""
