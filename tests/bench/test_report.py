"""Results, ratios and the article-format report, from recorded wrk output (no server)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from axon.bench import report, wrk
from axon.bench.results import Result, ResultSet, ratio, value

SAMPLES = Path(__file__).parent / "samples"
REFS = ("nginx", "original")


def measured(name: str, **changes) -> wrk.WrkResult:
    result = wrk.parse((SAMPLES / name).read_text())
    for key, v in changes.items():
        setattr(result, key, v)
    return result


@pytest.fixture
def results() -> ResultSet:
    rs = ResultSet(meta={"command": "axon bench --compare", "machine": "test box", "settings": {"connections": "50"}})
    t1 = "wrk_nginx_T1_burst.txt"
    rs.add(Result("nginx", "T2", "burst", per_batch=2, wrk=measured(t1, requests=20000, duration=1.0), peak_rss=10 * 2**20))
    rs.add(Result("original", "T2", "burst", wrk=measured(t1, requests=2000, duration=1.0), peak_rss=60 * 2**20))
    rs.add(Result("gunicorn", "T2", "burst", wrk=measured(t1, requests=5000, duration=1.0), peak_rss=80 * 2**20))
    rs.add(Result("nginx", "error", "burst", wrk=measured("wrk_nginx_error_burst.txt")))
    rs.add(Result("gunicorn", "error", "burst", wrk=measured("wrk_nginx_error_burst.txt")))
    rs.add(Result("nginx", "echo", "burst", "n/a", "nginx has no equivalent"))
    rs.add(Result("gunicorn", "echo", "burst", wrk=measured("wrk_reset_errors.txt")))
    rs.add(Result("gunicorn", "T2", "rate", wrk=measured("wrk_original_T2_rate.txt")))
    return rs


def test_ratios_compare_a_static_server_per_batch(results):
    gunicorn = results.find("gunicorn", "T2", "burst")
    nginx = results.find("nginx", "T2", "burst")
    original = results.find("original", "T2", "burst")
    # nginx needs 2 requests per T2 batch: 20000 req/s is 10000 batches/s.
    assert value(nginx, "rps") == 20000 and value(nginx, "rps", per_batch=True) == 10000
    assert ratio(gunicorn, nginx, "rps") == pytest.approx(0.5)
    assert ratio(gunicorn, original, "rps") == pytest.approx(2.5)
    assert ratio(gunicorn, nginx, "rss") == pytest.approx(8.0)
    assert ratio(gunicorn, nginx, "transfer") == pytest.approx(1.0)  # bytes are bytes
    assert ratio(gunicorn, None, "rps") is None


def test_errors_count_unexpected_statuses_only(results):
    assert value(results.find("gunicorn", "error", "burst"), "errors") == 0  # 404s were the point
    echo = results.find("gunicorn", "echo", "burst")
    assert value(echo, "errors") == echo.wrk.errors["read"] + echo.wrk.errors["status"]
    assert value(results.find("nginx", "echo", "burst"), "errors") is None  # skipped


def test_json_round_trip_is_strict_and_complete(results, tmp_path):
    path = tmp_path / "results.json"
    results.save(path, REFS)
    data = json.loads(path.read_text(), parse_constant=lambda c: pytest.fail(f"non-strict JSON: {c}"))
    row = next(r for r in data["results"] if (r["target"], r["scenario"], r["phase"]) == ("gunicorn", "T2", "burst"))
    assert row["wrk"]["rps"] == 5000 and "raw" not in row["wrk"]
    assert row["ratios"]["nginx"]["rps"] == pytest.approx(0.5)
    assert row["ratios"]["original"]["rps"] == pytest.approx(2.5)
    assert row["peak_rss"] == 80 * 2**20
    loaded = ResultSet.load(path)
    assert loaded.meta == results.meta
    assert [(r.target, r.scenario, r.phase, r.status) for r in loaded.results] == \
           [(r.target, r.scenario, r.phase, r.status) for r in results.results]
    again = loaded.find("gunicorn", "T2", "burst")
    assert again.wrk.latency == results.find("gunicorn", "T2", "burst").wrk.latency


def test_article_table_rows_and_ratio_cells(results):
    scenarios = results.scenarios("gunicorn")
    batch = [s for s in scenarios if s.kind == "batch"]
    text = report.article_table(results, "gunicorn", "burst", batch, REFS)
    rows = [line.split(" | ")[0].lstrip("| ") for line in text.splitlines()]
    for label in ["File Count (response)", "File Size (each)", "Payload Size (total)", "Total Requests",
                  "Data Transfer", "RPS", "Transfer (MB/s)", "Connect Errors", "Read Errors", "Write Errors",
                  "Timeout Errors", "Non-2xx/3xx Responses", "Average", "Std Deviation", "Maximum", "Std Dev %",
                  "50th Percentile", "75th Percentile", "90th Percentile", "99th Percentile", "RPS Average",
                  "RPS Std Dev", "RPS Maximum", "RPS Std Dev %", "Peak RSS (MB)"]:
        assert label in rows, label
    rps_row = next(line for line in text.splitlines() if line.startswith("| RPS |"))
    assert "5000.00 (n 0.50, o 2.50)" in rps_row
    assert "| 80.00 (n 8.00, o 1.33) |" in text  # peak RSS and its ratios


def test_render_whole_report(results):
    text = report.render(results, REFS, {"gunicorn": "Axon WSGI on gunicorn"})
    assert text.startswith("# axon bench report")
    assert "Command: `axon bench --compare`" in text and "Machine: test box" in text
    assert "## Summary: burst" in text and "## Summary: constant rate" in text
    assert "- `gunicorn`: Axon WSGI on gunicorn" in text and "## gunicorn" in text
    assert "- echo burst: n/a: nginx has no equivalent" in text  # what was not measured, and why
    assert "nginx serves one file per request" in text  # the legend explains the per-batch ratio
    summary = text.split("### Requests/s (batches)")[1].split("###")[0]
    assert "| nginx | 10000.00 (o 5.00) |" in summary  # nginx shown in batches/s
    short = report.render(results, REFS, summary_only=True)
    assert "## Summary: burst" in short and "## gunicorn" not in short


@pytest.mark.slow  # matplotlib draws the chart
def test_chart(results, tmp_path):
    pytest.importorskip("matplotlib")
    from axon.bench import chart

    path = chart.draw(results, tmp_path / "chart.png")
    assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    svg = chart.draw(results, tmp_path / "chart.svg")
    assert b"<svg" in svg.read_bytes()[:500]


def test_formats_table_gives_files_per_second_beside_multipart():
    rs = ResultSet()
    t1 = "wrk_nginx_T1_burst.txt"
    for name, requests in [("B32", 1000), ("B32.zip", 950), ("B32.zip.cold", 500), ("B32.tar", 900), ("T8", 400)]:
        rs.add(Result("axon", name, "sustained", wrk=measured(t1, requests=requests, duration=1.0)))
    table = report.formats_table(rs, "axon", "sustained")
    rows = table.splitlines()
    assert rows[0] == "| Files/s | multipart | zip, CRCs known | zip, CRCs cold | tar |"
    # 32 files per batch; each archive's ratio to the multipart batch. T8 has no archive: no row.
    assert rows[2] == "| B32 (32x4KB) | 32000 | 30400 (0.95x) | 16000 (0.50x) | 28800 (0.90x) |"
    assert len(rows) == 3
    assert "one batch in three formats" in report.render(rs)
    assert report.formats_table(ResultSet(), "axon", "sustained") == ""


def test_real_traffic_comes_first_in_files_per_second_with_p99_beside_each_ratio():
    rs = ResultSet()
    t1 = "wrk_nginx_T1_burst.txt"

    def add(target: str, scenario: str, requests: int, p99: float, per_batch: int = 1) -> None:
        w = measured(t1, requests=requests, duration=1.0)
        w.latency = wrk.Stats(mean=1.0, percentiles={"99": p99})
        rs.add(Result(target, scenario, "sustained", per_batch=per_batch, wrk=w))

    add("nginx", "R32", 64000, 2.0, per_batch=32)  # 64,000 files a second, one per request
    add("axon", "R32", 1000, 40.0)  # 1,000 batches of 32: 32,000 files a second
    add("nginx", "health~", 50000, 1.0)
    add("axon", "health~", 40000, 3.0)
    add("nginx", "T1", 30000, 1.0)
    add("axon", "T1", 31000, 1.0)
    table = report.real_table(rs, "sustained", REFS)
    rows = table.splitlines()
    assert rows[0] == "| Scenario | nginx files/s | nginx p99 (ms) | axon files/s | axon p99 (ms) |"
    assert rows[2] == "| R32 (32x4KB random of 10,000) | 64000 | 2.00 | 32000 (n 0.50) | 40.00 (n 20.00) |"
    assert rows[3] == ("| health~ (GET /api/health, a new header each request) | 50000 | 1.00 | 40000 (n 0.80)"
                       " | 3.00 (n 3.00) |")
    assert len(rows) == 4  # T1 repeats itself: not real traffic
    text = report.render(rs, REFS)
    assert text.index("## Real traffic: sustained") < text.index("## Summary: sustained")
    assert report.render(rs, REFS, summary_only=True).count("## Real traffic") == 1
    assert report.real_table(ResultSet(), "sustained", REFS) == ""


def test_tails_at_a_constant_rate_and_the_loop_lag_side_by_side():
    rs = ResultSet()
    t1 = "wrk_nginx_T1_burst.txt"
    lag = {"0.001": 90.0, "0.005": 9.0, "0.01": 1.0, "+Inf": 0.0}  # one phase's samples, by bucket

    def add(target: str, scenario: str, phase: str, per_batch: int = 1, sent: int = 700, **extra) -> None:
        w = measured(t1, requests=700 * per_batch, duration=1.0, paced_rate=700.0 * per_batch if phase == "rate" else None,
                     sent=sent * per_batch if phase == "rate" else None)
        w.latency = wrk.Stats(mean=1.0, percentiles={"50": 0.5, "99": 2.0, "99.9": 4.0})
        rs.add(Result(target, scenario, phase, per_batch=per_batch, wrk=w, **extra))

    for phase in ("sustained", "rate"):
        add("nginx", "R32", phase, per_batch=32)
        add("axon", "R32", phase, loop_lag=lag)
    rs.find("axon", "R32", "rate").wrk.send_lag = {"99": 0.2, "max": 1.5}
    rs.add(Result("axon", "health~", "rate", "skipped", "no closed-loop figure of nginx"))
    add("nginx", "F1", "rate", sent=700)
    add("axon", "F1", "rate", sent=660)  # 94% of the rate: it queued in the generator
    short = rs.find("axon", "F1", "rate")
    assert not short.wrk.held and rs.find("nginx", "F1", "rate").wrk.held
    assert value(short, "p99") is None and value(short, "lat_mean") is None  # no tail from a generator's queue
    assert value(short, "sent") == pytest.approx(660) and value(short, "rps") == pytest.approx(700)
    assert value(rs.find("axon", "R32", "rate"), "lag_max") == 10.0
    assert value(rs.find("axon", "R32", "rate"), "lag_p99") == 5.0
    assert value(rs.find("nginx", "R32", "rate"), "lag_max") is None  # nginx shows no lag
    rows = report.tails_table(rs).splitlines()
    assert rows[0] == ("| Scenario | batches/s asked | nginx p50 / p99 / p99.9 (ms) | axon p50 / p99 / p99.9 (ms)"
                       " | nginx batches/s sent | axon batches/s sent | nginx wrk's own lag p99 / max (ms)"
                       " | axon wrk's own lag p99 / max (ms) | axon loop lag max / p99 (ms) |")
    # nginx was asked 32 requests per batch: the same 700 batches/s.
    assert rows[2] == ("| R32 (32x4KB random of 10,000) | 700 | 0.50 / 2.00 / 4.00 | 0.50 / 2.00 / 4.00"
                       " | 700 | 700 | – | 0.20 / 1.50 | 10.00 / 5.00 |")
    assert rows[3] == ("| F1 (/files/ 4KB random of 10,000) | 700 | 0.50 / 2.00 / 4.00 | not valid: sent 94% of the rate"
                       " | 700 | 660 | – | – | – |")
    assert len(rows) == 4  # health~ has no measured rate phase
    lags = report.lag_table(rs).splitlines()
    assert lags[0] == "| Scenario | axon sustained | axon rate |"
    assert lags[2] == "| R32 (32x4KB random of 10,000) | 10.00 / 5.00 | 10.00 / 5.00 |"
    summary = report.render(rs, REFS, summary_only=True)
    assert "## Tails: constant rate" in summary and "## Event loop lag" in summary
    assert "| Maximum | – | 10.00 |" not in summary  # the article's tables are in the full report only
    assert "**Event Loop Lag (ms)**" in report.render(rs, REFS)
    assert report.tails_table(ResultSet()) == "" and report.lag_table(ResultSet()) == ""
