"""One worker: an event loop serving an App on a listening socket until told to stop.

A worker is a process forked by the supervisor, or (``--workers 0``, and the tests) the process
itself or a thread with its own loop. It keeps the set of open connections, sweeps their deadlines
once a second (a float compare per connection; no timer per request), and stops gracefully:
stop accepting, close idle connections, let responses in flight finish for up to
``graceful_timeout`` seconds, then cut what is left.
"""

from __future__ import annotations

import asyncio
import gc
import logging
import os
import resource
import signal
import socket
import threading
import time
from collections.abc import Callable
from typing import Any

from ..config import environment
from ..errors import ServiceUnavailable
from ..metrics.loop_lag import LoopLag
from ..pace import pace_of
from ..response import error_response
from .accept import SHARED_BURST, Acceptor, bind
from .config import ServerConfig
from .loops import new_event_loop
from .outbox import Outbox
from .protocol import HTTPProtocol
from .shortcuts import Shortcuts
from .simplehead import answer_tables, answerer
from .simplehead import parser as simple_head_parser
from .served import ServedApp
from .wire import CLOSE, date_line, encode_head

log = logging.getLogger("axon.server")


class Worker:
    def __init__(self, app: ServedApp, config: ServerConfig, *, parent_pid: int | None = None) -> None:
        self.app = app
        self.config = config
        self.limits = app.limits
        #: ``Date`` and ``Server`` header lines, rebuilt at each second boundary by a timer.
        self.date_line = date_line()
        self._date_handle: asyncio.TimerHandle | None = None
        self.use_sendfile = config.use_sendfile
        self.connections: set[HTTPProtocol] = set()
        self.loop: asyncio.AbstractEventLoop = None  # type: ignore[assignment]
        self.parent_pid = parent_pid
        #: The open files the App's requests share (the App was built with them), or None.
        self.shared_files = shared = app.shared_files
        #: Called as each request begins: the shared files take in what the kernel told of changes.
        self.sync_files: Callable[[], None] = _nothing_to_sync if shared is None else shared.sync
        #: For each of a remembered head's paths, the shared file (its version token and bytes)
        #: when they are current (nothing held), or None.
        self.cached_files: Callable[[list[str]], list] = _nothing_cached if shared is None else shared.cached_all
        self._acceptor: Acceptor | None = None
        self._stop: asyncio.Future | None = None
        self._tick_handle: asyncio.TimerHandle | None = None
        self._refresh_handle: asyncio.TimerHandle | None = None  # the sweep's next slice of checks
        #: Times this worker's loop: how late it runs, for ``/metrics`` (axon.metrics.loop_lag).
        self.loop_lag: LoopLag | None = None
        self._tick = min(1.0, max(0.05, min(self.limits.header_timeout, self.limits.keepalive_timeout, self.limits.write_timeout) / 4))
        # Deadlines for a phase starting now, rebuilt by each sweep: a connection copies one
        # instead of reading the clock on every request. They err late, never early: a timeout
        # fires between ``timeout`` and ``timeout`` + two ticks after its phase began.
        self.head_deadline = self.idle_deadline = self.write_deadline = float("inf")
        #: What connections may send without calling the App: its fixed answers (the health
        #: probe) and remembered heads (server/shortcuts.py); refreshed by each sweep.
        # A head is worth remembering only if its answer is written at once (writer.py): the chunk
        # of a connection without TLS, or the smaller one of a copying connection.
        chunk = config.write_chunk if self.use_sendfile else self.limits.chunk_size
        self.shortcuts = Shortcuts(app, chunk=chunk)
        #: The compiled reader of simple request heads (:mod:`.simplehead`), or None.
        self.simple_head = simple_head_parser()
        #: The compiled answer of fixed answers and trusted files (:func:`.simplehead.answerer`),
        #: or None, and the tables it reads.
        self.answer = answerer()
        self.answer_tables = answer_tables(self.limits, self.shortcuts, None if shared is None else shared.cache,
                                           app.record_sent, self, chunk)
        full = error_response(ServiceUnavailable("the server is at its connection limit; retry later"))
        self.full_response = encode_head(full.status, full.reason, full.headers, CLOSE) + b"".join(full.body)  # type: ignore[arg-type]

    async def serve(self, sock: socket.socket, ready: threading.Event | None = None) -> None:
        """Serve on ``sock`` until :meth:`stop`; then shut down gracefully."""
        loop = self.loop = asyncio.get_running_loop()
        self.outbox = Outbox(loop)
        self.pace = pace_of(loop)
        self._stop = loop.create_future()
        self._set_deadlines(loop.time())
        try:
            self._start(loop, sock, ready)
            await self._stop
        finally:
            await self._shutdown()

    def _start(self, loop: asyncio.AbstractEventLoop, sock: socket.socket, ready: threading.Event | None) -> None:
        # The socket is this worker's alone with one worker or --reuse-port: take every waiting
        # connection at once; shared, a few at a time (server/accept.py).
        alone = self.config.workers <= 1 or self.config.reuse_port
        self._acceptor = Acceptor(loop, sock, lambda: HTTPProtocol(self), self.config.ssl_context(),
                                  self.config.backlog if alone else SHARED_BURST)
        self._acceptor.start()
        self._tick_handle = loop.call_later(self._tick, self._sweep)
        if environment().loop_lag:
            self.loop_lag = LoopLag(loop).start()
        self._refresh_date()
        if ready is not None:
            ready.set()

    def stop(self) -> None:
        """Begin a graceful stop (safe to call more than once; a second call cuts at once)."""
        if self._stop is None:
            return
        if self._stop.done():
            for conn in list(self.connections):
                conn.abort()
        else:
            self._stop.set_result(None)

    def stop_threadsafe(self) -> None:
        self.loop.call_soon_threadsafe(self.stop)

    async def _shutdown(self) -> None:
        loop = self.loop
        if self._acceptor is not None:
            self._acceptor.close()
        for conn in list(self.connections):
            conn.shutdown()
        deadline = loop.time() + self.config.graceful_timeout
        while self.connections and loop.time() < deadline:
            await asyncio.sleep(0.02)
        if self.connections:
            log.warning("graceful timeout: cutting %d connection(s)", len(self.connections))
            for conn in list(self.connections):
                conn.abort()
            await asyncio.sleep(0)
        for handle in (self._tick_handle, self._refresh_handle):
            if handle is not None:
                handle.cancel()
        if self._date_handle is not None:
            self._date_handle.cancel()
        if self.loop_lag is not None:
            self.loop_lag.stop()
        self.app.close()  # and with it the shared files: what no response holds is closed
        self.shortcuts.clear()

    def _refresh_date(self) -> None:
        now = time.time()
        self.date_line = date_line(now)
        self._date_handle = self.loop.call_later(1.0005 - now % 1.0, self._refresh_date)

    def _set_deadlines(self, now: float) -> None:
        limits, late = self.limits, now + self._tick
        self.head_deadline = late + limits.header_timeout
        self.idle_deadline = late + limits.keepalive_timeout
        self.write_deadline = late + limits.write_timeout

    def _sweep(self) -> None:
        now = self.loop.time()
        self._set_deadlines(now)
        self.shortcuts.refresh()
        for conn in list(self.connections):
            deadline = conn.deadline
            if deadline is not None and deadline <= now:
                try:
                    conn.on_timeout()
                except Exception:
                    log.exception("timing out a connection failed")
                    conn.abort()
        if self.shared_files is not None:
            self.shared_files.prune()
            if self._refresh_handle is None:  # else the last sweep's walk, late, goes on to its end
                self._refresh(self.shared_files.cache.keys(), 0, now)
        if self.parent_pid is not None and os.getppid() != self.parent_pid:
            log.warning("the supervisor is gone; stopping")
            self.stop()
        self._tick_handle = self.loop.call_later(self._tick, self._sweep)

    def _refresh(self, keys: list[str], start: int, began: float) -> None:
        """Check the files in use whose window ends before the next sweep (FileCache.refresh), a
        slice at a time, the slices spread over ``REFRESH_SPREAD`` of the margin (or of the
        interval, if shorter) by their share of the keys: thousands of checks back to back would
        hold up the requests between them."""
        going_on = self.shared_files.cache.refresh(keys, start, self._tick + REFRESH_MARGIN, REFRESH_SLICE)  # type: ignore[union-attr]
        self._refresh_handle = None
        if going_on is not None:
            at = began + min(REFRESH_MARGIN, self._tick) * REFRESH_SPREAD * going_on / len(keys)
            self._refresh_handle = self.loop.call_at(at, self._refresh, keys, going_on, began)


#: A file in use is checked again (its path, its stat, its kept bytes) this much more than a
#: sweep's interval before its window ends, by the sweep rather than by the request that would
#: find it past (which the compiled answer hands to the Python path): the slices of one sweep,
#: and its lateness under load, have that long to run.
REFRESH_MARGIN = 1.0
#: The share of the margin over which one sweep's checks are spread: a file the last sweep left
#: was then more than the margin from its window's end, so a slice still comes before it with
#: the rest (0.2 s at the defaults) to spare for the loop's lateness.
REFRESH_SPREAD = 0.8
#: Files checked in one loop turn by the sweep (some tens of microseconds each).
REFRESH_SLICE = 32


def raise_fd_limit() -> None:
    """Lift the soft limit on open files to the hard one: each connection and file is one."""
    try:
        soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
        if hard == resource.RLIM_INFINITY or hard > soft:
            resource.setrlimit(resource.RLIMIT_NOFILE, (hard if hard != resource.RLIM_INFINITY else 1 << 20, hard))
    except (ValueError, OSError):
        pass


#: The cycle collector's thresholds while a worker runs (CPython's are 700, 10, 10). A batch of
#: 32 files makes about a thousand short-lived containers, all freed by reference counting; at
#: 700 every batch paid a young collection, and the older generations, which hold the caches'
#: ten thousands of entries, were walked every few hundred requests: 7-11% of a core under R32
#: (BENCHMARKS.md). Garbage in cycles (an exception's traceback) now waits a little longer.
GC_THRESHOLDS = (10_000, 20, 20)


def run_worker(app: ServedApp, config: ServerConfig, sock: socket.socket, *, parent_pid: int | None = None) -> int:
    """Run one worker in this process (main thread) until SIGTERM or SIGINT."""
    raise_fd_limit()
    thresholds = gc.get_threshold()
    gc.freeze()  # what start-up made (the App, its modules) is never walked again
    gc.set_threshold(*GC_THRESHOLDS)
    loop = new_event_loop()
    asyncio.set_event_loop(loop)
    worker = Worker(app, config, parent_pid=parent_pid)
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, worker.stop)
    try:
        loop.run_until_complete(worker.serve(sock))
    finally:
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.remove_signal_handler(sig)
        _cancel_all(loop)
        loop.close()
        gc.set_threshold(*thresholds)
        gc.unfreeze()
    return 0


def _cancel_all(loop: asyncio.AbstractEventLoop) -> None:
    tasks = [t for t in asyncio.all_tasks(loop) if not t.done()]
    for task in tasks:
        task.cancel()
    if tasks:
        loop.run_until_complete(asyncio.gather(*tasks, return_exceptions=True))


class ThreadServer:
    """A worker on its own loop in a background thread: for tests and for embedding.

        with ThreadServer(app, ServerConfig(port=0)) as server:
            urlopen(f"http://127.0.0.1:{server.port}/api/health")
    """

    def __init__(self, app: ServedApp, config: ServerConfig | None = None, sock: socket.socket | None = None) -> None:
        self.config = config or ServerConfig(port=0)
        self.sock = sock or bind(self.config)
        self.port = self.sock.getsockname()[1]
        self.worker = Worker(app, self.config)
        self._ready = threading.Event()
        self._error: BaseException | None = None
        self._thread = threading.Thread(target=self._run, name="axon-server", daemon=True)

    def _run(self) -> None:
        loop = new_event_loop()
        asyncio.set_event_loop(loop)
        try:
            loop.run_until_complete(self.worker.serve(self.sock, self._ready))
        except BaseException as exc:  # noqa: BLE001 - reported by start()
            self._error = exc
            self._ready.set()
        finally:
            _cancel_all(loop)
            loop.close()

    def start(self) -> ThreadServer:
        self._thread.start()
        self._ready.wait(10)
        if self._error is not None:
            raise self._error
        return self

    def stop(self, timeout: float = 10.0) -> None:
        if self._thread.is_alive():
            self.worker.stop_threadsafe()
            self._thread.join(timeout)

    def call(self, fn: Any, *args: Any) -> Any:
        """Run ``fn(*args)`` on the server's loop and return its result (for inspection)."""
        import concurrent.futures

        future: concurrent.futures.Future = concurrent.futures.Future()

        def run() -> None:
            try:
                future.set_result(fn(*args))
            except BaseException as exc:  # noqa: BLE001
                future.set_exception(exc)

        self.worker.loop.call_soon_threadsafe(run)
        return future.result(10)

    def __enter__(self) -> ThreadServer:  # noqa: PYI034
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()


def _nothing_to_sync() -> None:
    """No shared files (``--file-cache 0``, an object store): nothing to take in."""


def _nothing_cached(paths: list[str]) -> list[None]:
    """No shared files: every file of a remembered head is opened."""
    return [None] * len(paths)
