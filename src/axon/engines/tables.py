"""Tables through ``axon://``: what each engine needs, and the one helper pyarrow wants.

Most engines need nothing from Axon but the ``fsspec`` extra:

- DuckDB: ``duckdb.register_filesystem(fsspec.filesystem("axon"))`` (on the connection that
  queries), then ``read_parquet('axon://host:port/x.parquet')``; globs read the listing.
- Polars: ``pl.read_parquet("axon://host:port/x.parquet", use_pyarrow=True)``. Polars' own reader
  opens only the schemes it knows (s3, gs, http, ...) and answers "No such file" to ``axon://``;
  with ``use_pyarrow=True`` it opens the file through fsspec. ``pl.scan_parquet(fs.open(path))``
  scans an opened file.
- Hugging Face ``datasets``: ``load_dataset("parquet", data_files="axon://host:port/x.parquet")``,
  with or without ``streaming=True``: it opens ``axon://`` through fsspec itself.
- pyarrow: its readers take a filesystem and the path without the scheme;
  :func:`arrow_filesystem` gives them one.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from ..errors import needs_extra
from ..fsspec import AxonFileSystem

if TYPE_CHECKING:
    import pyarrow.fs

__all__ = ["arrow_filesystem"]


def arrow_filesystem(**storage_options: Any) -> pyarrow.fs.PyFileSystem:
    """A pyarrow filesystem reading ``host:port/dir/file`` from Axon servers.

    ``pq.read_table("host:port/x.parquet", filesystem=arrow_filesystem())``,
    ``pyarrow.dataset.dataset("host:port/dir", filesystem=arrow_filesystem(), format="parquet")``.
    ``storage_options`` are :class:`~axon.fsspec.AxonFileSystem`'s (``secret``, ``scheme``, ...).
    """
    with needs_extra("arrow", "arrow_filesystem", "pyarrow"):
        from pyarrow.fs import FSSpecHandler, PyFileSystem  # pyarrow is the caller's, not ours

    return PyFileSystem(FSSpecHandler(AxonFileSystem(**storage_options)))
