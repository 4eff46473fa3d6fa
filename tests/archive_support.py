"""Helpers for the archive format tests: hostile names on disk, a plan rendered to bytes, and
the tools nobody here wrote (Info-ZIP unzip, libarchive's bsdtar, GNU tar) run on the result."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

#: Names a client may ask for and an archive must give back unchanged.
HOSTILE = [
    'quote"d \'single\'.txt',
    "cr\rlf\n.txt",
    "naïve café ü 日本.txt",
    "x" * 220 + ".bin",
    "deep/" + "d" * 120 + "/" + "e" * 90 + ".txt",  # past ustar's 100 + 155 split for the prefix
]


def make_hostile(root: Path) -> dict[str, bytes]:
    made = {}
    for i, name in enumerate(HOSTILE):
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        data = f"file {i}: {name}\n".encode() * (i + 1) * 37
        path.write_bytes(data)
        made[name] = data
    return made


def render(response) -> bytes:
    out = bytearray()
    for seg in response.body:
        out += seg if isinstance(seg, bytes) else os.pread(seg.fd, seg.count, seg.offset)
    response.close()
    return bytes(out)


def tool(*argv: str, cwd: Path | None = None) -> str:
    """Run an external tool; fail the test (not skip) when it is missing: CI installs them."""
    assert shutil.which(argv[0]), f"{argv[0]} is not installed: scripts/setup.sh --all installs it"
    done = subprocess.run(argv, capture_output=True, cwd=cwd, timeout=600)
    assert done.returncode == 0, (argv, done.stdout.decode(errors="replace"), done.stderr.decode(errors="replace"))
    return done.stdout.decode("utf-8", "surrogateescape")


def extracted(directory: Path) -> dict[str, bytes]:
    """Every regular file under ``directory``, by path relative to it."""
    found = {}
    for dirpath, _, files in os.walk(directory):
        for name in files:
            path = Path(dirpath) / name
            found[str(path.relative_to(directory))] = path.read_bytes()
    return found
