"""Where a received file may be written: server-sent paths are untrusted.

A part's ``Content-Location`` names the file it carries. Before anything is written, the decoded
path must be relative, free of NUL, backslash and ``..`` segments, and must still land inside the
destination directory once symlinks already there are resolved.
"""

from __future__ import annotations

import os
from pathlib import Path, PurePosixPath

from ..batchclient.errors import UnsafePathError
from ..batchclient.paths import check_path_shape

__all__ = ["UnsafePathError", "check_path_shape", "ensure_parent", "resolve_destination"]


def resolve_destination(root: str | os.PathLike[str], path: str) -> Path:
    """The file under ``root`` that the decoded ``path`` names, or :class:`UnsafePathError`.

    ``root`` should already be a real path (``os.path.realpath``); the answer is absolute.
    """
    check_path_shape(path)
    root = Path(root)
    target = root.joinpath(*PurePosixPath(path).parts)
    # Resolving follows symlinks that already exist under root: a link to "/etc" inside the
    # destination must not become a way out of it.
    resolved = Path(os.path.realpath(target))
    if not resolved.is_relative_to(root) or resolved == root:
        raise UnsafePathError(f"path {path!r} resolves outside the destination directory")
    return target


def ensure_parent(root: str | os.PathLike[str], target: Path) -> None:
    """Create ``target``'s directories, checking before and after that they stay inside root
    (before: an existing symlink must not make mkdir create directories elsewhere)."""
    _check_inside(root, target.parent)
    target.parent.mkdir(parents=True, exist_ok=True)
    _check_inside(root, target.parent)


def _check_inside(root: str | os.PathLike[str], directory: Path) -> None:
    if not Path(os.path.realpath(directory)).is_relative_to(root):
        raise UnsafePathError(f"directory {str(directory)!r} resolves outside the destination")
