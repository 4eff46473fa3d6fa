"""Ray Data reading ``axon://`` files in batches: one request per block, not one per file.

``ray.data.read_binary_files(paths, filesystem=PyFileSystem(FSSpecHandler(fs)))`` opens each
file on its own (a ``HEAD``, then ``GET``s). Here each read task gets ``files_per_block`` files
and reads them with one ``cat`` (one ``POST /api/stream-files`` when the group fits the
server's limits):

- :class:`AxonFiles` / :func:`read_binary_files`: the rows ``ray.data.read_binary_files``
  gives, a ``bytes`` column and, with ``include_paths=True``, a ``path`` column.
- :class:`AxonParquet` / :func:`read_parquet`: small Parquet files fetched whole and parsed in
  the task (:mod:`.parquet_groups` says when ``ray.data.read_parquet``'s ranged reads are the
  better choice).

A task carries only the paths and the filesystem's options; each Ray worker process builds its
own :class:`~axon.fsspec.AxonFileSystem` (and aiohttp session) the first time it reads.
Needs the ``ray`` extra (``ray[data]``).
"""

from __future__ import annotations

import functools
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from ..errors import needs_extra
from .file_groups import expand, groups, read_group

with needs_extra("ray", "axon.engines.ray_datasource", "ray", "pyarrow"):
    import pyarrow as pa
    import ray.data
    from ray.data.block import BlockMetadata
    from ray.data.datasource import Datasource, ReadTask

    from .parquet_groups import read_parquet_group

__all__ = ["DEFAULT_FILES_PER_BLOCK", "AxonFiles", "AxonParquet", "read_binary_files", "read_parquet"]

# Small files are what batching is for: 128 of a few KiB to a few MiB each make a block of
# well under Ray's target size (128 MiB). A block holds all its files in memory: lower it for
# large files.
DEFAULT_FILES_PER_BLOCK = 128


class _AxonBlocks(Datasource):
    """``axon://`` files cut into blocks of ``files_per_block``, each block one read task.

    ``paths`` are ``axon://host:port/dir/file`` (or without ``axon://``); a glob or a path ending
    in ``/`` is expanded here, on the driver, through the server's listing. Every other path is
    read as a file without a request to check it first: a missing one fails its read task with
    ``FileNotFoundError``. ``storage_options`` are :class:`~axon.fsspec.AxonFileSystem`'s
    (``secret``, ``token``, ``scheme``, ``files_per_batch``, ...).
    """

    def __init__(self, paths: str | Iterable[str], *, files_per_block: int = DEFAULT_FILES_PER_BLOCK,
                 include_paths: bool = False, storage_options: Mapping[str, Any] | None = None) -> None:
        super().__init__()
        self._storage_options = dict(storage_options or {})
        self._files = expand(paths, self._storage_options)
        self._blocks = groups(self._files, files_per_block, "files_per_block")
        self._include_paths = include_paths

    @property
    def files(self) -> list[str]:
        return list(self._files)

    def estimate_inmemory_data_size(self) -> int | None:
        return None  # the sizes would cost a request per file (or the listing) to learn

    def get_read_tasks(self, parallelism: int, per_task_row_limit: int | None = None,
                       data_context: Any = None) -> list[ReadTask]:
        # One task per block whatever ``parallelism`` asks: the block is the batch sent, and
        # splitting it further would only add requests.
        return [
            ReadTask(self._reader(block), BlockMetadata(num_rows=self._rows(block), size_bytes=None,
                                                        input_files=block, exec_stats=None),
                     per_task_row_limit=per_task_row_limit)
            for block in self._blocks
        ]

    def _reader(self, block: list[str]) -> functools.partial:
        raise NotImplementedError

    def _rows(self, block: list[str]) -> int | None:
        return None


class AxonFiles(_AxonBlocks):
    """``axon://`` files as rows (``bytes``, and ``path`` with ``include_paths``), N per block."""

    def _reader(self, block: list[str]) -> functools.partial:
        # A module-level function and plain values: what Ray pickles to the worker.
        return functools.partial(_read_files, block, self._include_paths, self._storage_options)

    def _rows(self, block: list[str]) -> int:
        return len(block)


class AxonParquet(_AxonBlocks):
    """Small ``axon://`` Parquet files fetched whole, N per block, their rows in one table.

    ``columns`` keeps only those (the files are fetched whole all the same); ``include_paths``
    adds a ``path`` column naming each row's file.
    """

    def __init__(self, paths: str | Iterable[str], *, columns: Sequence[str] | None = None, **options: Any) -> None:
        super().__init__(paths, **options)
        self._columns = None if columns is None else list(columns)

    def _reader(self, block: list[str]) -> functools.partial:
        return functools.partial(_read_parquet, block, self._columns, self._include_paths, self._storage_options)


def _read_files(files: Sequence[str], include_paths: bool, storage_options: Mapping[str, Any]) -> list[pa.Table]:
    """Runs in a Ray worker: the block's files in one ``cat``, as one Arrow table."""
    columns: dict[str, Any] = {"bytes": pa.array(read_group(files, storage_options), type=pa.binary())}
    if include_paths:
        columns["path"] = pa.array(files, type=pa.string())
    return [pa.table(columns)]


def _read_parquet(files: Sequence[str], columns: list[str] | None, include_paths: bool,
                  storage_options: Mapping[str, Any]) -> list[pa.Table]:
    """Runs in a Ray worker: the block's Parquet files in one ``cat``, parsed into one table."""
    return [read_parquet_group(files, storage_options, columns=columns, include_paths=include_paths)]


def read_binary_files(paths: str | Iterable[str], *, files_per_block: int = DEFAULT_FILES_PER_BLOCK,
                      include_paths: bool = False, storage_options: Mapping[str, Any] | None = None,
                      **read_args: Any) -> ray.data.Dataset:
    """``ray.data.read_binary_files`` for ``axon://``, one request per ``files_per_block`` files.

    ``read_args`` go to ``ray.data.read_datasource`` (``concurrency``, ``num_cpus``,
    ``ray_remote_args``, ...).
    """
    source = AxonFiles(paths, files_per_block=files_per_block, include_paths=include_paths,
                       storage_options=storage_options)
    return ray.data.read_datasource(source, **read_args)


def read_parquet(paths: str | Iterable[str], *, columns: Sequence[str] | None = None,
                 files_per_block: int = DEFAULT_FILES_PER_BLOCK, include_paths: bool = False,
                 storage_options: Mapping[str, Any] | None = None, **read_args: Any) -> ray.data.Dataset:
    """Many small Parquet files, ``files_per_block`` fetched whole in one request per block.

    For a few large files of which a few columns are wanted, ``ray.data.read_parquet(paths,
    filesystem=PyFileSystem(FSSpecHandler(AxonFileSystem())))`` reads only those byte ranges.
    """
    source = AxonParquet(paths, columns=columns, files_per_block=files_per_block, include_paths=include_paths,
                         storage_options=storage_options)
    return ray.data.read_datasource(source, **read_args)
