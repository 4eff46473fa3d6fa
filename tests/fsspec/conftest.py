"""Fixtures for axon:// tests: Axon serving a corpus over real sockets, and a filesystem on it.

``served`` is one session-scoped server per runtime (axon serve, and uvicorn for ASGI), listing
on (the filesystem's ``ls`` reads the JSON listing), serving a corpus written once per session:
many small files, a CSV and a Parquet table, odd names, a nested tree and an empty directory.
Every test reads it through ``axon://`` and compares with the same files read locally.
"""

from __future__ import annotations

import random
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parents[1] / "client"))

from live_server import live_server, runtime_available  # noqa: E402

pytest.importorskip("fsspec", reason="the fsspec extra is installed by scripts/setup.sh --all")
pytest.importorskip("aiohttp", reason="the fsspec extra is installed by scripts/setup.sh --all")

import fsspec  # noqa: E402

from axon.fsspec import AxonFileSystem  # noqa: E402

# The installed metadata this process sees may predate the entry point (an editable install made
# before it existed): name the class here, for pandas and fsspec.open in these tests. Finding it
# by the entry point alone is test_fsspec_readers.py's fresh-install test.
fsspec.register_implementation("axon", AxonFileSystem, clobber=True)

SMALL_FILES = 60
ODD_NAMES = ["odd name.txt", "é ü 名前.txt", "a+b=c;d&e.txt", "100%.txt", "hash#tag.txt"]


@dataclass(frozen=True)
class Served:
    """A running server: its runtime, ``host:port`` (the first part of every axon path), its root."""

    runtime: str
    netloc: str
    root: Path

    def path(self, rel: str) -> str:
        return f"{self.netloc}/{rel}"

    def url(self, rel: str) -> str:
        return f"axon://{self.netloc}/{rel}"

    def local(self, rel: str) -> bytes:
        return (self.root / rel).read_bytes()


def write_corpus(root: Path) -> None:
    rng = random.Random(15)
    small = root / "data" / "small"
    small.mkdir(parents=True)
    for i in range(SMALL_FILES):
        # Sizes from empty (the first) to a few KiB, a few larger than a part's read chunk.
        size = 0 if i == 0 else rng.choice([1, 7, 4096, 70_000]) if i % 10 == 0 else rng.randrange(1, 6000)
        (small / f"f{i:03}.bin").write_bytes(rng.randbytes(size))
    for name in ODD_NAMES:
        (root / "data" / name).write_bytes(name.encode("utf-8") * 3)
    deeper = root / "data" / "tree" / "a" / "b"
    deeper.mkdir(parents=True)
    (deeper / "leaf.txt").write_bytes(b"leaf\n")
    (root / "data" / "tree" / "top.txt").write_bytes(b"top\n")
    (root / "data" / "tree" / "empty").mkdir()
    (root / "data" / ".hidden").write_bytes(b"never served\n")
    big = root / "data" / "big.bin"
    big.write_bytes(rng.randbytes(3 * 1024 * 1024 + 17))


@pytest.fixture(scope="session")
def corpus(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("fsspec-root")
    write_corpus(root)
    return root


@pytest.fixture(scope="session", params=["native", "uvicorn"])
def served(request: pytest.FixtureRequest, corpus: Path) -> Iterator[Served]:
    why = runtime_available(request.param)
    if why is not None:
        pytest.skip(why)
    with live_server(request.param, corpus, {"AXON_BROWSE": "1"}) as url:
        yield Served(request.param, url.removeprefix("http://"), corpus)


@pytest.fixture
def fs(served: Served) -> AxonFileSystem:
    """A filesystem of its own for each test (no instance or listing shared between tests)."""
    return AxonFileSystem(skip_instance_cache=True)
