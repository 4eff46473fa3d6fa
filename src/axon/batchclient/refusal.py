"""A refused request read back: the server's JSON error (``{"error": {status, code, message,
paths, details}}``) from the body, as a :class:`FetchError` or as the paths it names one by one.

The transports read at most :data:`MAX_ERROR_BODY` bytes of a refusal and hand them here.
"""

from __future__ import annotations

import json
from typing import Any

from .errors import FetchError

__all__ = ["MAX_ERROR_BODY", "error_from_response", "error_object", "failures_by_path"]

MAX_ERROR_BODY = 1 << 20  # read at most this much of an error answer


def error_object(body: bytes) -> dict[str, Any] | None:
    """The ``error`` object of Axon's JSON answer, or None if the body is not one."""
    try:
        error = json.loads(body)["error"]
    except (ValueError, KeyError, TypeError):
        return None
    return error if isinstance(error, dict) else None


def error_from_response(status: int, reason: str, body: bytes) -> FetchError:
    """The :class:`FetchError` for a non-2xx answer, with the server's JSON error when it sent one."""
    error = error_object(body)
    if error is None:
        text = body[:200].decode("utf-8", "replace").strip()
        return FetchError(f"server answered {status} {reason}: {text!r}", status=status)
    message = f"server answered {status} {error.get('code', reason)}: {error.get('message', '')}"
    paths = error.get("paths") or []
    if paths:
        shown = ", ".join(repr(p) for p in paths[:5])
        message += f" [{shown}{', ...' if len(paths) > 5 else ''}]"
    return FetchError(message, status=status, error=error)


def failures_by_path(status: int, error: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """What a refused batch says of each path it names: ``{path: {"status", "code", "message",
    "size"?}}``, from its ``details`` (one per path), or, for a single failure, its ``paths``."""
    per_path: dict[str, dict[str, Any]] = {}
    for detail in error.get("details") or ():
        if isinstance(detail, dict) and isinstance(detail.get("path"), str):
            per_path[detail["path"]] = {"status": status, **detail}
    if not per_path:  # one refused path: the error itself names it
        for path in error.get("paths") or ():
            if isinstance(path, str):
                per_path[path] = {"status": status, "code": error.get("code"), "message": error.get("message", "")}
    return per_path
