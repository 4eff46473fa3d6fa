"""What the engines' test modules import themselves (not from ``conftest``): Dask and Ray
workers import a test module by name to run the functions it defines, and a worker's
``conftest`` is whichever of the suite's conftest.py files comes first on its path."""

from __future__ import annotations

import pytest


def engine(module: str, package: str):
    """``module``, imported; else the test is skipped, naming the pip package that brings it.
    The engines are the test-engines extra, which ``scripts/setup.sh --all`` installs unless
    ``AXON_ENGINES=0`` (CI's other Pythons, where torch's CPU build is not on disk)."""
    return pytest.importorskip(
        module, reason=f"{module} is not installed: pip install '{package}' (the test-engines extra)"
    )
