"""The import contract in pyproject.toml ([tool.importlinter]) holds, and breaks when it should.

``lint-imports`` (import-linter) reads the imports of ``src/axon`` statically: the layers
(nothing imports upward), no import circle among the modules of any package (annotations
included), the pure ``axon.http`` (no IO, no environment), a core that imports only the
standard library, and fsspec and aiohttp imported only by ``axon.fsspec`` and the benchmarks
that measure it (``import axon`` never needs the extra). The second test plants one
forbidden import in a copy of the source for each contract, to show that the check can fail.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
CONFIG = REPO / "pyproject.toml"


def lint(src: Path) -> subprocess.CompletedProcess[str]:
    exe = shutil.which("lint-imports")
    assert exe is not None, "lint-imports is missing: it comes with the test extra (pip install -e '.[test]')"
    # The package analysed is the one found first on the path: this checkout's, or the copy's.
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(src), os.environ.get("PYTHONPATH", "")])}
    return subprocess.run([exe, "--config", str(CONFIG), "--no-cache", "--no-logo"], cwd=src, env=env,
                          capture_output=True, text=True, timeout=120)


def test_the_contract_holds():
    done = lint(REPO / "src")
    assert done.returncode == 0, done.stdout + done.stderr
    assert "8 kept, 0 broken" in done.stdout


@pytest.mark.slow  # lint-imports over a copy of the source, once per contract
@pytest.mark.parametrize("module, line, contract, counts", [
    # An upward import that closes a circle (plan imports storage) breaks the circles' contract too.
    ("storage/local.py", "from ..plan import batch", "Layers: a module imports only from the layers below it",
     "6 kept, 2 broken"),
    ("http/ranges.py", "import os", "axon.http does no IO and reads no environment", "7 kept, 1 broken"),
    ("plan/batch.py", "import httptools", "The library core imports only the standard library", "7 kept, 1 broken"),
    # obstore is the core's one optional import, allowed in the object-store modules only.
    ("plan/batch.py", "import obstore", "Only the object-store source imports obstore", "6 kept, 2 broken"),
    ("client/fetch.py", "import aiohttp", "Only axon.fsspec and the benchmarks import fsspec and aiohttp",
     "7 kept, 1 broken"),
    ("cli.py", "from . import fsspec", "Only axon.fsspec and the benchmarks import fsspec and aiohttp",
     "7 kept, 1 broken"),
    # A circle among a package's modules, at run time or in annotations only.
    ("server/state.py", "from . import protocol", "No import circle among the modules of any package",
     "7 kept, 1 broken"),
    ("server/flow.py", "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from .protocol import HTTPProtocol",
     "No import circle among the modules of any package", "7 kept, 1 broken"),
    # The server holds no descriptor of storage's: it opens files through the source's interface.
    ("server/writer.py", "from ..storage.file_cache import CachedDescriptor",
     "The server opens files only through storage's interface", "7 kept, 1 broken"),
])
def test_a_forbidden_import_breaks_it(tmp_path, module, line, contract, counts):
    src = tmp_path / "src"
    shutil.copytree(REPO / "src" / "axon", src / "axon", ignore=shutil.ignore_patterns("__pycache__"))
    planted = src / "axon" / module
    planted.write_text(planted.read_text() + f"\n{line}  # planted by tests/test_layers.py\n")
    done = lint(src)
    assert done.returncode != 0, done.stdout
    assert f"{contract} BROKEN" in done.stdout
    assert counts in done.stdout
