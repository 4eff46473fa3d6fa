"""Pre-forked workers sharing one listening socket, and the supervisor that keeps them running.

The supervisor binds the socket and loads the App *before* forking (an import error or a port in
use fails the command at once, not in N workers), then forks ``workers`` children that all accept
on the inherited socket. With ``reuse_port`` the supervisor's socket only holds the port, and
each worker listens on a socket of its own in the port's ``SO_REUSEPORT`` group: the kernel
hashes each new connection to one of them, so the connections spread over the workers (one
queue shared, whichever worker wakes first takes what waits, and a busy one keeps winning).
What it costs: a connection waiting in a worker's queue when that worker dies is reset, where
the shared queue would have kept it for the others. A worker that dies (a crash, ``kill -9``) is replaced; the socket stays
open in the supervisor, so the port keeps answering through the other workers and the backlog
waits for the replacement. Repeated quick deaths back off up to 5 s between restarts.

SIGTERM or SIGINT: the supervisor stops restarting, passes SIGTERM to every worker (each stops
accepting and lets its in-flight responses finish up to ``graceful_timeout``), and kills what is
still running a few seconds after that. A worker whose supervisor disappears stops by itself.
"""

from __future__ import annotations

import errno
import logging
import os
import select
import signal
import socket
import sys
import time
from dataclasses import replace

from . import simplehead
from .accept import bind
from .config import ServerConfig
from .loops import loop_name
from .served import ServedApp
from .worker import raise_fd_limit, run_worker

log = logging.getLogger("axon.server")

#: A worker that lived at least this long before dying resets the restart back-off.
_STABLE_SECONDS = 10.0
_MAX_BACKOFF = 5.0


def serve(app: ServedApp, config: ServerConfig) -> int:
    """Run ``axon serve``: bind, then supervise ``config.workers`` workers (0: serve in-process)."""
    in_process = config.workers == 0 or not hasattr(os, "fork")
    sock = bind(config, listen=in_process or not config.reuse_port)
    host, port = sock.getsockname()[:2]
    shown = replace(config, host=host, port=port)
    log.info(
        "axon serve: listening on %s, root %s, %d worker(s), loop %s, %s, %s",
        shown.url, app.store.root, max(config.workers, 1), loop_name(), sending(app, config), simplehead.describe(),
    )
    if in_process:
        try:
            return run_worker(app, config, sock)
        finally:
            sock.close()
    return Supervisor(app, shown, sock).run()


def sending(app: ServedApp, config: ServerConfig) -> str:
    """What sends a response's file bytes, for the start line."""
    if app.store.body_stream is not None:  # an object store's pieces, written as they arrive
        return getattr(app.store, "sending", "bytes fetched from the store by ranged GETs")
    return "sendfile" if config.use_sendfile else "copying (TLS or AXON_NO_SENDFILE)"


class Supervisor:
    def __init__(self, app: ServedApp, config: ServerConfig, sock: socket.socket) -> None:
        self.app = app
        self.config = config
        self.sock = sock
        self.children: dict[int, float] = {}  # pid -> start time
        self.stopping = False
        self._failures = 0
        self._next_spawn = 0.0

    def run(self) -> int:
        raise_fd_limit()
        wake_r, wake_w = os.pipe()
        os.set_blocking(wake_r, False)
        os.set_blocking(wake_w, False)
        old_wakeup = signal.set_wakeup_fd(wake_w)
        handled = (signal.SIGTERM, signal.SIGINT, signal.SIGCHLD, signal.SIGQUIT)
        previous = {sig: signal.signal(sig, _noop) for sig in handled}
        kill_at = None
        try:
            while True:
                now = time.monotonic()
                if not self.stopping:
                    while len(self.children) < self.config.workers and now >= self._next_spawn:
                        self._spawn(wake_r, wake_w)
                elif not self.children:
                    return 0
                elif kill_at is not None and now >= kill_at:
                    log.warning("workers still running after the graceful timeout; killing them")
                    self._signal_all(signal.SIGKILL)
                    kill_at = None
                timeout = 1.0
                if not self.stopping and len(self.children) < self.config.workers:
                    timeout = max(0.0, min(timeout, self._next_spawn - now))
                try:
                    select.select([wake_r], [], [], timeout)
                except InterruptedError:
                    pass
                for sig in _drain(wake_r):
                    if sig in (signal.SIGTERM, signal.SIGINT, signal.SIGQUIT) and not self.stopping:
                        log.info("stopping: %s; letting responses in flight finish (up to %ss)",
                                 signal.Signals(sig).name, self.config.graceful_timeout)
                        self.stopping = True
                        self._signal_all(signal.SIGTERM)
                        self.sock.close()  # new connections are refused, not left in a backlog
                        kill_at = time.monotonic() + self.config.graceful_timeout + 5.0
                    elif sig in (signal.SIGTERM, signal.SIGINT) and self.stopping:
                        self._signal_all(signal.SIGKILL)  # a second Ctrl-C: stop now
                self._reap()
        finally:
            signal.set_wakeup_fd(old_wakeup)
            for sig, handler in previous.items():
                signal.signal(sig, handler)
            os.close(wake_r)
            os.close(wake_w)
            self.sock.close()

    def _spawn(self, wake_r: int, wake_w: int) -> None:
        parent = os.getpid()
        pid = os.fork()
        if pid == 0:  # the worker: never returns into the supervisor's code
            code = 1
            try:
                signal.set_wakeup_fd(-1)
                for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGCHLD, signal.SIGQUIT):
                    signal.signal(sig, signal.SIG_DFL)
                os.close(wake_r)
                os.close(wake_w)
                sock = self.sock
                if self.config.reuse_port:  # an accept queue of this worker's own, on the same port
                    sock = bind(self.config)
                    self.sock.close()
                code = run_worker(self.app, self.config, sock, parent_pid=parent)
            except BaseException:
                log.exception("worker %d failed", os.getpid())
            finally:
                try:
                    # os._exit skips atexit: hand over what this worker still holds (its last
                    # access-log lines and counts, 0.25 s old at most otherwise).
                    self.app.close()
                    sys.stdout.flush()
                    sys.stderr.flush()
                finally:
                    os._exit(code)
        self.children[pid] = time.monotonic()
        log.debug("started worker %d", pid)

    def _reap(self) -> None:
        while self.children:
            try:
                pid, status = os.waitpid(-1, os.WNOHANG)
            except ChildProcessError:
                self.children.clear()
                return
            if pid == 0:
                return
            started = self.children.pop(pid, None)
            if started is None:
                continue
            if self.stopping:
                log.debug("worker %d exited", pid)
                continue
            how = (f"killed by {signal.Signals(-os.waitstatus_to_exitcode(status)).name}"
                   if os.WIFSIGNALED(status) else f"exited with {os.waitstatus_to_exitcode(status)}")
            lived = time.monotonic() - started
            self._failures = 0 if lived >= _STABLE_SECONDS else self._failures + 1
            delay = 0.0 if self._failures <= 1 else min(_MAX_BACKOFF, 0.1 * 2 ** (self._failures - 2))
            self._next_spawn = time.monotonic() + delay
            log.error("worker %d %s after %.1fs; starting a new one%s", pid, how, lived,
                      f" in {delay:.1f}s" if delay else "")

    def _signal_all(self, sig: int) -> None:
        for pid in list(self.children):
            try:
                os.kill(pid, sig)
            except ProcessLookupError:
                pass


def _noop(signum: int, frame: object) -> None:
    """Installed so that the signal reaches the wake-up pipe; the loop reads it from there."""


def _drain(fd: int) -> list[int]:
    out: list[int] = []
    while True:
        try:
            data = os.read(fd, 512)
        except OSError as exc:
            if exc.errno in (errno.EAGAIN, errno.EWOULDBLOCK):
                return out
            raise
        if not data:
            return out
        out.extend(data)
