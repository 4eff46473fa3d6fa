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

from typing import Any, Protocol

from . import FILE_CACHE_BYTES, FILE_CACHE_INACTIVE, FILE_CACHE_VALID, Source
from .local import FileStore, TrustedFile
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
    """A source whose open files requests share (:class:`~.shared_files.SharedFiles`), for a
    runtime that reads files only by offset: what Axon's server asks of it beyond a Source."""

    #: The source whose files it shares.
    store: Source
    #: Its open-file cache (:class:`~.file_cache.FileCache`): the native server's compiled answer
    #: reads its tables (``entries``, ``begun``, ``taken``, ``watcher``, ``clock``, ``valid``).
    cache: Any

    def sync(self) -> None:
        """A request begins: take in the changes to shared files the kernel told of."""
        ...

    def cached_all(self, paths: list[str]) -> list[TrustedFile | None]:
        """For each of ``paths``, the file (its ``version`` token and ``data``) when its bytes are
        known to be current, holding nothing; None: open it."""
        ...

    def prune(self) -> None:
        """Close what was not used for the idle time."""
        ...

    def close(self) -> None:
        """Close what no response holds (the rest when its response is done)."""
        ...


def share_open_files(source: Source, size: int, valid: float = FILE_CACHE_VALID,
                     inactive: float = FILE_CACHE_INACTIVE, small_bytes: int = FILE_CACHE_BYTES) -> SharingSource | None:
    """``source`` as a source whose requests share open descriptors (at most ``size``), for the
    App of a runtime that reads files only by offset (Axon's own server): ``source`` itself is
    left as it was, for any other. None when there is nothing to share: ``size`` 0, or a source
    that keeps no descriptors of its own files (an object store: one with a disk tier shares its
    kept files' descriptors itself, ``share_kept_files``). A source that shares already is itself."""
    if isinstance(source, SharedFiles):
        return source
    if size < 1:
        return None
    if not isinstance(source, FileStore):
        share_kept = getattr(source, "share_kept_files", None)
        if share_kept is not None:  # an object store's disk tier: its files' descriptors are its own
            share_kept(size, valid, inactive, small_bytes)
        return None
    return SharedFiles(source, size, valid, inactive, small_bytes)
