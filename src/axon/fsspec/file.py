"""Files opened for random access: each block fsspec's cache misses (or each ``await read``) is
one ranged GET on ``/files/``, made by the ``read`` the filesystem hands the file (the file knows
nothing else of the filesystem's workings)."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

from fsspec.asyn import AbstractAsyncStreamedFile, AsyncFileSystem, sync
from fsspec.spec import AbstractBufferedFile

__all__ = ["AxonAsyncFile", "AxonFile", "RangeReader"]

#: ``read(start, end, etag)``: the file's bytes ``[start:end]``, refused if it is no longer ``etag``.
RangeReader = Callable[[int, int, "str | None"], Awaitable[bytes]]


class AxonFile(AbstractBufferedFile):
    """Read-only. ``etag`` (from ``info``) is sent as ``If-Match`` with every block, so a file
    replaced between two reads is an error instead of a mix of two versions (a Parquet footer
    from one and its columns from the other)."""

    def __init__(self, fs: AsyncFileSystem, path: str, read: RangeReader, *, etag: str | None = None,
                 **kwargs: Any) -> None:
        self.read_range = read
        self.etag = etag
        super().__init__(fs, path, mode="rb", **kwargs)

    def _fetch_range(self, start: int, end: int) -> bytes:
        return sync(self.fs.loop, self.read_range, start, end, self.etag)


class AxonAsyncFile(AbstractAsyncStreamedFile):
    """What ``await fs.open_async(path)`` returns: each ``await f.read(n)`` is one ranged GET
    (no cache), with the same ``If-Match`` as :class:`AxonFile`."""

    def __init__(self, fs: AsyncFileSystem, path: str, read: RangeReader, *, etag: str | None = None,
                 **kwargs: Any) -> None:
        self.read_range = read
        self.etag = etag
        super().__init__(fs, path, mode="rb", **kwargs)

    async def _fetch_range(self, start: int, end: int) -> bytes:
        return await self.read_range(start, min(end, self.size), self.etag)
