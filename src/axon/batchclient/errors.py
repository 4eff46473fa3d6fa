"""The one error a batch fetch raises, whatever failed: the server's refusal, the network, the stream.

A refusal carries the server's JSON error (``{"error": {status, code, message, paths}}``) so the
caller can act on ``code`` and ``paths``; a malformed stream keeps the parser's
:class:`~axon.http.multipart_parser.MultipartError` as ``__cause__``. Errors writing to the local
disk stay ``OSError``: they are not the server's fault. ``axon.client`` re-exports all three;
``axon.fsspec`` turns them into the exceptions fsspec's callers expect.
"""

from __future__ import annotations

from typing import Any

__all__ = ["BatchTooLarge", "FetchError", "UnsafePathError"]


class FetchError(Exception):
    """A batch fetch failed; ``status`` and ``error`` are set when the server answered with one."""

    def __init__(self, message: str, *, status: int | None = None, error: dict[str, Any] | None = None):
        super().__init__(message)
        self.message = message
        self.status = status
        self.error = error

    @property
    def code(self) -> str | None:
        """The server's error code (``"not_found"``, ``"forbidden"``...), if it sent one."""
        return None if self.error is None else self.error.get("code")

    @property
    def paths(self) -> list[str]:
        """The requested paths the server's error names, if any."""
        return [] if self.error is None else list(self.error.get("paths") or [])


class UnsafePathError(FetchError, ValueError):
    """A path that would be written outside the destination directory, or that is malformed."""


class BatchTooLarge(FetchError, ValueError):
    """A list the server takes in no single request (more files than its ``max_files``, or a JSON
    body over its ``max_body_bytes``, as its ``/api/limits`` says), refused before sending it."""
