"""One measured figure set per (target, scenario, phase), the metrics we report, and the JSON file.

Every metric is defined once here, with the article's row label; the tables, the ratios and the
chart all read this list, so a figure cannot be computed two ways.
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path

from . import loop_lag
from .scenarios import Scenario, catalogue
from .wrk import Stats, WrkResult

PHASES = ("burst", "sustained", "rate")
MiB = 1024 * 1024


@dataclass
class Result:
    target: str
    scenario: str
    phase: str  # burst | sustained | rate
    status: str = "ok"  # ok | n/a (the target has no such endpoint) | skipped | failed
    note: str = ""
    per_batch: int = 1  # requests that make one batch (n for nginx's one file per request)
    wrk: WrkResult | None = None
    peak_rss: int | None = None  # bytes, summed over the server's processes
    loop_lag: loop_lag.Histogram | None = None  # the server's event-loop lag over the phase, if it shows one
    per_worker: dict[str, int] | None = None  # requests each server worker counted in the phase (pid -> n)

    @property
    def ok(self) -> bool:
        return self.status == "ok" and self.wrk is not None

    def to_json(self) -> dict:
        out = asdict(self)
        if self.wrk is not None:
            out["wrk"].pop("raw", None)
            # Derived, for readers; a rate not held leaves its latencies out of every table (value()).
            out["wrk"].update(rps=self.wrk.rps, transfer=self.wrk.transfer, sent_rate=self.wrk.sent_rate,
                              held=self.wrk.held)
        return out

    @classmethod
    def from_json(cls, data: dict) -> Result:
        data = dict(data)
        raw = data.pop("wrk", None)
        wrk = None
        if raw is not None:
            raw = {k: v for k, v in raw.items() if k not in ("rps", "transfer", "sent_rate", "held")}
            raw["latency"] = Stats(**raw["latency"])
            raw["thread_rps"] = Stats(**raw["thread_rps"])
            wrk = WrkResult(**raw)
        data.pop("ratios", None)
        return cls(wrk=wrk, **data)


@dataclass(frozen=True)
class Metric:
    key: str
    label: str
    section: str
    get: Callable[[WrkResult], float]
    kind: str = "number"  # number | count | bytes | rate | ms | percent
    per_request: bool = False  # counts requests: compared with nginx per batch (divided by n)


def _p(name: str) -> Callable[[WrkResult], float]:
    return lambda w: w.latency.percentiles.get(name, 0.0)


METRICS: list[Metric] = [
    Metric("requests", "Total Requests", "Performance Results", lambda w: w.requests, "count", True),
    Metric("bytes", "Data Transfer", "Performance Results", lambda w: w.bytes, "bytes"),
    Metric("rps", "RPS", "Performance Results", lambda w: w.rps, "rate", True),
    Metric("transfer", "Transfer (MB/s)", "Performance Results", lambda w: w.transfer / MiB),
    Metric("connect", "Connect Errors", "Socket Errors", lambda w: w.errors.get("connect", 0), "count"),
    Metric("read", "Read Errors", "Socket Errors", lambda w: w.errors.get("read", 0), "count"),
    Metric("write", "Write Errors", "Socket Errors", lambda w: w.errors.get("write", 0), "count"),
    Metric("timeout", "Timeout Errors", "Socket Errors", lambda w: w.errors.get("timeout", 0), "count"),
    Metric("non2xx", "Non-2xx/3xx Responses", "Socket Errors", lambda w: w.errors.get("status", 0), "count"),
    Metric("lat_mean", "Average", "Latency Statistics (ms)", lambda w: w.latency.mean, "ms"),
    Metric("lat_stdev", "Std Deviation", "Latency Statistics (ms)", lambda w: w.latency.stdev, "ms"),
    Metric("lat_max", "Maximum", "Latency Statistics (ms)", lambda w: w.latency.max, "ms"),
    Metric("lat_within", "Std Dev %", "Latency Statistics (ms)",
           lambda w: w.latency.within_stdev if w.latency.within_stdev is not None else float("nan"), "percent"),
    Metric("p50", "50th Percentile", "Latency Distribution (ms)", _p("50"), "ms"),
    Metric("p75", "75th Percentile", "Latency Distribution (ms)", _p("75"), "ms"),
    Metric("p90", "90th Percentile", "Latency Distribution (ms)", _p("90"), "ms"),
    Metric("p99", "99th Percentile", "Latency Distribution (ms)", _p("99"), "ms"),
    Metric("p999", "99.9th Percentile", "Latency Distribution (ms)", _p("99.9"), "ms"),
    Metric("thread_rps_mean", "RPS Average", "RPS Variance (per wrk thread)", lambda w: w.thread_rps.mean, "rate", True),
    Metric("thread_rps_stdev", "RPS Std Dev", "RPS Variance (per wrk thread)", lambda w: w.thread_rps.stdev, "rate", True),
    Metric("thread_rps_max", "RPS Maximum", "RPS Variance (per wrk thread)", lambda w: w.thread_rps.max, "rate", True),
    Metric("thread_rps_within", "RPS Std Dev %", "RPS Variance (per wrk thread)",
           lambda w: w.thread_rps.within_stdev if w.thread_rps.within_stdev is not None else float("nan"), "percent"),
]
METRIC = {m.key: m for m in METRICS}
_SCENARIOS = {s.name: s for s in catalogue()}
RSS_LABEL = "Peak RSS (MB)"


def value(result: Result, key: str, *, per_batch: bool = False) -> float | None:
    """A metric of ``result`` (also ``"rss"``: peak memory in MiB, ``"errors"``: socket errors
    and unexpected statuses together, ``"lag_max"`` and ``"lag_p99"``: the server's event-loop
    lag in ms, ``"sent"``: requests/s sent in a constant-rate phase); ``per_batch`` divides request
    counts by the requests one batch takes, to compare a static server with a batch server.
    A constant-rate phase whose generator fell short of the rate (:attr:`WrkResult.held`) has no
    latency: it measured the generator's queue, not the server."""
    wrk = result.wrk
    if not result.ok or wrk is None:
        return None
    if key == "sent":
        sent = wrk.sent_rate
        return None if sent is None else sent / (result.per_batch if per_batch else 1)
    if key == "rss":
        return None if result.peak_rss is None else result.peak_rss / MiB
    if key in ("lag_max", "lag_p99"):
        lag = result.loop_lag
        if lag is None:
            return None
        seconds = loop_lag.maximum(lag) if key == "lag_max" else loop_lag.percentile(lag, 99)
        return None if seconds is None else seconds * 1000
    if key == "errors":  # socket errors, plus error statuses where a success was expected
        expected_error = _SCENARIOS[result.scenario].expect_status >= 400
        return float(wrk.socket_errors + (0 if expected_error else wrk.errors.get("status", 0)))
    metric = METRIC[key]
    if metric.kind == "ms" and not wrk.held:
        return None
    got = float(metric.get(wrk))
    if per_batch and metric.per_request and result.per_batch > 1:
        got /= result.per_batch
    return got


def ratio(result: Result, reference: Result | None, key: str) -> float | None:
    """``result``'s figure over ``reference``'s for the same scenario and phase (None if either is
    missing or the reference is zero). Request counts compare per batch."""
    if reference is None:
        return None
    mine = value(result, key, per_batch=True)
    theirs = value(reference, key, per_batch=True)
    if mine is None or theirs is None or math.isnan(mine) or math.isnan(theirs) or theirs == 0:
        return None
    return mine / theirs


class ResultSet:
    """All results of a run, with the run's description; saved and loaded as one JSON file."""

    def __init__(self, results: list[Result] | None = None, meta: dict | None = None) -> None:
        self.results: list[Result] = list(results or [])
        self.meta: dict = dict(meta or {})

    def add(self, result: Result) -> None:
        self.results.append(result)

    def find(self, target: str, scenario: str, phase: str) -> Result | None:
        for r in self.results:
            if (r.target, r.scenario, r.phase) == (target, scenario, phase):
                return r
        return None

    @property
    def targets(self) -> list[str]:
        return list(dict.fromkeys(r.target for r in self.results))

    @property
    def phases(self) -> list[str]:
        present = {r.phase for r in self.results}
        return [p for p in PHASES if p in present]

    def scenarios(self, target: str | None = None) -> list[Scenario]:
        names = {r.scenario for r in self.results if target is None or r.target == target}
        return [s for s in catalogue() if s.name in names]

    def ratios(self, result: Result, references: tuple[str, ...]) -> dict[str, dict[str, float | None]]:
        out: dict[str, dict[str, float | None]] = {}
        for ref in references:
            if ref == result.target or ref not in self.targets:
                continue
            other = self.find(ref, result.scenario, result.phase)
            out[ref] = {key: ratio(result, other, key) for key in [*METRIC, "errors", "rss"]}
        return out

    def save(self, path: Path, references: tuple[str, ...] = ()) -> None:
        rows = []
        for r in self.results:
            row = r.to_json()
            if references:
                row["ratios"] = self.ratios(r, references)
            rows.append(row)
        path.write_text(json.dumps(clean({"meta": self.meta, "results": rows}), indent=1, allow_nan=False))

    @classmethod
    def load(cls, path: Path) -> ResultSet:
        data = json.loads(path.read_text())
        return cls([Result.from_json(r) for r in data["results"]], data.get("meta", {}))


def clean(obj: object) -> object:
    """NaN and infinities as None, so that the file is strict JSON."""
    if isinstance(obj, float) and not math.isfinite(obj):
        return None
    if isinstance(obj, dict):
        return {k: clean(v) for k, v in obj.items()}
    if isinstance(obj, list):
        return [clean(v) for v in obj]
    return obj

