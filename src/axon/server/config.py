"""What ``axon serve`` runs with: one frozen value, built by the CLI or by hand.

The request limits and timeouts (header bytes and count, URL and body size, slow-header,
keep-alive and stalled-write timeouts) live in the App's :class:`~axon.limits.Limits`, so that
one object configures every runtime; this holds what only the native server has.
"""

from __future__ import annotations

import os
import resource
import socket
import ssl
from dataclasses import dataclass, field

from ..config import environment
from ..storage import FILE_CACHE_BYTES, FILE_CACHE_INACTIVE, FILE_CACHE_SIZE, FILE_CACHE_VALID, Source
from ..storage.sources import share_open_files


@dataclass(frozen=True)
class ServerConfig:
    host: str = "127.0.0.1"
    port: int = 8000
    #: Worker processes. 0 serves in this process, without a supervisor (for profiling).
    workers: int = 1
    #: Seconds in-flight responses get to finish after SIGTERM/SIGINT before they are cut.
    graceful_timeout: float = 30.0
    #: Open connections one worker holds; one more gets a 503 and is closed.
    max_connections: int = 10000
    backlog: int = 2048
    #: One listening socket per worker (``SO_REUSEPORT``), so that the kernel spreads new
    #: connections over the workers instead of letting whichever wakes first take them.
    reuse_port: bool = False
    certfile: str | None = None
    keyfile: str | None = None
    #: Send file slices with ``os.sendfile`` (never under TLS). ``AXON_NO_SENDFILE=1`` turns
    #: it off, as aiohttp's switch does, to exercise the copying fallback in tests.
    sendfile: bool = field(default_factory=lambda: environment().sendfile)
    #: In a response with more than ``write_chunk`` bytes to read from files, slices at least
    #: this long go out with ``sendfile``; shorter ones are read into the write buffer so that
    #: a batch of small files costs a few ``writev`` calls. (A response with less to read is
    #: read whole and written in one ``writev``.)
    sendfile_min: int = 64 * 1024
    #: Bytes gathered (headers, part headers, small files) before one ``writev`` when large
    #: slices go out with ``sendfile``; without it each write is ``Limits.chunk_size``. It is
    #: also what one slow reader may hold in user space, so it stays small.
    write_chunk: int = 64 * 1024
    #: The open-file cache (axon.storage.file_cache), as nginx's ``open_file_cache``: at most
    #: ``file_cache`` descriptors a worker (and at most half its open-files limit), each closed once
    #: unused for ``file_cache_inactive`` seconds, its path checked again every
    #: ``file_cache_valid`` seconds, small files' bytes kept up to ``file_cache_bytes`` in all.
    #: Edits, deletions and renames over a file are seen by the next request (a hit ``fstat``s
    #: its file, or trusts the kernel's watch: storage/file_cache.py). 0 opens every file for
    #: every request. The App serves through it when it is built with :meth:`serving_store`.
    file_cache: int = FILE_CACHE_SIZE
    file_cache_valid: float = FILE_CACHE_VALID
    file_cache_inactive: float = FILE_CACHE_INACTIVE
    file_cache_bytes: int = FILE_CACHE_BYTES

    def __post_init__(self) -> None:
        if self.workers < 0:
            raise ValueError("workers must be 0 or more")
        if (self.certfile is None) != (self.keyfile is None):
            raise ValueError("TLS needs both --certfile and --keyfile")
        if min(self.file_cache, self.file_cache_valid, self.file_cache_inactive, self.file_cache_bytes) < 0:
            raise ValueError("the file cache's size, times and bytes must not be negative")
        if self.reuse_port and not hasattr(socket, "SO_REUSEPORT"):
            raise ValueError("--reuse-port: this system has no SO_REUSEPORT")
        if self.max_connections < 1 or self.graceful_timeout < 0:
            raise ValueError("max_connections must be positive and graceful_timeout not negative")

    def serving_store(self, source: Source) -> Source:
        """``source`` as the App this server serves is built with: its open files shared between
        requests (the open-file cache above), or ``source`` itself with ``file_cache`` 0 or a
        source that keeps no descriptors (an object store)."""
        size = file_cache_size(self.file_cache) if self.file_cache else 0
        shared = share_open_files(source, size, self.file_cache_valid, self.file_cache_inactive, self.file_cache_bytes)
        return source if shared is None else shared

    @property
    def tls(self) -> bool:
        return self.certfile is not None

    @property
    def use_sendfile(self) -> bool:
        return self.sendfile and not self.tls and hasattr(os, "sendfile")

    def ssl_context(self) -> ssl.SSLContext | None:
        if not self.tls:
            return None
        ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        ctx.minimum_version = ssl.TLSVersion.TLSv1_2
        ctx.load_cert_chain(self.certfile, self.keyfile)  # type: ignore[arg-type]
        ctx.set_alpn_protocols(["http/1.1"])
        return ctx

    @property
    def url(self) -> str:
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"{'https' if self.tls else 'http'}://{host}:{self.port}"


def file_cache_size(wanted: int) -> int:
    """The open-file cache's count bound: ``wanted``, but at most half the descriptors this
    process may open, so that connections always have the other half."""
    try:
        soft = resource.getrlimit(resource.RLIMIT_NOFILE)[0]
    except (ValueError, OSError):
        return wanted
    if soft == resource.RLIM_INFINITY:
        return wanted
    return max(1, min(wanted, soft // 2))
