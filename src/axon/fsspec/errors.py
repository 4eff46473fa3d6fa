"""An Axon server's refusals as the exceptions fsspec's callers expect (FileNotFoundError, ...)."""

from __future__ import annotations

import errno
import json

import aiohttp

__all__ = ["error_body", "error_for", "status_error"]

MAX_ERROR_BODY = 1 << 20  # bytes of an error answer read at most


def error_for(status: int, message: str, path: str) -> OSError:
    """The exception for an HTTP ``status`` about ``path``: 404 is FileNotFoundError, 401 and 403
    PermissionError, anything else an OSError that names the status."""
    if status == 404:
        return FileNotFoundError(errno.ENOENT, message, path)
    if status in (401, 403):
        return PermissionError(errno.EACCES, message, path)
    return OSError(f"{path}: the server answered {status}: {message}")


async def error_body(response: aiohttp.ClientResponse) -> dict:
    """The ``error`` object of Axon's JSON answer (or the start of whatever else came)."""
    raw = await response.content.read(MAX_ERROR_BODY)
    try:
        error = json.loads(raw)["error"]
        return error if isinstance(error, dict) else {}
    except (ValueError, KeyError, TypeError):
        return {"message": raw[:200].decode("utf-8", "replace")}


async def status_error(response: aiohttp.ClientResponse, path: str) -> OSError:
    error = await error_body(response)
    return error_for(response.status, error.get("message") or response.reason or "", path)
