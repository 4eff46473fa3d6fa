"""An Axon server's refusals as the exceptions fsspec's callers expect (FileNotFoundError, ...)."""

from __future__ import annotations

import errno
from collections.abc import Iterator
from contextlib import contextmanager

import aiohttp

from ..batchclient.refusal import MAX_ERROR_BODY, error_object

__all__ = ["ListingOff", "NotAxonServer", "ServerDown", "error_body", "error_for", "listing_off", "not_axon", "reaching",
           "status_error"]

# Statuses that say "not now" rather than "not this": worth trying again later.
_UNAVAILABLE = {429: errno.EAGAIN, 502: errno.ECONNREFUSED, 503: errno.EAGAIN}
_TIMED_OUT = (408, 504)


class ListingOff(PermissionError):
    """The server lists no directories (started without ``--browse``): ``ls``, ``find``, ``glob``,
    ``walk`` and questions about a directory cannot be answered. A PermissionError, as listing a
    directory without read permission is locally; raised, never read as "empty"."""


class NotAxonServer(OSError):
    """The server answers, but not as Axon does: its ``/api/limits`` is missing (a static file
    server, another application, the wrong port). Raised for every read from it, never read as
    a missing file with the other server's page as its reason."""


class ServerDown(ConnectionError):
    """No server answers at the host and port of an ``axon://`` path (refused, unknown host, no
    route). Its message and ``filename`` name them. Unlike aiohttp's ``ClientConnectorError``,
    which it stands for, it pickles, so it reaches a Ray or Dask driver from a worker as itself."""


@contextmanager
def reaching(url: str) -> Iterator[None]:
    """A failure to connect inside the block (aiohttp's) becomes :class:`ServerDown` for ``url``."""
    try:
        yield
    except aiohttp.ClientConnectorError as exc:
        code = exc.os_error.errno or errno.ECONNREFUSED
        detail = exc.os_error.strerror or str(exc.os_error) or type(exc.os_error).__name__
        raise ServerDown(code, f"no server answers at {url}: {detail}", url) from exc


def not_axon(url: str, response: aiohttp.ClientResponse) -> NotAxonServer:
    kind = response.headers.get("Content-Type", "no Content-Type")
    return NotAxonServer(
        errno.EPROTO,
        f"{url} answered {response.status} ({kind}) where an Axon server answers its limits as JSON: "
        "/api/limits is missing, so this server is not Axon; check the host and port of the axon:// path",
        url,
    )


def listing_off(netloc: str, path: str) -> ListingOff:
    return ListingOff(
        errno.EACCES,
        f"the server at {netloc} lists no directories, so axon:// cannot list or find files there; "
        "start it with `axon serve --browse` (or AXON_BROWSE=1 for any runtime)",
        path,
    )


def error_for(status: int, message: str, path: str) -> Exception:
    """The exception for an HTTP ``status`` about ``path``, as a local filesystem would raise it:
    404 FileNotFoundError, 401/403 PermissionError, 400 ValueError (a path the server cannot take),
    414 a name too long, 413/431 too much at once, 408/504 TimeoutError, 429/502/503
    ConnectionError (try again later), other 5xx an OSError (EIO). Each names the status."""
    said = f"the server answered {status}: {message}" if message else f"the server answered {status}"
    if status == 404:
        return FileNotFoundError(errno.ENOENT, message or "not found", path)
    if status in (401, 403):
        return PermissionError(errno.EACCES, message or "forbidden", path)
    if status == 400:
        return ValueError(f"{path}: {said}")
    if status == 414:
        return OSError(errno.ENAMETOOLONG, said, path)
    if status in (413, 431):
        return OSError(errno.E2BIG, said, path)
    if status in _TIMED_OUT:
        return TimeoutError(errno.ETIMEDOUT, said, path)
    if status in _UNAVAILABLE:
        return ConnectionError(_UNAVAILABLE[status], said, path)
    if status >= 500:
        return OSError(errno.EIO, said, path)
    return OSError(f"{path}: {said}")


async def error_body(response: aiohttp.ClientResponse) -> dict:
    """The ``error`` object of Axon's JSON answer (or the start of whatever else came)."""
    raw = await response.content.read(MAX_ERROR_BODY)
    error = error_object(raw)
    return error if error is not None else {"message": raw[:200].decode("utf-8", "replace")}


async def status_error(response: aiohttp.ClientResponse, path: str) -> Exception:
    error = await error_body(response)
    return error_for(response.status, error.get("message") or response.reason or "", path)
