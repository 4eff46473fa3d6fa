"""Each engine helper without its engine: the error names what is missing and the ``pip install``
of the extra that brings it, not a bare "No module named" (a Python in which the engine cannot
be imported stands for one where it is not installed, so this runs whether it is or not)."""

from __future__ import annotations

import subprocess
import sys

import pytest

SLOW = pytest.mark.slow  # Dask and Ray import for seconds before the missing module stops them
CASES = [  # (what the user runs, the module missing, the extra named)
    ("import axon.engines.torch_dataset", "torch", "torch"),
    pytest.param("import axon.engines.dask_io", "dask", "dask", marks=SLOW),
    pytest.param("import axon.engines.dask_io", "pandas", "dask", marks=SLOW),
    pytest.param("import axon.engines.ray_datasource", "ray", "ray", marks=SLOW),
    pytest.param("import axon.engines.ray_datasource", "pyarrow", "ray", marks=SLOW),
    ("from axon.engines.tables import arrow_filesystem; arrow_filesystem()", "pyarrow", "arrow"),
]


@pytest.mark.parametrize(("code", "missing", "extra"), CASES)
def test_a_missing_engine_names_the_pip_install(code, missing, extra):
    program = f"""
import sys
sys.modules[{missing!r}] = None  # importing it now fails as it does where it is not installed
try:
    {code}
except ModuleNotFoundError as exc:
    print(exc)
"""
    done = subprocess.run([sys.executable, "-c", program], capture_output=True, text=True, timeout=120)
    said = done.stdout.strip()
    assert f"needs {missing}, which is not installed: pip install 'axon-stream[{extra}]'" in said, done.stdout + done.stderr
