"""Many small Parquet files read whole, N in one request, and parsed in memory.

Reading Parquet through a filesystem is a footer read, then a range per column chunk, per file
(and the engines add a ``HEAD`` per file, in every process that opens it): a handful of
requests for each file however small. For many small files, fetching N of them whole in one
batch and parsing the bytes costs one request per N files instead. For large files where only
some columns or row groups are wanted, the ranged reads transfer less: use the engine's own
reader there. Needs pyarrow (which ``ray[data]`` and ``dask[dataframe]`` bring).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

from .file_groups import read_group

__all__ = ["read_parquet_group"]


def read_parquet_group(files: Sequence[str], storage_options: Mapping[str, Any] | None, *,
                       columns: Sequence[str] | None = None, include_paths: bool = False) -> pa.Table:
    """The rows of ``files`` (one ``cat``), in order, as one table; ``path`` names each row's file."""
    tables = []
    for file, data in zip(files, read_group(files, storage_options)):
        try:
            table = pq.read_table(pa.BufferReader(data), columns=list(columns) if columns is not None else None)
        except pa.ArrowInvalid as exc:  # not Parquet, a column it lacks: name the file
            raise ValueError(f"{file}: {exc}") from exc
        if include_paths:
            table = table.append_column("path", pa.array([file] * table.num_rows, type=pa.string()))
        tables.append(table)
    # Files written apart may differ in a column's presence: the missing one is null there.
    return pa.concat_tables(tables, promote_options="default")
