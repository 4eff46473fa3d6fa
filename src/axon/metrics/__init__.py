"""Prometheus metrics for an App: opt-in, standard library only.

    from axon import App
    from axon.metrics import instrument

    app = App("/srv/files")
    instrument(app)                      # GET /metrics, and every other response observed

``axon serve --metrics`` does the same. What is counted:

====================================  =======  ====================================================
``axon_requests_total``               counter  responses, by ``method`` and ``status``
``axon_errors_total``                 counter  responses >= 400, by ``status`` and Axon's error
                                               ``code`` (``not_found``, ``outside_root``...)
``axon_response_bytes_total``         counter  body bytes planned: the ``Content-Length`` of each
                                               response (0 for HEAD and 304); a client that
                                               leaves mid-stream was still counted in full
``axon_files_total``                  counter  files opened to serve a response: a batch counts
                                               its distinct files (a path named twice counts
                                               once), a single file or a range of it counts one
``axon_requests_in_flight``           gauge    requests being handled now
``axon_request_duration_seconds``     histo    time to handle a request and plan its response;
                                               the transfer of the body is not in it (nginx's
                                               ``$upstream_response_time`` has the whole of it)
``axon_event_loop_lag_seconds``       histo    how late each worker's event loop ran a timer it
                                               sets at a fixed interval: how long the loop was
                                               held up (:mod:`.loop_lag`; ``axon serve`` only)
``axon_object_disk_*_total``          counter  an object store's disk tier (``--object-disk-cache``):
                                               ``hits``, ``misses``, ``bytes_filled``,
                                               ``evictions``, ``fill_failures``; counted by the
                                               source (its ``counts()``), only where it has one
====================================  =======  ====================================================

Requests for ``/metrics`` itself are not counted, so the numbers describe the traffic alone.

One server, many workers: each worker process counts its own requests, and scraped one at a time
they would disagree on every scrape. With ``directory`` set, each process publishes its counts to
its own small file there (``<pid>.metrics``, memory-mapped, as prometheus_client's multiprocess
mode does) four times a second, from a thread, and a scrape of any worker sums every file: its
own counts exact, the others' at most 0.25 s old. A worker that exits leaves its file, so sums
never go backwards; its in-flight requests stop counting. ``axon serve --metrics`` gives the
workers a fresh directory.

The metrics read the App's records (axon.records): the request path makes one record, shared with
the access log, and the counting is done a batch at a time, with C loops, because a call per
response would cost as much as the App's own work (what it costs: deploy/README.md, and
``python -m axon.bench.observe_cost``).

One switch (:func:`instrument`) and three parts: the counting here, the files that sum the workers
(:mod:`.files`), the text format (:mod:`.exposition`).
"""

from __future__ import annotations

import bisect
import itertools
import operator
import os
import re
import threading
import time
import weakref
from collections import Counter
from pathlib import Path
from typing import TYPE_CHECKING, Callable, Iterable, Protocol

from ..config import environment
from ..records import Record, Records
from .exposition import CONTENT_TYPE, render_text
from .files import BYTES, FILES, STARTED, SUM, Slots, process_alive, read_file
from .loop_lag import LAG

if TYPE_CHECKING:
    from ..request import Request
    from ..response import Response

__all__ = ["CONTENT_TYPE", "DEFAULT_BUCKETS", "Metrics", "instrument"]

#: Upper bounds (seconds) of the latency histogram. Planning a batch is pure computation plus an
#: open and an fstat per file: tens of microseconds for a few files, milliseconds for a thousand,
#: so the buckets start low. A user's own blocking handler lands in the upper ones.
DEFAULT_BUCKETS = (0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0)

#: Seconds between two publications of a worker's counts to its file (multi-process mode).
PUBLISH_INTERVAL = 0.25

_METHODS = frozenset(("GET", "HEAD", "POST", "PUT", "DELETE", "PATCH", "OPTIONS"))
_PATH = operator.attrgetter("path")  # a record's (axon.records)
# Axon's error bodies are {"error": {"status": 404, "code": "not_found", ...}} (errors.py); the
# code is the first "code" key in it. Only the first bytes are searched.
_ERROR_CODE = re.compile(rb'"code":\s*"([A-Za-z0-9_.-]{1,64})"')


class Metrics:
    """The counters of one process and, with ``directory``, the sum over all of a server's.

    It counts what ``records`` (an App's: :func:`instrument` attaches it) hands it in batches;
    the requests begun before it was made are not in flight for it. ``render()`` is the
    exposition, served at ``path``, whose own requests are not counted. Thread-safe.
    """

    def __init__(self, records: Records, *, path: str = "/metrics", directory: str | os.PathLike[str] | None = None,
                 buckets: Iterable[float] = DEFAULT_BUCKETS, counts: Callable[[], dict[str, int]] | None = None) -> None:
        self.path = path
        #: The source's own counters (name -> this process's count), read at each snapshot.
        self.counts = counts
        self.buckets = tuple(sorted(float(b) for b in buckets))
        self.directory = Path(directory) if directory is not None else None
        #: Where the responses come from, and the requests begun.
        self.records = records
        self._reset()
        self._before = records.begun_count()  # never in flight for us
        # A forked child counts its own, from nothing (its records start from nothing too). Weakly:
        # a Metrics dropped is not kept for the hook's sake.
        ref = weakref.ref(self)
        os.register_at_fork(after_in_child=lambda: (metrics := ref()) is not None and metrics._reset())
        # A worker whose loop is timed publishes its lags at once, before it counts a request.
        LAG.on_timed(self._publish_from_now)
        if self.directory is not None:
            self.directory.mkdir(parents=True, exist_ok=True)

    def _reset(self) -> None:
        """Zero counts for this process (a forked worker counts its own, from nothing)."""
        self._lock = threading.Lock()  # a lock held by another thread at fork() stays held
        self._publish_lock = threading.Lock()
        # counts[0:3] are bytes, files and the sum of durations; then one block per (method,
        # status) seen, of one count per histogram bucket.
        self._counts: list[float] = [0, 0, 0.0]
        self._blocks: dict[tuple[str, int], int] = {}  # (method, status) -> the block's first index
        self._block_keys: list[tuple[int, str]] = []  # (first index, "r METHOD STATUS")
        self._errors: dict[tuple[int, str], int] = {}
        self._before = 0  # requests begun before instrument(): never recorded
        self._scrapes = 0  # requests for ``path`` finished: begun, but never counted
        self._rendering = 0  # scrapes being answered now: in flight, but not traffic
        self._store: Slots | None = None
        self._publisher: threading.Thread | None = None

    # -- counting ------------------------------------------------------------------------------

    def read(self, records: list[Record]) -> None:
        """Count a batch of responses (axon.records). Column by column, with C loops (zip,
        Counter, map, sum): a Python loop per response would cost as much as the App's work."""
        path = self.path
        if path in map(_PATH, records):  # scrapes are not traffic: count the rest
            traffic = [r for r in records if r.path != path]
        else:
            traffic = records
        scrapes = len(records) - len(traffic)
        if not traffic:
            with self._lock:
                self._scrapes += scrapes
            return
        _, methods, _, _, statuses, nbytes, files, seconds, _, errors = zip(*traffic)
        tally = Counter(zip(methods, statuses, map(bisect.bisect_left, itertools.repeat(self.buckets), seconds)))
        with self._lock:
            self._scrapes += scrapes
            counts, blocks = self._counts, self._blocks
            for (method, status, bucket), n in tally.items():  # a few kinds of response
                base = blocks.get((method, status)) or self._new_block(method, status)
                counts[base + bucket] += n
            counts[0] += sum(filter(None, nbytes))  # None for a stream, 0 with no body
            counts[1] += sum(files)
            counts[2] += sum(seconds)
            if max(statuses) >= 400:
                for status, error in zip(statuses, errors):
                    if status >= 400:
                        self._count_error(status, error)

    def _new_block(self, method: str, status: int) -> int:
        label = method if method in _METHODS else "other"
        base = self._blocks.get((label, status))  # e.g. a second unknown method: "other" again
        if base is None:
            base = len(self._counts)
            self._counts.extend([0] * (len(self.buckets) + 1))
            self._block_keys.append((base, f"r {label} {status}"))
            self._blocks[(label, status)] = base
            if self.directory is not None and self._publisher is None:
                self._start_publisher()  # the first count of this process: publish from now on
        if len(self._blocks) < 1_000:  # remember unknown methods too, but not without end
            self._blocks[(method, status)] = base
        return base

    def _count_error(self, status: int, head: object) -> None:
        if type(head) is not bytes:  # no body, or a file's
            head = b""
        found = _ERROR_CODE.search(head, 0, 200)
        code = found.group(1).decode("ascii") if found else "other"
        index = self._errors.get((status, code))
        if index is None:
            if len(self._errors) >= 1_000:  # codes come from the App, but be sure
                code = "other"
            index = self._errors.get((status, code))
        if index is None:
            index = len(self._counts)
            self._counts.append(0)
            self._block_keys.append((index, f"e {status} {code}"))
            self._errors[(status, code)] = index
        self._counts[index] += 1

    # -- this process's counts, and their publication ------------------------------------------

    def snapshot(self) -> dict[str, float]:
        """This process's counts by sample key."""
        self.records.drain()
        with self._lock:
            counts = list(self._counts)
            keys = list(self._block_keys)
            not_traffic = self._before + self._scrapes + self._rendering
        # Begun, less what is not traffic: requests in flight = started - counted. Asked after
        # our lock is let go: a drain holds the records' lock while it calls read(), which takes
        # ours, so taking theirs inside ours could deadlock with it (a worker hung for good).
        started = self.records.begun_count() - not_traffic
        out = {BYTES: counts[0], FILES: counts[1], SUM: counts[2], STARTED: started, **LAG.samples()}
        if self.counts is not None:
            out.update({f"c {name}": value for name, value in self.counts().items()})
        width = len(self.buckets) + 1
        for index, key in keys:
            if key[0] == "r":
                for i in range(width):
                    k = f"{key} {i}"
                    out[k] = out.get(k, 0) + counts[index + i]
            else:
                out[key] = out.get(key, 0) + counts[index]
        return out

    def publish(self) -> None:
        """Write this process's counts to its file (multi-process mode)."""
        if self.directory is None:
            return
        values = self.snapshot()
        with self._publish_lock:
            if self._store is None:
                self._store = Slots(self.directory / f"{os.getpid()}.metrics")
            self._store.write(values)

    def _publish_from_now(self) -> None:
        with self._lock:
            if self.directory is not None and self._publisher is None:
                self._start_publisher()

    def _start_publisher(self) -> None:
        def publish_forever() -> None:
            while True:
                time.sleep(PUBLISH_INTERVAL)
                try:
                    self.publish()
                except Exception:  # noqa: BLE001 - a full disk must not kill the worker's metrics
                    pass

        self._publisher = threading.Thread(target=publish_forever, name="axon-metrics", daemon=True)
        self._publisher.start()

    def flush(self) -> None:
        """Publish the last counts, if this process counted any: it is ending (axon.records)."""
        if self._publisher is not None:
            self.publish()

    # -- exposition ------------------------------------------------------------------------

    def values(self) -> dict[str, float]:
        """Sample keys and their values, summed over the directory's processes, with the in-flight
        requests of each live process (started and not finished) under ``"in_flight"``."""
        if self.directory is None:
            return _with_in_flight(self.snapshot(), alive=True)
        self.publish()
        totals: dict[str, float] = {}
        me = os.getpid()
        for path in self.directory.glob("*.metrics"):
            try:
                pid = int(path.stem)
                sample = read_file(path)  # this process's too: just published, with any base
            except (ValueError, OSError):
                continue  # not ours, or vanished
            for key, value in _with_in_flight(sample, alive=pid == me or process_alive(pid)).items():
                totals[key] = totals.get(key, 0) + value
        return totals

    def render(self) -> bytes:
        """The Prometheus text format (version 0.0.4) of :meth:`values`."""
        return render_text(self.values(), self.buckets)

    # -- a runtime's way in -----------------------------------------------------------------

    def endpoint(self, request: "Request") -> "Response":
        from ..response import Response

        with self._lock:
            self._rendering += 1  # this request is no traffic in flight
        try:
            return Response(200, [("Content-Type", CONTENT_TYPE)], [self.render()])
        finally:
            with self._lock:
                self._rendering -= 1


def _with_in_flight(sample: dict[str, float], *, alive: bool) -> dict[str, float]:
    finished = sum(v for k, v in sample.items() if k.startswith("r "))
    out = {k: v for k, v in sample.items() if k != STARTED}
    out["in_flight"] = max(0.0, sample.get(STARTED, 0) - finished) if alive else 0.0
    return out


class Instrumented(Protocol):
    """What :func:`instrument` needs of an App: this module sits below the App and names none."""

    records: Records
    public_paths: set[str]  # open without a signature
    store: object  # its ``counts()``, where it has one, are counters too

    def add_route(self, pattern: str, handler: Callable[[Request], Response], methods: Iterable[str], *,
                  blocking: bool | None = None) -> None: ...


def instrument(app: Instrumented, *, path: str = "/metrics", directory: str | os.PathLike[str] | None = None,
               buckets: Iterable[float] = DEFAULT_BUCKETS) -> Metrics:
    """Count every response of ``app`` and serve the counts at ``GET path``. Returns the
    :class:`Metrics`. ``directory`` (default ``$AXON_METRICS_DIR``) sums a server's workers:
    call this before the server forks them, or in each worker, with the same directory."""
    if directory is None:
        directory = environment().metrics_dir
    metrics = Metrics(app.records, path=path, directory=directory, buckets=buckets,
                      counts=getattr(app.store, "counts", None))
    app.add_route(path, metrics.endpoint, ["GET"], blocking=False)
    # Open even when requests must be signed (AXON_SECRET), as /api/health is: Prometheus does
    # not sign. Keep it from the world by address instead: axon serve on loopback, and the
    # nginx site lets only loopback through to it.
    app.public_paths.add(path)
    app.records.attach(metrics)
    return metrics
