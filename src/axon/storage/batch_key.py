"""The key batch identities (:mod:`axon.http.batch_identity`) are computed with.

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

It lives in ``storage``, not beside the identity, because the secretless key reads a file and
stats the root: that is IO, and it depends on where the files come from.
"""

from __future__ import annotations

import hashlib
import hmac
import os
import struct

_MACHINE_ID_FILES = ("/etc/machine-id", "/var/lib/dbus/machine-id")


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


def derive_url_key(secret: str | bytes | None, url: str) -> bytes:
    """The key for a store named by ``url`` (an object store's): with no secret, this host's and
    the URL's, since a bucket has no inode to tie it to."""
    if secret:
        return derive_key(secret, url)  # a secret's key names no directory: stats nothing
    h = hashlib.blake2b(digest_size=32, person=b"axon-batch-key")
    h.update(_machine_id() + b"\x00" + url.encode("utf-8"))
    return h.digest()


def _machine_id() -> bytes:
    for name in _MACHINE_ID_FILES:
        try:
            with open(name, "rb") as f:
                return f.read(256).strip()
        except OSError:
            continue
    return b""
