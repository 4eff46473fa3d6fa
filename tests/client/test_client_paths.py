"""Server-sent paths are untrusted: only paths that stay inside the destination are accepted."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from axon.client.errors import FetchError, UnsafePathError
from axon.client.paths import check_path_shape, ensure_parent, resolve_destination

HOSTILE = [
    "../x",
    "/etc/x",
    "a/../../x",
    "a/..",
    "..",
    "a\x00b",
    "a\\b",
    "..\\x",
    "C:x",
    "c:/x",
    "",
    "a/",
    ".",
    "a/.",
]


@pytest.mark.parametrize("path", HOSTILE)
def test_hostile_paths_are_refused(tmp_path: Path, path: str) -> None:
    with pytest.raises(UnsafePathError):
        resolve_destination(tmp_path, path)
    with pytest.raises(UnsafePathError):
        check_path_shape(path)


def test_unsafe_path_error_is_a_fetch_error_and_a_value_error() -> None:
    assert issubclass(UnsafePathError, FetchError) and issubclass(UnsafePathError, ValueError)


@pytest.mark.parametrize(
    "path", ["a.bin", "dir/sub/b.bin", "a/./b", ".hidden", "...", "a..b", " spaced ", "%2e%2e/x"]
)
def test_ordinary_paths_land_under_the_root(tmp_path: Path, path: str) -> None:
    root = Path(os.path.realpath(tmp_path))
    target = resolve_destination(root, path)
    assert target.is_relative_to(root) and target != root


def test_symlink_out_of_the_destination_is_refused(tmp_path: Path) -> None:
    root = tmp_path / "dest"
    outside = tmp_path / "outside"
    root.mkdir()
    outside.mkdir()
    (root / "link").symlink_to(outside)
    (root / "file-link").symlink_to(outside / "f")
    for path in ("link/x", "file-link"):
        with pytest.raises(UnsafePathError, match="outside"):
            resolve_destination(root, path)
    (root / "inner").symlink_to(root / "real")  # a link that stays inside is fine
    assert resolve_destination(root, "inner/x") == root / "inner" / "x"


def test_ensure_parent_creates_directories_inside_only(tmp_path: Path) -> None:
    root = Path(os.path.realpath(tmp_path / "dest"))
    root.mkdir()
    ensure_parent(root, root / "a" / "b" / "c.bin")
    assert (root / "a" / "b").is_dir()
    (tmp_path / "outside").mkdir()
    (root / "sneaky").symlink_to(tmp_path / "outside")
    with pytest.raises(UnsafePathError):
        ensure_parent(root, root / "sneaky" / "deeper" / "x")
