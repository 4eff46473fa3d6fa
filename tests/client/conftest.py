"""Fixtures for the client tests: ``http_server``, a scripted HTTP server on a real socket."""

from __future__ import annotations

import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent))

from scripted_server import ScriptedServer  # noqa: E402


@pytest.fixture
def http_server() -> Iterator[ScriptedServer]:
    with ScriptedServer() as server:
        yield server
