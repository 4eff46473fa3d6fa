"""Files opened for random access: each block fsspec's cache misses (or each ``await read``) is
one ranged GET on ``/files/``."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from fsspec.asyn import AbstractAsyncStreamedFile, sync
from fsspec.spec import AbstractBufferedFile

if TYPE_CHECKING:
    from .filesystem import AxonFileSystem

__all__ = ["AxonAsyncFile", "AxonFile"]


class AxonFile(AbstractBufferedFile):
    """Read-only. ``etag`` (from ``info``) is sent as ``If-Match`` with every block, so a file
    replaced between two reads is an error instead of a mix of two versions (a Parquet footer
    from one and its columns from the other)."""

    def __init__(self, fs: AxonFileSystem, path: str, *, etag: str | None = None, **kwargs: Any) -> None:
        self.etag = etag
        super().__init__(fs, path, mode="rb", **kwargs)

    def _fetch_range(self, start: int, end: int) -> bytes:
        return sync(self.fs.loop, self.fs._read_range, self.path, start, end, self.etag)


class AxonAsyncFile(AbstractAsyncStreamedFile):
    """What ``await fs.open_async(path)`` returns: each ``await f.read(n)`` is one ranged GET
    (no cache), with the same ``If-Match`` as :class:`AxonFile`."""

    def __init__(self, fs: AxonFileSystem, path: str, *, etag: str | None = None, **kwargs: Any) -> None:
        self.etag = etag
        super().__init__(fs, path, mode="rb", **kwargs)

    async def _fetch_range(self, start: int, end: int) -> bytes:
        return await self.fs._read_range(self.path, start, min(end, self.size), self.etag)
