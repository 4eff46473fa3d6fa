"""What each response leaves for the access log and the metrics: a tuple, read in batches.

In CPython a call and its attribute lookups cost more than the counting or formatting it does,
and per request that code runs with cold caches, the network having run in between. So the App
makes one tuple per response and appends it to a deque (atomic: no lock); readers take the
tuples in batches, each in one warm loop: every :data:`BATCH` responses, every
:data:`INTERVAL` seconds (a thread), and whenever a reader needs them all (a scrape, an exit).
With metrics and a JSON access log on, this halves what observing a response costs.

A record's fields, in order:

=========  =========================================================================
ended      ``time.perf_counter()`` when the response was planned (the log makes it wall-clock time:
           cheaper than reading the wall clock per response)
method     the request's method
path       the request's path (decoded)
query      the raw query string
status     the response's status
nbytes     its Content-Length; 0 for HEAD and 304 (no body), None for a stream
files      how many files it opened
seconds    time to handle the request and plan the response
client     the X-Forwarded-For header, or None
error      the first body segment of a response >= 400 (its JSON error), else None
=========  =========================================================================
"""

from __future__ import annotations

import atexit
import collections
import itertools
import os
import threading
import time
import weakref
from typing import TYPE_CHECKING, Protocol

from . import log

if TYPE_CHECKING:
    from .app import Request
    from .response import Response

Record = tuple  # (ended, method, path, query, status, nbytes, files, seconds, client, error)

#: Records waiting when they are handed to the readers (more if a drain was slow, a full stdout).
#: 256 rather than 64: a drain's fixed costs and its cold start are shared by four times the
#: responses, which cut what metrics and the JSON log cost on T1 by about a sixth (0.3-0.5 µs a
#: response, BENCHMARKS.md); its 0.3 ms in one request did not raise wrk's p99. 1024 gained no more.
BATCH = 256
#: Seconds a record waits at most before the readers get it (at low traffic).
INTERVAL = 0.25


class Reader(Protocol):
    """Takes records in batches (axon.metrics.Metrics, axon.log.AccessLog); must not raise."""

    def read(self, records: list[Record]) -> None: ...


class Records:
    """Records of responses, waiting for their readers; an App's (``access_log``) also for the
    process's access log, ``axon.log.access``, which reads every App's. Thread-safe; reset in a
    forked child."""

    def __init__(self, *, access_log: bool = False) -> None:
        self.readers: list[Reader] = []
        self.access_log = access_log
        self._reset()
        _every.add(self)

    def _reset(self) -> None:
        self.queue: collections.deque[Record] = collections.deque()
        #: Requests begun, counted by the App (``next``: one C call, atomic); with the records
        #: read, the requests in flight.
        self.begun = itertools.count()
        self._lock = threading.Lock()  # a lock held by another thread at fork() stays held
        self._thread: threading.Thread | None = None

    @property
    def wanted(self) -> bool:
        """Whether anyone reads records (else the App makes none)."""
        return bool(self.readers) or (self.access_log and log.access is not None)

    def begun_count(self) -> int:
        return int(repr(self.begun)[6:-1])  # "count(N)": read without counting one more

    def add(self, request: "Request", response: "Response", seconds: float, ended: float) -> None:
        """Record a planned response: ``seconds`` it took, ``ended`` by ``time.perf_counter()``."""
        status = response.status
        body = response.body
        queue = self.queue
        queue.append((
            ended, request.method, request.path, request.query_string, status,
            None if response.stream is not None else response.length if body else 0,
            len(response.files), seconds, request.headers.get("x-forwarded-for"),
            body[0] if status >= 400 and body else None,
        ))
        if len(queue) >= BATCH:
            self.drain()
        elif self._thread is None:
            self._start()

    def drain(self) -> None:
        """Hand every waiting record to the readers now."""
        queue = self.queue
        with self._lock:  # one batch at a time, in order
            if not queue:
                return
            popleft = queue.popleft
            batch = [popleft() for _ in range(len(queue))]
            readers = [*self.readers, log.access] if self.access_log and log.access is not None else self.readers
            for reader in readers:
                try:
                    reader.read(batch)
                except Exception:  # noqa: BLE001 - a reader's bug must not fail requests
                    log.logger.exception("reading response records failed")

    def _start(self) -> None:
        ref = weakref.ref(self)  # the thread must not keep an App (and its readers) alive

        def drain_forever() -> None:
            while True:
                time.sleep(INTERVAL)
                records = ref()
                if records is None:
                    return
                if records.queue:
                    records.drain()
                del records

        self._thread = threading.Thread(target=drain_forever, name="axon-records", daemon=True)
        self._thread.start()


# Every live Records, weakly: reset in a forked child, drained at exit (an App may be gone by then).
_every: "weakref.WeakSet[Records]" = weakref.WeakSet()


def drain_all() -> None:
    """Hand every App's waiting records to its readers: before a process exits."""
    for records in list(_every):
        records.drain()


def _reset_all() -> None:
    for records in list(_every):
        records._reset()


os.register_at_fork(after_in_child=_reset_all)
atexit.register(drain_all)
