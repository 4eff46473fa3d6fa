"""Dask reading ``axon://`` files in batches: a partition of N files is one request, not N.

``dask.bag.read_text("axon://...")`` and ``dask.dataframe.read_parquet`` open each file on its
own, even with ``files_per_partition`` (a ``HEAD`` and a ``GET`` or more per file). Here each
partition is one ``cat`` of its files (one ``POST /api/stream-files`` when it fits the
server's limits):

- :func:`read_bytes`: a bag of each file's bytes (``(bytes, path)`` with ``include_path``);
- :func:`read_text`: a bag of lines, as ``dask.bag.read_text`` gives them;
- :func:`read_parquet`: a dataframe of small Parquet files fetched whole (:mod:`.parquet_groups`
  says when ``dask.dataframe.read_parquet``'s ranged reads are the better choice).

A task carries only the paths and the filesystem's options; each worker process builds its own
:class:`~axon.fsspec.AxonFileSystem` (and aiohttp session) the first time it reads. Needs the
``dask`` extra (``dask[dataframe,distributed]``).
"""

from __future__ import annotations

import codecs
import io
import uuid
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from ..errors import needs_extra
from .file_groups import expand, groups, read_group

with needs_extra("dask", "axon.engines.dask_io", "dask", "pyarrow", "pandas"):
    import dask
    import dask.bag
    import dask.dataframe

    from .parquet_groups import read_parquet_group

__all__ = ["DEFAULT_FILES_PER_PARTITION", "read_bytes", "read_parquet", "read_text"]

# As Ray's blocks (ray_datasource.DEFAULT_FILES_PER_BLOCK): a partition holds its files in
# memory, so lower it for large files.
DEFAULT_FILES_PER_PARTITION = 128

Paths = str | Iterable[str]


def read_bytes(paths: Paths, *, files_per_partition: int = DEFAULT_FILES_PER_PARTITION, include_path: bool = False,
               storage_options: Mapping[str, Any] | None = None) -> dask.bag.Bag:
    """A bag of the files' contents, in order, ``files_per_partition`` read in one request.

    ``paths`` are ``axon://host:port/dir/file`` (or without ``axon://``); a glob or a path ending
    in ``/`` is expanded now through the server's listing, any other path is read as a file
    without asking first (a missing one raises ``FileNotFoundError`` when its partition is
    computed). ``include_path`` gives ``(bytes, path)`` pairs, as ``dask.bag.read_text`` does.
    """
    options = dict(storage_options or {})
    parts = groups(expand(paths, options), files_per_partition, "files_per_partition")
    return dask.bag.from_delayed([_delayed(_partition_bytes, "read-axon-bytes", part, include_path, options)
                                  for part in parts])


def read_text(paths: Paths, *, files_per_partition: int = DEFAULT_FILES_PER_PARTITION, encoding: str = "utf-8",
              errors: str = "strict", linedelimiter: str | None = None, include_path: bool = False,
              storage_options: Mapping[str, Any] | None = None) -> dask.bag.Bag:
    """``dask.bag.read_text`` of whole files (no ``blocksize``), one request per partition.

    Lines keep their ending as dask's do; ``linedelimiter`` None (or ``"\\n"``, ``"\\r"``,
    ``"\\r\\n"``) splits as Python's universal newlines, another string splits on itself.
    """
    codecs.lookup(encoding)  # an unknown encoding is a LookupError now, not in a worker later
    options = dict(storage_options or {})
    parts = groups(expand(paths, options), files_per_partition, "files_per_partition")
    return dask.bag.from_delayed([
        _delayed(_partition_lines, "read-axon-text", part, encoding, errors, linedelimiter, include_path, options)
        for part in parts
    ])


def read_parquet(paths: Paths, *, columns: Sequence[str] | None = None,
                 files_per_partition: int = DEFAULT_FILES_PER_PARTITION, include_path: bool = False,
                 meta: Any = None, storage_options: Mapping[str, Any] | None = None) -> dask.dataframe.DataFrame:
    """Many small Parquet files as a dataframe, ``files_per_partition`` fetched whole per request.

    Without ``meta`` (an empty pandas frame of the columns and dtypes), the first file is read
    now to learn them: one request more. For a few large files of which a few columns are
    wanted, ``dask.dataframe.read_parquet("axon://...")`` reads only those byte ranges.
    """
    options = dict(storage_options or {})
    parts = groups(expand(paths, options), files_per_partition, "files_per_partition")
    if columns is not None:
        columns = [*columns, "path"] if include_path and "path" not in columns else list(columns)
    read = {"wanted": columns, "include_path": include_path, "storage_options": options}
    if meta is None:
        meta = _partition_frame(parts[0][:1], **read).iloc[:0]
    # _partition_frame's ``columns`` lets dask push a later column selection into the read.
    return dask.dataframe.from_map(_partition_frame, parts, meta=meta, label="read-axon-parquet",
                                   enforce_metadata=False, **read)


# -- in the workers: one partition, one cat ----------------------------------------------------


def _delayed(function: Any, label: str, part: list[str], *args: Any) -> Any:
    # A new key every call: the files may have changed since the same paths were last read, and
    # a key derived from the paths alone would let the scheduler hand back that older result.
    return dask.delayed(function, pure=False)(part, *args, dask_key_name=f"{label}-{uuid.uuid4().hex}")


def _partition_bytes(files: list[str], include_path: bool, storage_options: dict) -> list:
    contents = read_group(files, storage_options)
    return list(zip(contents, files)) if include_path else contents


def _partition_lines(files: list[str], encoding: str, errors: str, linedelimiter: str | None, include_path: bool,
                     storage_options: dict) -> list:
    lines: list = []
    for file, data in zip(files, read_group(files, storage_options)):
        found = _lines(data.decode(encoding, errors), linedelimiter)
        lines.extend([(line, file) for line in found] if include_path else found)
    return lines


def _lines(text: str, linedelimiter: str | None) -> list[str]:
    """As ``dask.bag.read_text`` splits a whole file (its ``file_to_blocks``)."""
    if linedelimiter in (None, "", "\n", "\r", "\r\n"):
        return list(io.StringIO(text, newline=linedelimiter))
    if not text:
        return []
    parts = text.split(linedelimiter)
    return [part + linedelimiter for part in parts[:-1]] + parts[-1:]


def _partition_frame(files: list[str], columns: list[str] | None = None, *, wanted: list[str] | None,
                     include_path: bool, storage_options: dict) -> Any:
    """One partition's frame: ``columns`` is what dask's optimizer asks for, else ``wanted``."""
    columns = wanted if columns is None else list(columns)
    stored = None if columns is None else [c for c in columns if not (include_path and c == "path")]
    frame = read_parquet_group(files, storage_options, columns=stored, include_paths=include_path).to_pandas()
    return frame if columns is None else frame[columns]
