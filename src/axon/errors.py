"""One error type with a status, subclassed per failure, rendered as the wire contract's JSON.

Every refusal in Axon is an ``HTTPError`` raised before the first byte of a response is written,
so a client always gets either a complete success or one JSON 4xx that says what was wrong.
"""

from __future__ import annotations

import json
from collections.abc import Generator, Iterator
from contextlib import contextmanager
from typing import Any, Iterable, Sequence


@contextmanager
def needs_extra(extra: str, what: str, *modules: str) -> Iterator[None]:
    """The imports in the block come with the ``axon-stream[extra]`` extra: one of ``modules``
    (top-level names) missing is a ModuleNotFoundError naming the ``pip install`` that brings
    it, not a bare "No module named"; anything else missing is raised as it is."""
    try:
        yield
    except ModuleNotFoundError as exc:
        missing = (exc.name or "").partition(".")[0]
        if missing not in modules:
            raise
        raise ModuleNotFoundError(f"{what} needs {missing}, which is not installed: pip install 'axon-stream[{extra}]'",
                                  name=exc.name) from None


class WouldBlock(Exception):
    """Raised by work that was asked not to block (``Request.on_loop``: its handler runs on an
    event loop's thread) and would: a zip whose CRC-32s must first be read from disk. Not an
    HTTP answer: the App catches it and runs the handler again in its thread pool. With
    ``steps`` (a generator whose value is the work's result), the work is long rather than
    blocking (a large batch's plan): the App steps it on the loop between other work, then runs
    the handler again with its result (``Request.planned``), for the work named ``of``."""

    def __init__(self, message: str = "", steps: Generator[None, None, Any] | None = None, of: Any = None) -> None:
        super().__init__(message)
        self.steps = steps
        self.of = of


class HTTPError(Exception):
    """A failure that becomes an HTTP response: ``{"error": {status, code, message, paths}}``."""

    status = 500
    code = "internal_error"

    def __init__(
        self,
        message: str,
        *,
        code: str | None = None,
        paths: Sequence[str] = (),
        details: Sequence[dict] = (),
        headers: Iterable[tuple[str, str]] = (),
        status: int | None = None,
    ) -> None:
        super().__init__(message)
        self.message = message
        if code is not None:
            self.code = code
        if status is not None:
            self.status = status
        self.paths = list(paths)
        self.details = list(details)
        self.headers = list(headers)

    def to_dict(self) -> dict:
        error: dict = {"status": self.status, "code": self.code, "message": self.message}
        if self.paths:
            error["paths"] = self.paths
        if self.details:
            error["details"] = self.details
        return {"error": error}

    def to_json(self) -> bytes:
        return json.dumps(self.to_dict(), ensure_ascii=True).encode("ascii")


class BadRequest(HTTPError):
    status, code = 400, "bad_request"


class Unauthorized(HTTPError):
    status, code = 401, "unauthorized"


class Forbidden(HTTPError):
    status, code = 403, "forbidden"


class NotFound(HTTPError):
    status, code = 404, "not_found"


class MethodNotAllowed(HTTPError):
    status, code = 405, "method_not_allowed"

    def __init__(self, allowed: Iterable[str]) -> None:
        allow = ", ".join(sorted(set(allowed)))
        super().__init__(f"method not allowed; use one of: {allow}", headers=[("Allow", allow)])


class NotAcceptable(HTTPError):
    status, code = 406, "not_acceptable"


class PreconditionFailed(HTTPError):
    status, code = 412, "precondition_failed"


class PayloadTooLarge(HTTPError):
    status, code = 413, "payload_too_large"


class URITooLong(HTTPError):
    status, code = 414, "uri_too_long"


class RangeNotSatisfiable(HTTPError):
    status, code = 416, "range_not_satisfiable"

    def __init__(self, message: str, size: int) -> None:
        super().__init__(message, headers=[("Content-Range", f"bytes */{size}")])


class HeadersTooLarge(HTTPError):
    status, code = 431, "headers_too_large"


class ServiceUnavailable(HTTPError):
    status, code = 503, "unavailable"


class FileChanged(OSError):
    """A file is no longer the version a response was planned from: it changed while its CRC-32
    was read (the planner opens the batch again), or shrank while it streamed (the runtime cuts
    the connection rather than send a part shorter than its length). An ``OSError``, as a read
    that fails midway: a runtime treats both the same."""


class ClientGone(Exception):
    """The client disconnected: nothing more can be read from it or written to it, so a runtime
    stops producing the response (not an HTTP error: no one is left to tell)."""
