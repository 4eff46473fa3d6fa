"""``axon bench --workers N``: servers started with N workers, and each worker's requests counted
so that the figures can be checked to add up.

The counting is read from real files (Axon's metrics store, nginx's worker log), and one short
run starts nginx and ``axon serve`` with two workers each and compares the workers' sum with
what wrk counted.
"""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import pytest

from axon.bench import cli, nginx, per_worker, scenarios, targets
from axon.metrics.files import Slots


def _ctx(tmp_path: Path, workers: int, count: bool = True) -> targets.Context:
    return targets.Context(tmp_path / "root", tmp_path / "work", 8123, tmp_path / "cache", workers=workers,
                           count_workers=count)


def test_two_workers_each_listen_on_their_own_socket_and_are_counted(tmp_path):
    ctx = _ctx(tmp_path, 2)
    (axon,) = targets.TARGETS["axon"].commands(ctx)
    assert axon.argv[axon.argv.index("--workers") + 1] == "2"
    assert "--reuse-port" in axon.argv and "--metrics" in axon.argv
    assert axon.env["AXON_METRICS_DIR"] == str(ctx.metrics_dir)
    (observed,) = targets.TARGETS["axon-observed"].commands(ctx)
    assert observed.argv.count("--metrics") == 1
    targets.TARGETS["nginx"].commands(ctx)
    conf = (ctx.workdir / "nginx" / "nginx.conf").read_text()
    assert "worker_processes 2;" in conf and " reuseport;" in conf
    assert f"access_log {ctx.worker_log} axon_worker buffer=64k flush=1s;" in conf
    assert per_worker.reader("nginx", ctx) is not None and per_worker.reader("axon", ctx) is not None
    assert per_worker.reader("uvicorn", ctx) is None  # counts nothing per worker
    assert targets.TARGETS["axon"].describe(2) == "axon serve (native server), 2 workers (SO_REUSEPORT)"
    assert targets.TARGETS["nginx"].describe(2).endswith(", 2 workers (reuseport)")


def test_two_workers_uncounted_pay_for_no_counting(tmp_path):
    ctx = _ctx(tmp_path, 2, count=False)
    (axon,) = targets.TARGETS["axon"].commands(ctx)
    assert "--reuse-port" in axon.argv and "--metrics" not in axon.argv and "AXON_METRICS_DIR" not in axon.env
    targets.TARGETS["nginx"].commands(ctx)
    conf = (ctx.workdir / "nginx" / "nginx.conf").read_text()
    assert "worker_processes 2;" in conf and " reuseport;" in conf and "axon_worker buffer" not in conf
    assert per_worker.reader("axon", ctx) is None and per_worker.reader("nginx", ctx) is None


def test_one_worker_is_started_as_before(tmp_path):
    ctx = _ctx(tmp_path, 1, count=False)
    (axon,) = targets.TARGETS["axon"].commands(ctx)
    assert "--reuse-port" not in axon.argv and "--metrics" not in axon.argv and "AXON_METRICS_DIR" not in axon.env
    targets.TARGETS["nginx"].commands(ctx)
    conf = (ctx.workdir / "nginx" / "nginx.conf").read_text()
    assert "worker_processes 1;" in conf and "reuseport" not in conf and "axon_worker buffer" not in conf
    assert per_worker.reader("axon", ctx) is None and per_worker.reader("nginx", ctx) is None


def test_counts_read_from_axons_metrics_files_and_nginxs_log(tmp_path):
    store = tmp_path / "metrics"
    store.mkdir()
    for pid, n in (("101", 3), ("102", 5)):
        Slots(store / f"{pid}.metrics").write({"r GET 200 0.001": n - 1, "r GET 404 0.005": 1, "bytes": 4096.0 * n})
    assert per_worker.axon_counts(store) == {"101": 3, "102": 5}
    log = tmp_path / "workers.log"
    log.write_text("7 /files/a\n8 /files/b\n7 /metrics\n7 /api/health\n")
    assert per_worker.nginx_counts(log) == {"7": 2, "8": 1}  # the bench's own /metrics reads left out
    assert per_worker.nginx_counts(tmp_path / "none.log") == {}
    assert per_worker.between({"7": 2}, {"7": 10, "8": 4, "9": 0}) == {"7": 8, "8": 4}


def test_workers_move_the_server_cpus_and_say_when_the_load_shares_one(tmp_path):
    parser = cli.argparse.ArgumentParser()
    cli.configure(parser)
    one = cli.settings_from(parser.parse_args(["--compare"]))
    assert (one.workers, one.server_cpus, one.load_cpus) == (1, "0", "1")
    assert "(shared with the server)" not in one.describe()["load CPUs"]
    two = cli.settings_from(parser.parse_args(["--compare", "--workers", "2"]))
    assert (two.workers, two.server_cpus, two.load_cpus, two.count_workers) == (2, "0-1", "1", False)
    assert cli.settings_from(parser.parse_args(["--compare", "--workers", "2", "--count-workers"])).count_workers
    assert two.describe()["load CPUs"] == "1 (shared with the server)"
    assert two.describe()["server workers"].startswith("2,")
    with pytest.raises(ValueError):
        cli.settings_from(parser.parse_args(["--compare", "--workers", "0"]))


@pytest.mark.slow  # two servers, two workers each, a few seconds of wrk
@pytest.mark.skipif(shutil.which("wrk") is None or not Path(nginx.binary()).exists(),
                    reason="wrk and nginx are installed by scripts/setup.sh --all")
def test_each_workers_requests_add_up_to_what_wrk_counted(tmp_path):
    root = scenarios.ensure_files(tmp_path / "files")
    out = tmp_path / "out"
    pin = [] if (os.cpu_count() or 1) >= 2 else ["--no-pin"]
    code = cli.main(["--compare", "--targets", "nginx,axon", "--workers", "2", "--count-workers", "--scenarios", "health,T1",
                     "--files-dir", str(root), "--burst", "0", "--sustained", "1", "--connections", "8",
                     "--threads", "2", "--no-chart", "--out", str(out), *pin])
    assert code == 0
    rows = json.loads((out / "results.json").read_text())["results"]
    assert {(r["target"], r["scenario"]) for r in rows} == {(t, s) for t in ("nginx", "axon") for s in ("health", "T1")}
    for row in rows:
        counts = row["per_worker"]
        assert len(counts) == 2 and all(n > 0 for n in counts.values()), row  # both workers answered
        answered = row["wrk"]["requests"]
        assert answered <= sum(counts.values()) <= answered + 8, row  # plus at most one in flight a connection
    summary = (out / "summary.md").read_text()
    assert "## Requests per worker" in summary and "server workers 2" in summary
