"""A batch request as plain data: method, target, headers and body, for any transport to send.

``build_request`` is ``axon fetch``'s: ``GET /api/stream-files?file1=...&file2=...`` while the
target stays under ~8 KB (what servers and proxies reliably accept), ``POST`` with
``{"files": [...]}`` beyond that, optionally signed, as multipart, zip or tar, on a connection of
its own. ``build_post`` is ``axon://``'s: always a POST, whose items may be slices of files
(``{"path", "offset", "length"}``), on a connection kept alive in a pool.
"""

from __future__ import annotations

import json
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from urllib.parse import SplitResult, urlencode, urlsplit

from ..signing import sign_url
from .errors import FetchError
from .paths import check_path_shape

__all__ = [
    "BatchRequest", "Item", "MAX_GET_TARGET", "batch_body", "build_post", "build_request", "compact_json", "split_base",
]

Item = str | dict  # a path, or a slice of one: {"path", "offset", "length"?}

ENDPOINT = "/api/stream-files"
#: What each format is asked with: the endpoint's suffix and the Accept header.
FORMATS = {
    "multipart": ("", "multipart/mixed, application/json"),
    "zip": (".zip", "application/zip, application/json"),
    "tar": (".tar", "application/x-tar, application/json"),
}
MAX_GET_TARGET = 8000  # bytes of request target; longer lists go as a JSON POST
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
        return f"{self.scheme}://{self.netloc}"

    @property
    def netloc(self) -> str:
        host = f"[{self.host}]" if ":" in self.host else self.host  # an IPv6 address
        return f"{host}:{self.port}"

    @property
    def url(self) -> str:
        """The whole URL, the target as it is (already encoded)."""
        return self.origin + self.target


# One encoder for every call: json.dumps with options other than its defaults builds a new one
# each time, which costs more than encoding a path (fsspec's packing encodes each item).
_ENCODER = json.JSONEncoder(ensure_ascii=True, separators=(",", ":"))


def compact_json(value: object) -> bytes:
    """``value`` as the JSON a batch body holds: ASCII, no spaces (its length is what counts
    against the server's ``max_body_bytes``)."""
    return _ENCODER.encode(value).encode("ascii")


def batch_body(items: Sequence[Item]) -> bytes:
    """The ``POST /api/stream-files`` body naming ``items``."""
    return compact_json({"files": list(items)})


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
    url, port = split_base(base_url)
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
        "connection": ("Connection", "close"),  # one request on a connection of its own
    }
    if method == "GET":
        target, body = f"{path}?{query}", b""
    elif method == "POST":
        target, body = path, batch_body(files)
        merged["content-type"] = ("Content-Type", "application/json")
        merged["content-length"] = ("Content-Length", str(len(body)))
    else:
        raise ValueError(f"method must be GET or POST, not {method!r}")
    if secret:
        target = sign_url(target, secret, int(time.time()) + SIGNATURE_LIFETIME, method=method, body=body)
    _merge(merged, headers)
    return BatchRequest(url.scheme, url.hostname or "", port, method, target, tuple(merged.values()), body)


def build_post(base_url: str, items: Sequence[Item], headers: Mapping[str, str] | None = None) -> BatchRequest:
    """``POST /api/stream-files`` of ``items`` (paths or slices), as multipart, to be sent on a
    pooled connection (the transport sets Host and keeps the connection alive). The paths go as
    they are: the server judges each, and its refusal names the ones it will not serve."""
    url, port = split_base(base_url)
    body = batch_body(items)
    merged = {
        "accept": ("Accept", FORMATS["multipart"][1]),
        "accept-encoding": ("Accept-Encoding", "identity"),
        "content-type": ("Content-Type", "application/json"),
    }
    _merge(merged, headers)
    target = url.path.rstrip("/") + ENDPOINT
    return BatchRequest(url.scheme, url.hostname or "", port, "POST", target, tuple(merged.values()), body)


def split_base(base_url: str) -> tuple[SplitResult, int]:
    """A server's base URL and its port; ValueError unless it is http:// or https:// with a host."""
    url = urlsplit(base_url)
    if url.scheme not in ("http", "https") or not url.hostname:
        raise ValueError(f"base URL must be http:// or https:// with a host: {base_url!r}")
    return url, url.port or (443 if url.scheme == "https" else 80)


def _merge(merged: dict[str, tuple[str, str]], headers: Mapping[str, str] | None) -> None:
    """``headers`` over the defaults, a name replacing the default of the same name."""
    for name, value in (headers or {}).items():
        if any(c in name + value for c in "\r\n\x00"):
            raise ValueError(f"header {name!r} holds a line break or NUL")
        merged[name.lower()] = (name, value)
