"""The shape a requested path must have to be asked for, or written anywhere: checked before a
request is sent and again on each part's ``Content-Location`` (server-sent paths are untrusted)."""

from __future__ import annotations

from pathlib import PureWindowsPath

from .errors import UnsafePathError

__all__ = ["check_path_shape"]


def check_path_shape(path: str) -> None:
    """Refuse a path that could never be safe, whatever the destination."""
    if not path:
        raise UnsafePathError("empty path")
    if "\x00" in path:
        raise UnsafePathError(f"path {path!r} contains NUL")
    if "\\" in path:
        raise UnsafePathError(f"path {path!r} contains a backslash")
    if path.startswith("/") or PureWindowsPath(path).drive:
        raise UnsafePathError(f"path {path!r} is absolute")
    segments = path.split("/")
    if ".." in segments:
        raise UnsafePathError(f"path {path!r} has a '..' segment")
    if segments[-1] in ("", "."):
        raise UnsafePathError(f"path {path!r} does not name a file")
