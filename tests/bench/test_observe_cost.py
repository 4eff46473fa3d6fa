"""The in-server A/B of metrics and access-log costs: its arithmetic, and one short real run."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys

import pytest

from axon.bench import observe_cost
from axon.bench.observe_cost import FLOOR, STATES, _wait_for_load, summarize


def _cycle(n: int, **rates: float) -> list[dict]:
    out = []
    for state in STATES:
        rps = rates.get(state.replace("-", "_"), 100.0)
        out.append({"cycle": n, "state": state, "rps": rps, "cpu_us": 1e6 / rps})  # saturated: CPU/req = 1/rate
    return out


def test_ratios_are_per_cycle_medians():
    rows = [
        *_cycle(0, nothing=100, metrics=95, json_log=90, both=85),
        *_cycle(1, nothing=200, metrics=190, json_log=180, both=170),  # a faster second: same ratios
        *_cycle(2, nothing=100, metrics=60, json_log=90, both=85),  # a neighbour's burst
        *_cycle(3, nothing=1, metrics=1, json_log=1, both=1),  # wrk stopping: under the floor
        {"cycle": 4, "state": "nothing", "rps": 100.0},  # cut short
    ]
    table = summarize(rows, floor=50)
    assert {s: round(r, 3) for s, (_, r, _, _, _) in table.items()} == {"nothing": 1.0, "metrics": 0.95, "json-log": 0.9, "both": 0.85}
    assert {s: round(c, 3) for s, (_, _, c, _, _) in table.items()} == {"nothing": 1.0, "metrics": 1.053, "json-log": 1.111, "both": 1.176}
    assert table["nothing"][0] == 100 and table["nothing"][3] == 10_000 and table["both"][4] == 3


def test_no_cycle_under_load_is_an_error():
    with pytest.raises(SystemExit, match="no whole cycle"):
        summarize(_cycle(0, nothing=1), floor=50)


def _timed(rows: list[dict], start: float) -> list[dict]:
    return [{**row, "start": start + i, "end": start + i + 1.0} for i, row in enumerate(rows)]


def test_a_short_run_on_a_busy_machine_keeps_its_cycle():
    """9 s of wrk at 10,000 req/s overall: the first cycle has a second a neighbour's burst
    slowed to 3,500, the second is cut by wrk's stop. The slowed cycle counts; the cut one not,
    though every second of it passes the floor."""
    rows = _timed([*_cycle(0, nothing=12_000, metrics=3_500, json_log=11_000, both=10_500),
                   *_cycle(1, nothing=12_000, metrics=11_000, json_log=10_000, both=9_000)], start=100.2)
    table = summarize(rows, floor=FLOOR * 10_000, window=(100.0, 107.9))
    assert table["nothing"][4] == 1 and table["metrics"][0] == 3_500
    assert summarize(rows, floor=FLOOR * 10_000, window=(100.0, 108.3))["nothing"][4] == 2
    with pytest.raises(SystemExit, match="no whole cycle"):  # a second with no load to speak of
        summarize(_timed(_cycle(0, nothing=12_000, both=900), start=100.2), floor=FLOOR * 10_000, window=(100.0, 110.0))


def test_cycles_wait_for_the_load_not_for_health_checks(monkeypatch):
    monkeypatch.setattr(observe_cost, "_LOOK", 0.0)
    arrivals = iter([0, 1, 1, 2, 2, 3, 3, 40])  # counts before and after each look: health checks, then wrk
    looked = []

    def begun_count() -> int:
        looked.append(count := next(arrivals))
        return count

    _wait_for_load(begun_count)
    assert looked == [0, 1, 1, 2, 2, 3, 3, 40]


@pytest.mark.slow  # a real server under wrk for seconds
@pytest.mark.skipif(shutil.which("wrk") is None, reason="wrk is installed by scripts/setup.sh --all")
def test_a_short_real_run(tmp_path):
    pin = ["--server-cpus", "0", "--load-cpus", "1"] if (os.cpu_count() or 1) >= 2 else ["--server-cpus", "", "--load-cpus", ""]
    done = subprocess.run([sys.executable, "-m", "axon.bench.observe_cost", "--seconds", "9", "--files-dir", str(tmp_path), *pin],
                          capture_output=True, text=True, timeout=60, check=False)
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert lines[0].startswith("T1 under wrk") and [line.split()[0] for line in lines[2:]] == list(STATES)
    assert lines[2].split()[2:4] == ["1.000", "1.000"]  # nothing, to itself
    assert all(0.5 < float(line.split()[3]) < 2 for line in lines[3:])  # CPU per request, a ratio
