"""The key of batch identities: from a secret alone, or from this host and the root."""

from __future__ import annotations

from axon.storage.batch_key import derive_key


def test_derive_key():
    assert derive_key("s", "/x") == derive_key(b"s", "/y")  # a secret alone decides
    assert derive_key("s", "/x") != derive_key("t", "/x")
    assert len(derive_key(None, "/")) == 32
    assert derive_key(None, "/") == derive_key(None, "/") != derive_key(None, "/tmp")
