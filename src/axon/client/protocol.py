"""The batch request and the reading of its answer's head, shared by the sync and async clients.

``GET /api/stream-files?file1=...&file2=...`` while the target stays under ~8 KB (what servers
and proxies reliably accept), ``POST`` with ``{"files": [...]}`` beyond that. A non-2xx answer
becomes a :class:`FetchError` carrying the server's JSON error.
"""

from __future__ import annotations

import json
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from urllib.parse import urlencode, urlsplit

from ..signing import sign_url
from .errors import FetchError
from .paths import check_path_shape

__all__ = ["BatchRequest", "build_request", "error_from_response", "MAX_ERROR_BODY", "MAX_GET_TARGET"]

ENDPOINT = "/api/stream-files"
#: What each format is asked with: the endpoint's suffix and the Accept header.
FORMATS = {
    "multipart": ("", "multipart/mixed, application/json"),
    "zip": (".zip", "application/zip, application/json"),
    "tar": (".tar", "application/x-tar, application/json"),
}
MAX_GET_TARGET = 8000  # bytes of request target; longer lists go as a JSON POST
MAX_ERROR_BODY = 1 << 20  # read at most this much of an error answer
USER_AGENT = "axon-fetch"
SIGNATURE_LIFETIME = 300  # seconds a request this client signs stays valid


@dataclass(frozen=True)
class BatchRequest:
    scheme: str
    host: str
    port: int
    method: str
    target: str
    headers: tuple[tuple[str, str], ...]
    body: bytes

    @property
    def origin(self) -> str:
        return f"{self.scheme}://{self.host}:{self.port}"

    def head_bytes(self) -> bytes:
        """The request line and headers, for a client that writes them itself."""
        lines = [f"{self.method} {self.target} HTTP/1.1"]
        lines += [f"{name}: {value}" for name, value in self.headers]
        return ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1")


def build_request(
    base_url: str,
    files: Sequence[str],
    *,
    method: str | None = None,
    headers: Mapping[str, str] | None = None,
    secret: str | bytes | None = None,
    fmt: str = "multipart",
) -> BatchRequest:
    """The request for ``files`` from the server at ``base_url`` (which may carry a path prefix).

    ``method`` forces ``"GET"`` or ``"POST"``; by default GET unless the target gets too long.
    ``headers`` are added last and replace defaults of the same name (a seam for resume and
    signing). With ``secret``, the request target is signed (:func:`axon.signing.sign_url`,
    body included) for :data:`SIGNATURE_LIFETIME` seconds. ``fmt`` ("multipart", "zip", "tar")
    picks the representation, at its own URL (``/api/stream-files.zip``).
    """
    if not files:
        raise ValueError("no files to fetch")
    for path in files:
        try:
            check_path_shape(path)
        except FetchError as exc:
            raise ValueError(f"refusing to request {path!r}: {exc}") from None
    url = urlsplit(base_url)
    if url.scheme not in ("http", "https") or not url.hostname:
        raise ValueError(f"base URL must be http:// or https:// with a host: {base_url!r}")
    port = url.port or (443 if url.scheme == "https" else 80)
    suffix, accept = FORMATS[fmt]
    path = url.path.rstrip("/") + ENDPOINT + suffix
    query = urlencode([(f"file{i}", name) for i, name in enumerate(files, 1)], safe="/")
    if method is None:
        method = "GET" if len(path) + 1 + len(query) <= MAX_GET_TARGET else "POST"
    method = method.upper()
    merged = {
        "host": ("Host", url.netloc.rpartition("@")[2]),
        "user-agent": ("User-Agent", USER_AGENT),
        "accept": ("Accept", accept),
        "accept-encoding": ("Accept-Encoding", "identity"),
        "connection": ("Connection", "close"),
    }
    if method == "GET":
        target, body = f"{path}?{query}", b""
    elif method == "POST":
        target = path
        body = json.dumps({"files": list(files)}, ensure_ascii=True).encode("ascii")
        merged["content-type"] = ("Content-Type", "application/json")
        merged["content-length"] = ("Content-Length", str(len(body)))
    else:
        raise ValueError(f"method must be GET or POST, not {method!r}")
    if secret:
        target = sign_url(target, secret, int(time.time()) + SIGNATURE_LIFETIME, method=method, body=body)
    for name, value in (headers or {}).items():
        if any(c in name + value for c in "\r\n\x00"):
            raise ValueError(f"header {name!r} holds a line break or NUL")
        merged[name.lower()] = (name, value)
    return BatchRequest(url.scheme, url.hostname, port, method, target, tuple(merged.values()), body)


def error_from_response(status: int, reason: str, body: bytes) -> FetchError:
    """The :class:`FetchError` for a non-2xx answer, with the server's JSON error when it sent one."""
    try:
        error = json.loads(body)["error"]
        if not isinstance(error, dict):
            raise TypeError
    except (ValueError, KeyError, TypeError):
        text = body[:200].decode("utf-8", "replace").strip()
        return FetchError(f"server answered {status} {reason}: {text!r}", status=status)
    message = f"server answered {status} {error.get('code', reason)}: {error.get('message', '')}"
    paths = error.get("paths") or []
    if paths:
        shown = ", ".join(repr(p) for p in paths[:5])
        message += f" [{shown}{', ...' if len(paths) > 5 else ''}]"
    return FetchError(message, status=status, error=error)
