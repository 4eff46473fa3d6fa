"""README's "Reading from data pipelines" runs as written (its server's address aside), against
axon serve --browse on the files it names, and gives what reading those files locally gives."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from live_server import live_server

from axon.demo import make_demo_files

pd = pytest.importorskip("pandas", reason="pandas is in the test extra (scripts/setup.sh --all)")
pytest.importorskip("pyarrow", reason="pyarrow is in the test extra (scripts/setup.sh --all)")
pytest.importorskip("webdataset", reason="webdataset is in the test extra (scripts/setup.sh --all)")

README = Path(__file__).resolve().parents[2] / "README.md"
ADDRESS = "127.0.0.1:8000"


def section_code() -> list[str]:
    text = README.read_text()
    section = text.split("## Reading from data pipelines", 1)[1].split("\n## ", 1)[0]
    section = section.split("\n### ", 1)[0]  # the engines' subsections have their tests in tests/engines
    return re.findall(r"```python\n(.*?)```", section, re.DOTALL)


@pytest.fixture(scope="module")
def readme_root(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The files the section names, as ``axon demo`` writes them."""
    root = tmp_path_factory.mktemp("readme-root")
    assert make_demo_files(root)[1] is None
    return root


def test_the_readme_examples_run_and_read_the_files(readme_root: Path, tmp_path: Path, monkeypatch):
    blocks = section_code()
    assert len(blocks) == 3 and all(ADDRESS in block for block in blocks)
    monkeypatch.chdir(tmp_path)
    names: dict = {}
    with live_server("native", readme_root, {"AXON_BROWSE": "1"}) as url:
        netloc = url.removeprefix("http://")
        for block in blocks:
            exec(compile(block.replace(ADDRESS, netloc), str(README), "exec"), names)
    local = readme_root / "examples"
    assert names["data"] == (local / "8kb.bin").read_bytes()
    small = sorted((local / "small").iterdir())
    assert len(names["contents"]) == len(small) == 32
    assert list(names["contents"].values()) == [p.read_bytes() for p in small]
    assert names["heads"] == [p.read_bytes()[:16] for p in small]
    assert sorted(p.read_bytes() for p in (tmp_path / "local-copy" / "small").iterdir()) == sorted(p.read_bytes() for p in small)
    pd.testing.assert_frame_equal(names["sales"], pd.read_csv(readme_root / "tables/sales.csv"))
    pd.testing.assert_frame_equal(names["amounts"], pd.read_parquet(readme_root / "tables/sales.parquet",
                                                                    columns=["region", "amount"]))
    import pyarrow.parquet as pq

    assert names["table"].equals(pq.read_table(readme_root / "tables/sales.parquet"))
    assert names["labels"] == [(f"samples/{i:03}", i % 3) for i in range(8)]
