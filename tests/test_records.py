"""axon.records: a tuple per response, handed to the readers in batches."""

from __future__ import annotations

import multiprocessing
import os
import time
from pathlib import Path

import pytest

from axon import log
from axon.app import App, Request
from axon.records import BATCH, INTERVAL, Records, drain_all
from axon.response import Response, stream_response


class Collect:
    def __init__(self) -> None:
        self.batches: list[list[tuple]] = []

    def read(self, records: list[tuple]) -> None:
        self.batches.append(records)

    @property
    def records(self) -> list[tuple]:
        return [r for batch in self.batches for r in batch]


@pytest.fixture
def app(root: Path) -> App:
    return App(root)


@pytest.fixture
def reader(app: App) -> Collect:
    collect = Collect()
    app.records.readers.append(collect)
    return collect


def test_the_fields_of_a_record(app: App, reader: Collect):
    before = time.perf_counter()
    app.handle(Request("GET", "/files/a.txt", "x=1", {"x-forwarded-for": "203.0.113.9"})).close()
    app.handle(Request("HEAD", "/files/a.txt")).close()
    app.handle(Request("GET", "/files/missing.txt")).close()
    app.records.drain()
    ok, head, missing = reader.records
    ended, method, path, query, status, nbytes, files, seconds, client, error = ok
    assert before <= ended <= time.perf_counter()
    assert (method, path, query, status, nbytes, files, client, error) == ("GET", "/files/a.txt", "x=1", 200, 12, 1, "203.0.113.9", None)
    assert 0 < seconds < 1
    assert head[1:7:4] == ("HEAD", 0) and head[6] == 0  # no body sent, its file released unread
    assert missing[4] == 404 and missing[8] is None and b'"not_found"' in missing[9]


def test_a_stream_has_no_length():
    records, collect = Records(), Collect()
    records.readers.append(collect)
    response = stream_response(iter([b"x"]), content_type="text/plain")
    records.add(Request("GET", "/s"), response, 0.001, time.perf_counter())
    records.drain()
    assert collect.records[0][5] is None


def test_a_batch_is_read_at_once(app: App, reader: Collect):
    for _ in range(BATCH - 1):
        app.handle(Request("GET", "/api/health")).close()
    assert reader.batches == []
    app.handle(Request("GET", "/api/health")).close()
    assert [len(b) for b in reader.batches] == [BATCH]


def test_a_quiet_app_is_read_within_the_interval(app: App, reader: Collect):
    app.handle(Request("GET", "/api/health")).close()
    deadline = time.monotonic() + 10 * INTERVAL
    while not reader.batches and time.monotonic() < deadline:
        time.sleep(INTERVAL / 10)
    assert [len(b) for b in reader.batches] == [1]


def test_no_record_is_made_when_nobody_reads(app: App):
    assert not app.records.wanted
    app.handle(Request("GET", "/api/health")).close()
    assert len(app.records.queue) == 0 and app.records.begun_count() == 1  # counted, not recorded


def test_the_access_log_reads_every_app(root: Path, tmp_path: Path):
    saved = log.access
    try:
        with open(tmp_path / "out.log", "w") as stream:
            log.access = log.AccessLog(stream)
            first, second = App(root), App(root)
            assert first.records.wanted and second.records.wanted
            first.handle(Request("GET", "/files/a.txt")).close()
            second.handle(Request("GET", "/api/health")).close()
            drain_all()
        lines = (tmp_path / "out.log").read_text().splitlines()
    finally:
        log.access = saved
    assert sorted(line.split()[1] for line in lines) == ["/api/health", "/files/a.txt"]


def test_a_failing_reader_fails_no_request(app: App, reader: Collect, caplog):
    class Broken:
        def read(self, records):
            raise RuntimeError("bug")

    app.records.readers.insert(0, Broken())
    for _ in range(BATCH):
        assert app.handle(Request("GET", "/api/health")).status == 200
    assert len(reader.records) == BATCH  # the others still read
    assert "reading response records failed" in caplog.text


def _child(records: Records, conn) -> None:
    conn.send((len(records.queue), records.begun_count()))
    conn.close()
    os._exit(0)


def test_a_forked_child_starts_empty():
    """A worker forked from a master that recorded something counts only its own."""
    records = Records()
    records.readers.append(Collect())
    next(records.begun)
    records.add(Request("GET", "/x"), Response(200, [], [b"x"]), 0.0, time.perf_counter())
    parent, child = multiprocessing.Pipe()
    with parent, child:  # closed here, not by a later garbage collection (tests count descriptors)
        process = multiprocessing.get_context("fork").Process(target=_child, args=(records, child))
        process.start()
        assert parent.recv() == (0, 0)
        process.join()
        process.close()
    assert len(records.queue) == 1 and records.begun_count() == 1  # the parent's, untouched
    records.queue.clear()


def test_the_drain_thread_keeps_no_app_alive(root: Path):
    """An App that goes away takes its records and readers with it; its thread ends."""
    import gc
    import weakref

    app = App(root)
    app.records.readers.append(Collect())
    app.handle(Request("GET", "/api/health")).close()
    thread = app.records._thread
    gone = weakref.ref(app.records)
    del app
    gc.collect()
    assert gone() is None
    thread.join(5 * INTERVAL)
    assert not thread.is_alive()


def test_only_an_apps_records_feed_the_access_log(root: Path, tmp_path: Path):
    """A Metrics of its own (an App observer, say) keeps records too: they are not logged twice."""
    from axon.metrics import Metrics

    saved = log.access
    try:
        with open(tmp_path / "out.log", "w") as stream:
            log.access = log.AccessLog(stream)
            app = App(root, observers=[Metrics()])
            app.handle(Request("GET", "/files/a.txt")).close()
            drain_all()
        lines = (tmp_path / "out.log").read_text().splitlines()
    finally:
        log.access = saved
    assert len(lines) == 1 and lines[0].startswith("GET /files/a.txt 200")
