"""Every limit Axon enforces, in one frozen object so that a configuration is one value."""

from __future__ import annotations

from dataclasses import dataclass, fields, replace

from .errors import PayloadTooLarge

KiB = 1024
MiB = 1024 * KiB
GiB = 1024 * MiB


@dataclass(frozen=True)
class Limits:
    """Bounds on what one request may ask for. Crossing one is a JSON 4xx, decided early.

    The defaults fit the wire contract's users (data loaders, asset bundles): a batch of up to
    a thousand files and 64 GiB, a URL a browser or proxy would still pass along.
    """

    #: Files one batch may name (GET or POST). More is 413.
    max_files: int = 1000
    #: Sum of the sizes of a batch's files. More is 413.
    max_batch_bytes: int = 64 * GiB
    #: Ranges one ``Range`` header may list (before merging). More is 416.
    max_ranges: int = 16
    #: Length of the request target (path and query). More is 414.
    max_url_bytes: int = 16 * KiB
    #: Length of the query string alone. More is 414.
    max_query_bytes: int = 16 * KiB
    #: Size of a request body, such as the JSON of ``POST /api/stream-files``. More is 413.
    max_body_bytes: int = 1 * MiB
    #: Bytes of request headers (native server). More is 431.
    max_header_bytes: int = 16 * KiB
    #: Number of request headers (native server). More is 431.
    max_headers: int = 100
    #: Seconds a client may take to send its request headers (native server; slowloris).
    header_timeout: float = 10.0
    #: Seconds an idle keep-alive connection is kept (native server).
    keepalive_timeout: float = 15.0
    #: Seconds a response may stall with the client reading nothing (native server).
    write_timeout: float = 60.0
    #: Entries one directory listing shows (``--browse``); a directory holding more is listed
    #: in part, and says so (``"truncated": true``).
    max_listing: int = 10_000
    #: Bytes read from a file per chunk where a runtime must copy (WSGI, ASGI, TLS).
    chunk_size: int = 64 * KiB

    def __post_init__(self) -> None:
        for field in fields(self):
            value = getattr(self, field.name)
            if not value > 0:
                raise ValueError(f"Limits.{field.name} must be positive, not {value!r}")

    def check_body(self, size: int) -> None:
        """Refuse a request body of ``size`` bytes (declared, or read so far) over the limit:
        every runtime and the App decide it here, with the same 413."""
        if size > self.max_body_bytes:
            raise PayloadTooLarge(f"request body larger than {self.max_body_bytes} bytes", code="body_too_large")

    def replace(self, **changes: object) -> "Limits":
        return replace(self, **changes)


DEFAULT_LIMITS = Limits()
