"""axon.metrics.loop_lag: a real event loop (uvloop and the standard library's) held up on
purpose shows the stall in its lag histogram, an idle one shows none; the text a scrape reads."""

from __future__ import annotations

import asyncio
import bisect
import time

import pytest
from test_metrics import family, parse, value

from axon.metrics import Metrics
from axon.metrics.exposition import render_lag, render_text
from axon.metrics.loop_lag import BUCKETS, LAG, LagHistogram, LoopLag
from axon.records import Records


def _loops():
    yield pytest.param(asyncio.new_event_loop, id="asyncio")
    try:
        import uvloop
    except ImportError:
        return
    yield pytest.param(uvloop.new_event_loop, id="uvloop")


def above(histogram: LagHistogram, seconds: float) -> int:
    """Samples over ``seconds`` (a bucket bound)."""
    return sum(histogram.counts[bisect.bisect_left(BUCKETS, seconds) + 1 :])


@pytest.mark.parametrize("new_loop", list(_loops()))
def test_a_stalled_loop_shows_the_stall_and_an_idle_one_does_not(new_loop) -> None:
    loop = new_loop()
    histogram = LagHistogram()
    timer = LoopLag(loop, into=histogram, interval=0.01).start()
    try:
        loop.run_until_complete(asyncio.sleep(0.3))  # idle: the timer alone
        idle = sum(histogram.counts)
        assert idle >= 5, histogram.counts
        assert above(histogram, 0.1) == 0, histogram.counts
        loop.call_soon(time.sleep, 0.3)  # a callback that holds the loop
        loop.run_until_complete(asyncio.sleep(0.1))
        # The timer fell due within the stall: it ran at least 0.3 s less one interval late.
        assert above(histogram, 0.25) == 1, histogram.counts
        assert histogram.total >= 0.29
    finally:
        timer.stop()
        loop.close()
    counted = sum(histogram.counts)
    assert counted > idle  # and after stop() nothing more is counted (the loop is closed)


def test_lateness_is_bucketed_as_prometheus_reads_le() -> None:
    histogram = LagHistogram()
    assert histogram.samples() == {}  # no loop timed: nothing to show
    histogram.timed = True
    for lag in (0.0, 0.005, 0.0051, 2.0):
        histogram.add(lag)
    samples = histogram.samples()
    index = BUCKETS.index(0.005)
    assert samples["l 0"] == 1 and samples[f"l {index}"] == 1 and samples[f"l {index + 1}"] == 1
    assert samples[f"l {len(BUCKETS)}"] == 1  # over the largest bound: +Inf alone
    assert samples["l sum"] == pytest.approx(2.0101)


def test_the_histogram_in_the_text_format() -> None:
    histogram = LagHistogram()
    histogram.timed = True
    for lag in (0.0002, 0.004, 0.3):
        histogram.add(lag)
    samples = parse(render_lag(histogram.samples()).decode())  # strict: HELP, TYPE, one family
    buckets = {dict(labels)["le"]: v for labels, v in family(samples, "axon_event_loop_lag_seconds_bucket").items()}
    assert (buckets["0.0001"], buckets["0.00025"], buckets["0.005"], buckets["0.25"], buckets["0.5"]) == (0, 1, 2, 2, 3)
    assert buckets["+Inf"] == 3 == value(samples, "axon_event_loop_lag_seconds_count")
    assert value(samples, "axon_event_loop_lag_seconds_sum") == pytest.approx(0.3042)
    # No loop timed (an App under WSGI or ASGI): no family at all, rather than a histogram of nothing.
    assert render_lag({}) == b""
    assert b"loop_lag" not in render_text({"in_flight": 0}, (0.1,))


def test_metrics_show_this_process_lag_once_a_loop_is_timed() -> None:
    metrics = Metrics(Records())
    loop = asyncio.new_event_loop()
    timer = LoopLag(loop).start()  # into this process's LAG, as a worker's
    try:
        loop.run_until_complete(asyncio.sleep(0.1))
    finally:
        timer.stop()
        loop.close()
    samples = parse(metrics.render().decode())
    assert value(samples, "axon_event_loop_lag_seconds_count") == sum(LAG.counts) > 0
    assert value(samples, "axon_requests_in_flight") == 0  # the request metrics are there too


def test_metrics_dropped_leave_no_callback_behind() -> None:
    # Each Metrics asks the process's histogram to be told when a loop is timed; one dropped
    # takes its callback with it, so a process that makes many holds as many as are alive.
    import gc

    histogram = LagHistogram()
    kept = []
    for i in range(200):
        metrics = Metrics(Records())
        histogram.on_timed(metrics._publish_from_now)
        if i % 50 == 0:
            kept.append(metrics)
        del metrics
        gc.collect(0)
    assert len(histogram._on_timed) <= len(kept) + 1
    histogram.start_timing()  # the live ones are called, the dead ones skipped
