"""The errors a fetch raises: defined in the clients' shared core (:mod:`axon.batchclient.errors`),
named here too, where the client's users look for them."""

from __future__ import annotations

from ..batchclient.errors import BatchTooLarge, FetchError, UnsafePathError

__all__ = ["BatchTooLarge", "FetchError", "UnsafePathError"]
