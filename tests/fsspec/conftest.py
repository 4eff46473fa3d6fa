"""Fixtures for axon:// tests: Axon serving a corpus over real sockets, and a filesystem on it.

``served`` is one session-scoped server per runtime (axon serve, and uvicorn for ASGI), listing
on (the filesystem's ``ls`` reads the JSON listing), serving a corpus written once per session:
many small files, a CSV and a Parquet table, odd names, a nested tree and an empty directory.
Every test reads it through ``axon://`` and compares with the same files read locally.
"""

from __future__ import annotations

import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parents[1] / "client"))
sys.path.insert(0, str(Path(__file__).parent))

from fsspec_served import Served, write_corpus  # noqa: E402
from live_server import live_server, runtime_available  # noqa: E402

# fsspec.asyn, not fsspec: with tests/ on sys.path and no fsspec installed, "fsspec" would be
# this very directory, as a namespace package.
pytest.importorskip("fsspec.asyn", reason="the fsspec extra is installed by scripts/setup.sh --all")
pytest.importorskip("aiohttp", reason="the fsspec extra is installed by scripts/setup.sh --all")

import fsspec  # noqa: E402

from axon.fsspec import AxonFileSystem  # noqa: E402

# The installed metadata this process sees may predate the entry point (an editable install made
# before it existed): name the class here, for pandas and fsspec.open in these tests. Finding it
# by the entry point alone is test_fsspec_readers.py's fresh-install test.
fsspec.register_implementation("axon", AxonFileSystem, clobber=True)


@pytest.fixture(scope="session")
def corpus(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("fsspec-root")
    write_corpus(root)
    return root


@pytest.fixture(scope="session", params=["native", pytest.param("uvicorn", marks=pytest.mark.slow)])
def served(request: pytest.FixtureRequest, corpus: Path) -> Iterator[Served]:
    """The corpus served by Axon's own server, and by uvicorn (ASGI) outside the fast loop, which
    proves the filesystem against one server (it meets uvicorn in test_fsspec_servers.py and
    test_fsspec_listing_off.py)."""
    why = runtime_available(request.param)
    if why is not None:
        pytest.skip(why)
    with live_server(request.param, corpus, {"AXON_BROWSE": "1"}) as url:
        yield Served(request.param, url.removeprefix("http://"), corpus)


@pytest.fixture
def fs(served: Served) -> AxonFileSystem:
    """A filesystem of its own for each test (no instance or listing shared between tests)."""
    return AxonFileSystem(skip_instance_cache=True)
