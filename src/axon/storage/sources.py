"""Which source serves a location: the one place that tells a directory from a store's URL;
and the source a server that reads by offset serves it through (:func:`share_open_files`).

    open_source("/srv/files")              # FileStore: the local root jail
    open_source("s3://bucket/prefix")      # ObjectSource: needs the axon-stream[s3] extra

A location is a store's URL when it starts with a URL scheme and ``://`` (RFC 3986 3.1: a
letter, then letters, digits, ``+``, ``-`` or ``.``); anything else is a directory. The
object-store module is imported only for a URL, so the core never loads obstore otherwise.
"""

from __future__ import annotations

import os
import re

from collections.abc import Callable
from typing import Any, Protocol

from . import FILE_CACHE_BYTES, FILE_CACHE_INACTIVE, FILE_CACHE_VALID, Source
from .local import FileStore
from .shared_files import SharedFiles
from ..errors import needs_extra

__all__ = ["SharingSource", "is_store_url", "open_source", "share_open_files"]

_STORE_URL = re.compile(r"[A-Za-z][A-Za-z0-9+.-]*://")


def is_store_url(location: str | os.PathLike[str]) -> bool:
    """Whether ``location`` names a store's objects (``s3://bucket/prefix``), not a directory."""
    return isinstance(location, str) and _STORE_URL.match(location) is not None


def open_source(location: str | os.PathLike[str], *, allow_hidden: bool = False,
                portable_identity: bool = False) -> Source:
    """The source serving ``location``: the objects under a store's URL, else a directory.
    ``portable_identity`` is for copies of one directory on several hosts (:class:`FileStore`);
    an object's facts (its ETag, its Last-Modified) are the same from every node already."""
    if is_store_url(location):
        with needs_extra("s3", f"serving {location}", "obstore"):
            from .objects import ObjectSource
        return ObjectSource(str(location), allow_hidden=allow_hidden)
    return FileStore(location, allow_hidden=allow_hidden, portable_identity=portable_identity)


class SharingSource(Source, Protocol):
    """A source whose open files requests share, for the server that keeps it."""

    #: The source whose files it shares.
    store: Source

    def prune(self) -> None:
        """Close what was not used for the idle time."""
        ...

    def sync(self) -> None:
        """A request begins: take in the changes to shared files the kernel told of."""
        ...

    #: ``ready_files(paths)``: for each of ``paths``, the file ``open`` would give, when it is
    #: ready without opening (nothing held), else None; the attribute None where ``open`` must
    #: make each file anew. A batch's planner takes its files so, in one call.
    ready_files: Callable[[list[str]], list[Any]] | None

    def cached_all(self, paths: list[str]) -> list[Any]:
        """For each of ``paths``, the file (with its ``version`` token and ``data``) when its bytes
        are known to be current, holding nothing; None: open it."""
        ...

    def release(self) -> bool:
        """A worker is done with it: True for the last of them, which closes it."""
        ...

    def close(self) -> None:
        """Close what no response holds (the rest when its response is done)."""
        ...


def share_open_files(source: Source, size: int, valid: float = FILE_CACHE_VALID,
                     inactive: float = FILE_CACHE_INACTIVE, small_bytes: int = FILE_CACHE_BYTES) -> SharingSource | None:
    """``source`` as a source whose requests share open descriptors (at most ``size``), for a
    runtime that reads files only by offset (Axon's own server); ``source`` itself is left as it
    was. None when there is nothing to share: ``size`` 0, or a source that keeps no descriptors
    (an object store)."""
    if isinstance(source, SharedFiles):  # another worker's, in this process: one cache for both
        source.users += 1
        return source
    if size < 1 or not isinstance(source, FileStore):
        return None
    return SharedFiles(source, size, valid, inactive, small_bytes)
