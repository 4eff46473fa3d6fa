"""What each response of an App leaves for its readers (the metrics, the access log): a record
(a named tuple), read in batches.

In CPython a call and its attribute lookups cost more than the counting or formatting it does,
and per request that code runs with cold caches, the network having run in between. So the App
makes one :class:`Record` per response and appends it to a deque (atomic: no lock); readers
take the records in batches, each in one warm loop: every :data:`BATCH` responses, every
:data:`INTERVAL` seconds (a thread), and whenever a reader needs them all (a scrape, an exit).

Each App owns one :class:`Records`; a reader is attached to it explicitly (``instrument(app)``,
the access log ``axon.log.configure`` sets up for Apps built after it). Nothing here is shared
between Apps.

A :class:`Record`'s fields, in order:

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
client     the X-Forwarded-For header (a proxy in front sets it), else the peer's address, or None
error      the first body segment of a response >= 400 (its JSON error), else None
=========  =========================================================================
"""

from __future__ import annotations

import atexit
import collections
import itertools
import logging
import os
import threading
import time
import weakref
from typing import TYPE_CHECKING, NamedTuple, Protocol

if TYPE_CHECKING:
    from collections.abc import Mapping

    from .request import Request
    from .response import Response


class Record(NamedTuple):
    """One response, as its readers take it (the fields above): built by position, read in
    batches by unpacking (as a tuple) or by name."""

    ended: float
    method: str
    path: str
    query: str
    status: int
    nbytes: int | None
    files: int
    seconds: float
    client: str | None
    error: bytes | None


#: Records waiting when they are handed to the readers (more if a drain was slow, a full stdout).
#: Large enough that a drain's fixed costs and the cold start of its loops are shared by many
#: responses, small enough that a drain inside one request does not show in the latency tail
#: (the measurements: docs/benchmarks-history.md, "Batches of 256 records").
BATCH = 256
#: Seconds a record waits at most before the readers get it (at low traffic).
INTERVAL = 0.25

_log = logging.getLogger("axon")


# A record per response: built as a tuple is (a NamedTuple's own __new__ is a Python call, about
# five times the cost), all ten fields given in order.
_new_record = tuple.__new__


def client_of(headers: "Mapping[str, str]", peer: str | None) -> str | None:
    """Who a record names as the client: the proxy's ``X-Forwarded-For`` where one set it, else
    the peer's address."""
    return headers.get("x-forwarded-for") or peer


def record_of(request: "Request", response: "Response", seconds: float, ended: float) -> Record:
    """The record of ``response`` to ``request`` (the fields above)."""
    status = response.status
    body = response.body
    return _new_record(Record, (
        ended, request.method, request.path, request.query_string, status,
        None if response.stream is not None else response.length if body else 0,
        len(response.files), seconds, client_of(request.headers, request.client),
        body[0] if status >= 400 and body else None,
    ))


class Reader(Protocol):
    """Takes records in batches (axon.metrics.Metrics, axon.log.AccessLog); must not raise."""

    def read(self, records: list[Record]) -> None: ...

    def flush(self) -> None:
        """Finish what it holds (the metrics publish their counts): the process is ending."""


class Records:
    """The records of one App's responses, waiting for its readers. Thread-safe; a forked child
    starts empty."""

    def __init__(self) -> None:
        self.readers: tuple[Reader, ...] = ()
        #: Whether anyone reads the records (else the App makes none): a plain attribute, read
        #: per response.
        self.wanted = False
        #: The ``axon.access`` logger, told of each response while a user's handler makes it
        #: enabled; None while a fast access log reads these records instead (axon.log.connect).
        self.logger: logging.Logger | None = None
        self._hooked = False
        self._reset()

    def _reset(self) -> None:
        self.queue: collections.deque[Record] = collections.deque()
        #: Requests begun, counted by the App with ``next()`` (one C call, atomic: no lock); with
        #: the records read, the requests in flight. Read by :meth:`begun_count`.
        self.begun = itertools.count()
        self._reads = 0  # the begun_count() calls so far: each took one from ``begun`` too
        self._lock = threading.Lock()  # a lock held by another thread at fork() stays held
        self._thread: threading.Thread | None = None

    # -- readers -------------------------------------------------------------------------------

    def attach(self, reader: Reader) -> None:
        """Have ``reader`` read every response from now on."""
        if not self._hooked:
            self._hook()
        self.readers = (*self.readers, reader)
        self.wanted = True

    def detach(self, reader: Reader) -> None:
        """Stop feeding ``reader``, once it has what was recorded for it."""
        self.drain()
        self.readers = tuple(r for r in self.readers if r is not reader)
        self.wanted = bool(self.readers)

    def observed(self) -> bool:
        """Whether anything observes responses now: a reader, or a handler on ``axon.access``."""
        logger = self.logger
        return self.wanted or (logger is not None and logger.isEnabledFor(logging.INFO))

    # -- counting and recording ----------------------------------------------------------------

    def begun_count(self) -> int:
        """Requests begun. ``begun`` can only be read by counting once more: those are taken off."""
        with self._lock:
            self._reads += 1
            return next(self.begun) - self._reads + 1

    def add(self, request: "Request", response: "Response", seconds: float, ended: float) -> None:
        """Record a planned response: ``seconds`` it took, ``ended`` by ``time.perf_counter()``."""
        self._queue(record_of(request, response, seconds, ended))

    def add_sent(
        self, method: str, path: str, query: str, status: int, nbytes: int, files: int, seconds: float, ended: float,
        client: str | None,
    ) -> None:
        """Record a response a server sent past the App (a remembered head, server/shortcuts.py):
        its fields as :func:`record_of` gives them, the error none (only a 200 is sent so)."""
        self._queue(_new_record(Record, (ended, method, path, query, status, nbytes, files, seconds, client, None)))

    def logged(self) -> bool:
        """Whether a handler of your own on ``axon.access`` is told of each Request and Response."""
        logger = self.logger
        return logger is not None and logger.isEnabledFor(logging.INFO)

    def _queue(self, record: Record) -> None:
        queue = self.queue
        queue.append(record)
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
            for reader in self.readers:
                try:
                    reader.read(batch)
                except Exception:  # noqa: BLE001 - a reader's bug must not fail requests
                    _log.exception("reading response records failed")

    def flush(self) -> None:
        """Hand every waiting record over and have each reader finish: before the process ends
        (at exit; a worker of ``axon serve``, which ends with ``os._exit``, calls it itself)."""
        self.drain()
        for reader in self.readers:
            try:
                reader.flush()
            except Exception:  # noqa: BLE001 - one reader's failure must not keep the others
                _log.exception("flushing a reader of response records failed")

    # -- threads, forks and exits --------------------------------------------------------------

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

    def _hook(self) -> None:
        """With its first reader: a forked child starts empty (a worker counts its own), and what
        waits at exit is handed over. Weakly: an App dropped is not kept for its hooks' sake."""
        self._hooked = True
        ref = weakref.ref(self)
        os.register_at_fork(after_in_child=lambda: (records := ref()) is not None and records._reset())
        atexit.register(lambda: (records := ref()) is not None and records.flush())
