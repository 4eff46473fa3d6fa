"""What the engines' readers share: the file list cut into groups, and one group read in one go.

A group of N files is read with one call of :class:`~axon.fsspec.AxonFileSystem` (``cat_ranges``
of whole files, batched as ``cat`` is), which sends it as one ``POST /api/stream-files`` when N fits the server's ``/api/limits`` (as several batches
when it does not). The engines ship only plain values to their workers (the paths and the
filesystem's options); each worker process builds its own filesystem, and with it its own
aiohttp session, the first time it reads.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from ..fsspec import AxonFileSystem

__all__ = ["axon_filesystem", "expand", "groups", "read_group"]

_MAGIC = ("*", "?", "[")


def axon_filesystem(storage_options: Mapping[str, Any] | None) -> AxonFileSystem:
    """The process's filesystem for these options: fsspec caches one instance per process (and
    thread) and options, so a worker builds it, and opens its session, once."""
    return AxonFileSystem(**dict(storage_options or {}))


def expand(paths: str | Iterable[str], storage_options: Mapping[str, Any] | None = None) -> list[str]:
    """``paths`` as a list of files, each ``host:port/dir/file`` (no ``axon://``).

    A path with a glob character (``*``, ``?``, ``[``) is matched, and one ending in ``/`` is a
    directory whose files are all read, both through the server's listing (``axon serve
    --browse``). Any other path is taken as a file without asking the server: checking N files
    one by one would cost the N requests the batches save. A file that is not there raises
    ``FileNotFoundError`` when its group is read.
    """
    if isinstance(paths, str):
        paths = [paths]
    fs: AxonFileSystem | None = None
    files: list[str] = []
    for path in paths:
        if not isinstance(path, str):
            raise TypeError(f"a path is a string (axon://host:port/dir/file), not {type(path).__name__}")
        stripped = AxonFileSystem._strip_protocol(path)
        if any(c in path for c in _MAGIC) or path.endswith("/"):
            fs = fs or axon_filesystem(storage_options)
            found = fs.glob(stripped) if any(c in path for c in _MAGIC) else fs.find(stripped)
            if not found:
                raise FileNotFoundError(f"no file matches {path!r}")
            files.extend(sorted(found))
        else:
            files.append(stripped)
    if not files:
        raise ValueError("no paths to read")
    for file in files:
        if "/" not in file or file.startswith("/"):
            raise ValueError(f"an axon path starts with the server's host:port (axon://host:port/dir/file), not {file!r}")
    return files


def groups(files: Sequence[str], per_group: int, name: str = "files per group") -> list[list[str]]:
    """``files`` cut into consecutive groups of ``per_group`` (the last one shorter); ``name`` is
    the caller's name for ``per_group``, for the error."""
    if isinstance(per_group, bool) or not isinstance(per_group, int) or per_group < 1:
        raise ValueError(f"{name} is a positive integer, not {per_group!r}")
    return [list(files[i : i + per_group]) for i in range(0, len(files), per_group)]


def read_group(files: Sequence[str], storage_options: Mapping[str, Any] | None) -> list[bytes]:
    """The bytes of each of ``files``, in order, read together; a missing one raises.

    ``cat_ranges`` with open ends, rather than ``cat``: it reads whole files in the same
    batches, keeps the list's order and repeats, and never takes a ``[`` in a file's name for a
    glob.
    """
    fs = axon_filesystem(storage_options)
    n = len(files)
    return fs.cat_ranges(list(files), [None] * n, [None] * n, on_error="raise", one_batch=True)
