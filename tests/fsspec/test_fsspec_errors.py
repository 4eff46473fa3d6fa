"""Errors a user can act on, from ``axon://`` against real servers: nginx serving a directory is
said not to be Axon (the URL that answered, ``/api/limits`` missing), never a missing file with
nginx's HTML page as its reason; a server that is down is named by host and port in every
reader; without aiohttp, the import names the ``pip install`` that brings it."""

from __future__ import annotations

import pickle
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from live_server import dead_netloc, nginx_static, says_not_axon

from axon.fsspec import AxonFileSystem
from axon.fsspec.errors import NotAxonServer, ServerDown


@pytest.fixture(scope="module")
def nginx_netloc(corpus: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """nginx serving the corpus as static files (at /files/, as the bench's yardstick does)."""
    with nginx_static(corpus, tmp_path_factory.mktemp("nginx")) as netloc:
        yield netloc


def _readers(fs: AxonFileSystem, netloc: str) -> dict[str, Callable[[], object]]:
    """Every way to read ``data/missing.bin`` and its neighbours through ``axon://``."""
    missing, present = f"{netloc}/data/missing.bin", f"{netloc}/data/small/f001.bin"
    return {
        "cat": lambda: fs.cat(missing),
        "cat many": lambda: fs.cat([missing, present]),
        "cat_ranges": lambda: fs.cat_ranges([missing], [0], [5], on_error="raise"),
        "cat_file": lambda: fs.cat_file(missing),
        "info": lambda: fs.info(missing),
        "open": lambda: fs.open(missing).read(),
        "exists": lambda: fs.exists(missing),
        "isdir": lambda: fs.isdir(f"{netloc}/data"),
        "ls": lambda: fs.ls(f"{netloc}/data"),
    }


def test_a_server_that_is_not_axon_says_so(nginx_netloc: str):
    fs = AxonFileSystem(skip_instance_cache=True)
    for name, read in _readers(fs, nginx_netloc).items():
        with pytest.raises(NotAxonServer) as caught:
            read()
        assert says_not_axon(str(caught.value), nginx_netloc), (name, caught.value)


def test_a_server_that_is_down_is_named_by_every_reader():
    netloc = dead_netloc()
    fs = AxonFileSystem(skip_instance_cache=True)
    for name, read in _readers(fs, netloc).items():
        with pytest.raises(ServerDown) as caught:
            read()
        assert netloc in str(caught.value), (name, caught.value)


def test_a_server_that_is_down_pickles_as_itself():
    """What a Ray or Dask worker sends its driver: the same type and text (aiohttp's own error
    does not survive the trip)."""
    netloc = dead_netloc()
    with pytest.raises(ServerDown) as caught:
        AxonFileSystem(skip_instance_cache=True).cat_file(f"{netloc}/data/small/f001.bin")
    again = pickle.loads(pickle.dumps(caught.value))
    assert type(again) is ServerDown and isinstance(again, ConnectionError)
    assert str(again) == str(caught.value) and netloc in str(again)


def test_without_aiohttp_the_import_names_the_pip_install():
    """A Python in which aiohttp cannot be imported (as where it is not installed): importing
    axon.fsspec, or fsspec finding axon:// by its entry point, names the extra."""
    program = """
import sys
sys.modules["aiohttp"] = None  # import aiohttp now fails as it does where it is not installed
try:
    import axon.fsspec
except ImportError as exc:
    print("import:", exc)
import fsspec
from fsspec.registry import register_implementation
register_implementation("axon", "axon.fsspec.AxonFileSystem", clobber=True)  # as its entry point
try:
    fsspec.open("axon://127.0.0.1:9/a.bin").open()
except ImportError as exc:
    print("fsspec:", exc.__cause__)
"""
    done = subprocess.run([sys.executable, "-c", program], capture_output=True, text=True, timeout=60)
    lines = done.stdout.splitlines()
    assert len(lines) == 2, done.stdout + done.stderr
    for line in lines:
        assert "aiohttp" in line and "pip install 'axon-stream[fsspec]'" in line, line


def test_a_server_that_is_down_is_not_blamed_on_the_one_that_answered(fs: AxonFileSystem, served):
    # Servers.request names its own server only for opening its own request: a connect error
    # from another server, raised in the caller's block, is that server's (or aiohttp's own).
    import asyncio

    import aiohttp

    dead = dead_netloc()

    async def inside() -> None:
        async with fs._servers.request("GET", served.netloc, "/api/health"):
            session = await fs.set_session()
            async with session.get(f"http://{dead}/"):
                pass

    with pytest.raises(aiohttp.ClientConnectorError):
        asyncio.run(inside())
