"""``axon://``: Axon servers as an fsspec filesystem (the ``fsspec`` extra: fsspec and aiohttp).

fsspec finds it by its entry point (``fsspec.specs``), so ``fsspec.open("axon://host:port/a.bin")``
and ``pandas.read_parquet("axon://host:port/data/x.parquet")`` need no import of this package.
The library core never imports it.
"""

from ..errors import needs_extra

with needs_extra("fsspec", "axon://", "fsspec", "aiohttp", "yarl"):
    from .filesystem import AxonFileSystem

__all__ = ["AxonFileSystem"]
