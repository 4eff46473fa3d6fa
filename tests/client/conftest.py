"""Fixtures for the client tests: ``http_server``, a scripted HTTP server on a real socket, and
``live_axon``, Axon itself under gunicorn (WSGI), uvicorn (ASGI) and its own server, with
signing on."""

from __future__ import annotations

import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent))

from live_server import LiveAxon, live_server, runtime_available  # noqa: E402
from scripted_server import ScriptedServer  # noqa: E402

SECRET = "client-tests-secret"


@pytest.fixture
def http_server() -> Iterator[ScriptedServer]:
    with ScriptedServer() as server:
        yield server


@pytest.fixture(scope="session", params=[pytest.param("gunicorn", marks=pytest.mark.slow),
                                         pytest.param("uvicorn", marks=pytest.mark.slow), "native"])
def live_axon(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Iterator[LiveAxon]:
    """One server per runtime for the whole session, serving a fresh root with AXON_SECRET set
    (the native server reads it through App, as the WSGI and ASGI default apps do). The fast loop
    proves the client against Axon's own server; the WSGI and ASGI runtimes' runs are slow (the
    fast loop still meets gunicorn in test_client_interop.py, uvicorn in tests/fsspec)."""
    why = runtime_available(request.param)
    if why is not None:
        pytest.skip(why)
    root = tmp_path_factory.mktemp(f"live-{request.param}")
    with live_server(request.param, root, {"AXON_SECRET": SECRET}) as url:
        yield LiveAxon(request.param, url, root, SECRET)
