"""``python -m axon.bench.pipelines`` end to end on a tiny set: it starts axon serve, nginx and the
delay relay, reads every set with every client, checks the bytes, and prints its table. No timing
is asserted; the request counts are (one batch per set for axon://, one request per file for HTTP)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from axon.bench import nginx

pytest.importorskip("fsspec.asyn", reason="the fsspec extra is installed by scripts/setup.sh --all")
pytest.importorskip("aiohttp", reason="the fsspec extra is installed by scripts/setup.sh --all")
pytestmark = [
    pytest.mark.slow,  # nginx and the benchmark's own run
    pytest.mark.skipif(not Path(nginx.binary()).exists(), reason="nginx is installed by scripts/setup.sh --all"),
]


def test_the_benchmark_runs_and_prints_its_table(tmp_path: Path):
    argv = [sys.executable, "-m", "axon.bench.pipelines", "--sets", "30x4096,4x65536", "--delays", "0,5",
            "--files-dir", str(tmp_path / "files"), "--no-pin", "--json", str(tmp_path / "rows.json")]
    done = subprocess.run(argv, capture_output=True, text=True, timeout=300, env=os.environ)
    assert done.returncode == 0, done.stdout + done.stderr
    table = [line for line in done.stdout.splitlines() if line.startswith("| ") and "---" not in line]
    assert table[0].startswith("| files | delay each way | client | server | requests |")
    assert len(table) == 1 + 2 * 2 * 3  # sets x delays x clients
    rows = json.loads((tmp_path / "rows.json").read_text())
    assert {(r["files"], r["delay_ms"]) for r in rows} == {("30 x 4 KiB", 0), ("4 x 64 KiB", 0),
                                                        ("30 x 4 KiB", 5), ("4 x 64 KiB", 5)}
    for r in rows:
        count = 30 if r["files"].startswith("30") else 4
        assert r["requests"] == (1 if r["client"] == "axon://" else count), r
        assert r["seconds"] > 0
    assert "| 5 ms (relay) | HTTPFileSystem | nginx /files/ |" in done.stdout
    assert len(list((tmp_path / "files").rglob("*.bin"))) == 34
