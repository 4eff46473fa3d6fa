"""The README's zip and tar commands ("The same batch as zip or tar"), run as written against
`axon serve` over the demo's sample files: each archive it saves holds the files its URL named
when the block lists it (no later command writes over one before it is read)."""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
import tarfile
import zipfile
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent / "client"))
from live_server import live_server, runtime_available  # noqa: E402

from axon.demo import make_samples  # noqa: E402

README = Path(__file__).resolve().parents[1] / "README.md"
pytestmark = pytest.mark.slow  # a server process, curl, unzip and tar


def snippet() -> str:
    section = README.read_text().split("\n### The same batch as zip or tar\n", 1)[1]
    return section.split("```sh\n", 1)[1].split("```", 1)[0]


def test_the_snippet_lists_every_archive_it_saved(tmp_path):
    for tool in ("curl", "unzip", "tar"):
        assert shutil.which(tool), f"{tool} is not installed: scripts/setup.sh --all installs it"
    why_not = runtime_available("native")
    if why_not:
        pytest.skip(why_not)
    root, work = tmp_path / "root", tmp_path / "work"
    make_samples(root)
    work.mkdir()
    block = snippet()
    saved: dict[str, list[str]] = {}  # file name -> the paths its URL named, in order
    for line in block.splitlines():
        url = re.search(r'"(http://[^"]+)"', line)
        name = re.search(r" -o (\S+)", line)
        if url and (name or "-O -J" in line):
            fmt = "zip" if ".zip?" in url.group(1) or "application/zip" in line else "tar"
            saving = name.group(1) if name else f"batch.{fmt}"
            assert saving not in saved, f"{saving} is written twice before the block lists it:\n{block}"
            saved[saving] = re.findall(r"f=([^&\"]+)", url.group(1))
    assert len(saved) == 3, block  # the three curl commands are read
    with live_server("native", root) as url:
        done = subprocess.run(["bash", "-euo", "pipefail", "-c", block.replace("http://127.0.0.1:8000", url)],
                              cwd=work, capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stdout + done.stderr
    for name, paths in saved.items():
        if name.endswith(".zip"):
            with zipfile.ZipFile(work / name) as archive:
                assert archive.namelist() == paths, name
                assert f"unzip -l {name}" in block, f"the block never lists {name}"
        else:
            with tarfile.open(work / name) as archive:
                assert archive.getnames() == paths, name
