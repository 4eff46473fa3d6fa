"""axon.bench.loop_lag: the lag histogram read from a scrape's text, the difference of two
scrapes, and its maximum and 99th percentile (upper bounds of buckets)."""

from __future__ import annotations

import math

from axon.bench import loop_lag
from axon.metrics.exposition import render_lag
from axon.metrics.loop_lag import BUCKETS, LagHistogram


def scraped(*lags: float, into: LagHistogram | None = None) -> tuple[LagHistogram, loop_lag.Histogram]:
    histogram = into or LagHistogram()
    histogram.timed = True
    for lag in lags:
        histogram.add(lag)
    found = loop_lag.parse(render_lag(histogram.samples()).decode())
    assert found is not None
    return histogram, found


def test_the_text_the_server_writes_is_read_back_cumulative() -> None:
    _, found = scraped(0.0002, 0.004)
    assert list(found) == [*(f"{b:g}" for b in BUCKETS), "+Inf"]
    assert (found["0.0001"], found["0.00025"], found["0.005"], found["+Inf"]) == (0, 1, 2, 2)
    assert loop_lag.parse("axon_requests_total 3\n") is None  # a server that shows no lag (nginx's 404 page too)


def test_a_phase_is_what_two_scrapes_differ_by() -> None:
    histogram, before = scraped(0.3, 0.3)  # before the phase: long stalls, not this phase's
    _, after = scraped(0.0002, 0.0002, 0.004, into=histogram)
    phase = loop_lag.between(before, after)
    assert phase is not None and sum(phase.values()) == 3
    assert loop_lag.maximum(phase) == 0.005  # the upper bound of the highest bucket with a sample
    assert loop_lag.percentile(phase, 50) == 0.00025
    assert loop_lag.percentile(phase, 99) == 0.005
    assert loop_lag.between(None, after) is None and loop_lag.between(before, None) is None


def test_past_the_largest_bound_is_infinite_and_nothing_is_none() -> None:
    _, before = scraped()
    _, after = scraped(5.0)
    phase = loop_lag.between(before, after)
    assert loop_lag.maximum(phase) == math.inf and loop_lag.percentile(phase, 99) == math.inf
    empty = loop_lag.between(before, before)
    assert loop_lag.maximum(empty) is None and loop_lag.percentile(empty, 99) is None
