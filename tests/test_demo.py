"""``axon demo --browse`` writes and serves every file the README's data-pipeline examples read
(the examples themselves run in tests/fsspec/test_fsspec_readme.py and tests/engines)."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent / "client"))
from live_server import live_server, runtime_available  # noqa: E402

README = Path(__file__).resolve().parents[1] / "README.md"
ADDRESS = "127.0.0.1:8000"


def paths_the_examples_read() -> set[str]:
    """Every ``127.0.0.1:8000/...`` path in the python blocks of "Reading from data pipelines"
    and its subsections (files, not the endpoints under ``api/``), an f-string's ``{...}`` made a
    glob's ``*``."""
    section = README.read_text().split("\n## Reading from data pipelines\n", 1)[1].split("\n## ", 1)[0]
    blocks = re.findall(r"```python\n(.*?)```", section, re.DOTALL)
    named = {m for block in blocks for m in re.findall(rf"{re.escape(ADDRESS)}/([^\"'\s]+)", block)}
    return {re.sub(r"\{[^}]*\}", "*", path) for path in named if not path.startswith("api/")}


@pytest.mark.slow  # a server process, and a listing per path
def test_the_demo_serves_every_path_the_pipeline_examples_read(tmp_path):
    pytest.importorskip("fsspec.asyn", reason="the fsspec extra is installed by scripts/setup.sh --all")
    pytest.importorskip("aiohttp", reason="the fsspec extra is installed by scripts/setup.sh --all")
    pytest.importorskip("pyarrow", reason="pyarrow is in the test extra (scripts/setup.sh --all)")
    why_not = runtime_available("demo")
    if why_not:
        pytest.skip(why_not)
    from axon.fsspec import AxonFileSystem

    wanted = paths_the_examples_read()
    assert {"tables/sales.csv", "tables/sales.parquet", "samples/*.txt", "samples/*.cls"} <= wanted, wanted
    with live_server("demo", tmp_path, args=[str(tmp_path / "axon-demo"), "--browse"]) as url:
        netloc = url.removeprefix("http://")
        fs = AxonFileSystem(skip_instance_cache=True)
        for path in sorted(wanted):  # through the listing: --browse reached axon serve
            assert fs.glob(f"{netloc}/{path}"), f"axon demo --browse serves nothing at {path}"
        assert len(fs.glob(f"{netloc}/samples/*.txt")) == 8
        sales = fs.cat(f"{netloc}/tables/sales.csv").decode().splitlines()
    assert sales[:3] == ["region,amount", "north,0", "south,1"] and len(sales) == 201


def test_without_pyarrow_the_demo_names_the_pip_install_for_the_parquet_file(tmp_path):
    program = f"""
import sys
sys.modules["pyarrow"] = None  # import pyarrow now fails as it does where it is not installed
from pathlib import Path
from axon.demo import make_demo_files
made, skipped = make_demo_files(Path({str(tmp_path)!r}))
print(skipped)
"""
    done = subprocess.run([sys.executable, "-c", program], capture_output=True, text=True, timeout=60)
    assert "tables/sales.parquet" in done.stdout and "pip install 'axon-stream[arrow]'" in done.stdout, done.stderr
    assert (tmp_path / "tables/sales.csv").is_file() and not (tmp_path / "tables/sales.parquet").exists()
    assert (tmp_path / "samples/007.cls").read_text() == "1" and (tmp_path / "examples/8kb.bin").is_file()
