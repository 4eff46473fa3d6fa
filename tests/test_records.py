"""axon.records: a tuple per response, handed to the readers in batches."""

from __future__ import annotations

import multiprocessing
import os
import time
from pathlib import Path

import pytest

from axon.app import App, Request
from axon.records import BATCH, INTERVAL, Records
from axon.response import Response, stream_response


class Collect:
    def __init__(self) -> None:
        self.batches: list[list[tuple]] = []
        self.flushed = False

    def read(self, records: list[tuple]) -> None:
        self.batches.append(records)

    def flush(self) -> None:
        self.flushed = True

    @property
    def records(self) -> list[tuple]:
        return [r for batch in self.batches for r in batch]


@pytest.fixture
def app(root: Path) -> App:
    return App(root)


@pytest.fixture
def reader(app: App) -> Collect:
    collect = Collect()
    app.records.attach(collect)
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
    assert (method, path, query, status, nbytes, files, client, error) == (
        "GET", "/files/a.txt", "x=1", 200, 12, 1, "203.0.113.9", None)
    assert 0 < seconds < 1
    assert head[1:7:4] == ("HEAD", 0) and head[6] == 0  # no body sent, its file released unread
    assert missing[4] == 404 and missing[8] is None and b'"not_found"' in missing[9]


def test_a_stream_has_no_length():
    records, collect = Records(), Collect()
    records.attach(collect)
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
    assert not app.records.wanted and not app.records.observed()
    app.handle(Request("GET", "/api/health")).close()
    assert len(app.records.queue) == 0 and app.records.begun_count() == 1  # counted, not recorded


def test_reading_the_count_does_not_count(app: App):
    assert [app.records.begun_count() for _ in range(3)] == [0, 0, 0]
    app.handle(Request("GET", "/api/health")).close()
    assert [app.records.begun_count() for _ in range(3)] == [1, 1, 1]


def test_apps_keep_their_records_apart(root: Path):
    first, second = App(root), App(root)
    reader = Collect()
    first.records.attach(reader)
    assert first.records.wanted and not second.records.wanted
    first.handle(Request("GET", "/files/a.txt")).close()
    second.handle(Request("GET", "/api/health")).close()
    first.records.drain()
    second.records.drain()
    assert [r[2] for r in reader.records] == ["/files/a.txt"]
    assert (first.records.begun_count(), second.records.begun_count()) == (1, 1)


def test_a_detached_reader_gets_what_was_recorded_for_it(app: App, reader: Collect):
    app.handle(Request("GET", "/api/health")).close()
    app.records.detach(reader)
    assert not app.records.wanted and len(reader.records) == 1
    app.handle(Request("GET", "/api/health")).close()
    assert len(reader.records) == 1 and len(app.records.queue) == 0


def test_flush_hands_everything_over_and_flushes_the_readers(app: App, reader: Collect):
    app.handle(Request("GET", "/api/health")).close()
    app.records.flush()
    assert len(reader.records) == 1 and reader.flushed


def test_a_failing_reader_fails_no_request(app: App, reader: Collect, caplog):
    class Broken:
        def read(self, records):
            raise RuntimeError("bug")

        def flush(self):
            raise RuntimeError("bug")

    app.records.readers = (Broken(), *app.records.readers)
    for _ in range(BATCH):
        assert app.handle(Request("GET", "/api/health")).status == 200
    assert len(reader.records) == BATCH  # the others still read
    assert "reading response records failed" in caplog.text
    app.records.flush()
    assert reader.flushed and "flushing a reader of response records failed" in caplog.text


def _child(records: Records, conn) -> None:
    conn.send((len(records.queue), records.begun_count()))
    conn.close()
    os._exit(0)


def test_a_forked_child_starts_empty():
    """A worker forked from a master that recorded something counts only its own."""
    records, reader = Records(), Collect()
    records.attach(reader)
    next(records.begun)
    records.add(Request("GET", "/x"), Response(200, [], [b"x"]), 0.0, time.perf_counter())
    parent, child = multiprocessing.Pipe()
    with parent, child:  # closed here, not by a later garbage collection (tests count descriptors)
        process = multiprocessing.get_context("fork").Process(target=_child, args=(records, child))
        process.start()
        assert parent.recv() == (0, 0)
        process.join()
        process.close()
    # The parent's, untouched: waiting still, or read meanwhile by the drain thread (a slow run).
    assert len(records.queue) + sum(map(len, reader.batches)) == 1 and records.begun_count() == 1
    records.queue.clear()


def test_the_drain_thread_keeps_no_app_alive(root: Path):
    """An App that goes away takes its records and readers with it; its thread ends."""
    import gc
    import weakref

    app = App(root)
    app.records.attach(Collect())
    app.handle(Request("GET", "/api/health")).close()
    thread = app.records._thread
    gone = weakref.ref(app.records)
    del app
    gc.collect()
    assert gone() is None
    thread.join(5 * INTERVAL)
    assert not thread.is_alive()



def test_what_waits_at_exit_is_handed_over(root: Path, tmp_path: Path):
    """A process that ends before the drain thread's next turn still writes its lines and
    publishes its counts (a worker that ends with os._exit calls Records.flush itself)."""
    import subprocess
    import sys

    script = f"""
from axon import log
from axon.app import App, Request
from axon.metrics import instrument

log.configure("warning", access_log=True)
app = App({str(root)!r})
instrument(app, directory={str(tmp_path / "metrics")!r})
app.handle(Request("GET", "/files/a.txt")).close()
"""
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=30, check=True)
    assert " - GET /files/a.txt 200 12 " in done.stdout, done
    (published,) = (tmp_path / "metrics").iterdir()
    assert b"r GET 200" in published.read_bytes()


def test_a_record_is_built_in_its_fields_order(app: App, reader: Collect) -> None:
    """Records are built as tuples, by position (one per response): each value lands in the
    field of its name, for a response the App made and one a server sent past it."""
    from axon.records import Record

    response = app.handle(Request("GET", "/files/missing.txt", "q=1", {"x-forwarded-for": "203.0.113.9"}))
    response.close()
    app.records.add_sent("GET", "/files/a.txt", "x=2", 200, 12, 1, 0.25, 1234.5, "198.51.100.7")
    app.records.flush()
    made, sent = reader.records
    assert made._asdict() == {**made._asdict(), "method": "GET", "path": "/files/missing.txt", "query": "q=1",
                              "status": 404, "nbytes": response.length, "files": 0, "client": "203.0.113.9"}
    assert made.error is not None and b"not_found" in made.error and made.seconds >= 0 and made.ended > 0
    assert sent == Record(ended=1234.5, method="GET", path="/files/a.txt", query="x=2", status=200, nbytes=12,
                          files=1, seconds=0.25, client="198.51.100.7", error=None)
