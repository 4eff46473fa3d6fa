"""Axon's client: fetch a batch of files from an Axon server into a directory.

``fetch`` / ``afetch`` send one request and write every part of the multipart answer to
``dest/<path>``, each file complete or absent. ``fetch_archive`` saves a batch as one zip or tar
file instead, and ``unpack`` extracts one safely (:mod:`.archive`). ``MultipartParser`` is the sans-IO streaming
parser underneath (:mod:`axon.http.multipart_parser`), usable on its own. Requests, part checks
and resume decisions are the sans-IO core's that axon:// shares (:mod:`axon.batchclient`).
Only the standard library is imported here; ``afetch`` runs on aiohttp (the ``fsspec`` extra),
imported when it is first awaited.
"""

from .archive import ArchiveResult, fetch_archive, unpack
from .download import FetchedFile, FetchResult, Progress
from .errors import FetchError, UnsafePathError
from .fetch import afetch, fetch
from ..http.multipart_parser import (
    ContentRange,
    MultipartError,
    MultipartParser,
    PartData,
    PartEnd,
    PartStart,
    StreamEnd,
    boundary_from_content_type,
)

__all__ = [
    "ArchiveResult",
    "ContentRange",
    "FetchError",
    "FetchResult",
    "FetchedFile",
    "MultipartError",
    "MultipartParser",
    "PartData",
    "PartEnd",
    "PartStart",
    "Progress",
    "StreamEnd",
    "UnsafePathError",
    "afetch",
    "boundary_from_content_type",
    "fetch",
    "fetch_archive",
    "unpack",
]
