"""Logging under the ``axon`` logger, a JSON formatter, and an access log that is off by default.

Terminal logging alone halved a server's throughput in one of our seeds (seed 001), so the access
log is opt-in and, when on, costs one ``isEnabledFor`` check and one record per response.
"""

from __future__ import annotations

import atexit
import collections
import json
import logging
import os
import sys
import threading
import time
from typing import IO, TYPE_CHECKING

if TYPE_CHECKING:
    from .app import Request
    from .response import Response

logger = logging.getLogger("axon")
access_logger = logging.getLogger("axon.access")
# Off unless asked for, whatever the root logger's level: an application's
# logging.basicConfig(level=INFO) must not turn on a line per response.
access_logger.setLevel(logging.WARNING)
#: The fast access log that ``configure(access_log=True)`` turns on (None when off). Without
#: it, ``access_logger`` still gets a record per response if you give it a level and a handler.
access: "AccessLog | None" = None


class JSONFormatter(logging.Formatter):
    """One JSON object per line: time, level, logger, message, and any ``extra`` fields."""

    _standard = set(vars(logging.makeLogRecord({}))) | {"message", "asctime"}

    def format(self, record: logging.LogRecord) -> str:
        out = {
            "time": time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(record.created)) + f".{int(record.msecs):03d}Z",
            "level": record.levelname.lower(),
            "logger": record.name,
            "message": record.getMessage(),
        }
        for key, value in vars(record).items():
            if key not in self._standard:
                out[key] = value
        if record.exc_info:
            out["exception"] = self.formatException(record.exc_info)
        return json.dumps(out, default=str)


_quote = json.encoder.encode_basestring_ascii  # type: ignore[attr-defined]
_METHODS = {m: f'"{m}"' for m in ("GET", "HEAD", "POST", "PUT", "DELETE", "PATCH", "OPTIONS")}
_PIPE_BUF = 4096  # a write at most this long to a pipe is never interleaved with another's


class AccessLog:
    """One line per response, JSON or text, on stdout: +8% on the smallest request (T1).

    Not through the logging module, whose LogRecord, caller lookup and Formatter cost ~150,000
    instructions a line, +69% on T1 (seed 001: logging halved throughput); this, ~17,000.
    Lines are queued and written a few kilobytes at a time, each write whole lines and at most
    PIPE_BUF bytes, so workers sharing stdout (a pipe to journald or docker) never split each
    other's lines; a thread writes what waits every ``interval`` seconds, so a line is late by
    that much at most, and at exit.
    """

    def __init__(self, stream: IO[str] | None = None, *, json_format: bool = False, interval: float = 0.5,
                 max_query: int = 2048) -> None:
        self.stream = stream if stream is not None else sys.stdout
        self.json_format = json_format
        self.interval = interval
        self.max_query = max_query
        try:
            self.stream.flush()
            self.fd: int | None = self.stream.fileno()
        except (AttributeError, OSError, ValueError):  # not a real file: pytest's capsys, StringIO
            self.fd = None
        self._reset()
        os.register_at_fork(after_in_child=self._reset)
        atexit.register(self.flush)

    def _reset(self) -> None:
        self._lines: collections.deque[bytes] = collections.deque()  # append and popleft are atomic
        self._write_lock = threading.Lock()
        self._thread: threading.Thread | None = None
        self._ms = -1
        self._stamp = ""
        self._paths: dict[str, str] = {}  # path -> its JSON string: a few paths take most requests

    def __call__(self, request: "Request", response: "Response", seconds: float) -> None:
        if response.stream is not None:
            nbytes = "null"  # streamed: length unknown
        else:
            nbytes = response.length if response.body else 0  # HEAD and 304 send no body
        if self.json_format:
            ms = time.time_ns() // 1_000_000
            if ms != self._ms:
                second, milli = divmod(ms, 1000)
                if second != self._ms // 1000:
                    self._second_stamp = time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(second))
                self._ms, self._stamp = ms, f"{self._second_stamp}.{milli:03d}Z"
            path = self._paths.get(request.path)
            if path is None:
                path = _quote(request.path)
                if len(self._paths) < 1024:
                    self._paths[request.path] = path
            method = _METHODS.get(request.method) or _quote(request.method)
            client = request.headers.get("x-forwarded-for")
            line = (
                f'{{"time":"{self._stamp}","level":"info","logger":"axon.access","method":{method},"path":{path},'
                f'"query":{_quote(request.query_string[: self.max_query])},"status":{response.status},'
                f'"bytes":{nbytes},"ms":{seconds * 1000:.3f},"client":{_quote(client) if client else "null"}}}\n'
            )
        else:
            line = f"{request.method} {request.path} {response.status} {'-' if nbytes == 'null' else nbytes} {seconds * 1000:.1f}ms\n"
        if self.fd is None:
            self.stream.write(line)
            return
        lines = self._lines
        lines.append(line.encode("utf-8", "backslashreplace"))
        if len(lines) >= 32:
            self.flush()
        elif self._thread is None:
            self._start()

    def flush(self) -> None:
        """Write every queued line now."""
        lines = self._lines
        with self._write_lock:
            chunk, size = [], 0
            while lines:
                line = lines.popleft()
                if size + len(line) > _PIPE_BUF and chunk:
                    self._write(b"".join(chunk))
                    chunk, size = [], 0
                chunk.append(line)
                size += len(line)
            if chunk:
                self._write(b"".join(chunk))

    def _write(self, data: bytes) -> None:
        try:
            while data:
                data = data[os.write(self.fd, data) :]  # type: ignore[arg-type]
        except OSError:
            pass  # a closed or full stdout must not fail requests

    def _start(self) -> None:
        def flush_forever() -> None:
            while True:
                time.sleep(self.interval)
                if self._lines:
                    self.flush()

        self._thread = threading.Thread(target=flush_forever, name="axon-access-log", daemon=True)
        self._thread.start()


def configure(level: str = "warning", *, json_format: bool = False, access_log: bool = False) -> None:
    """Set up the ``axon`` loggers for a command-line run (libraries leave this to the user)."""
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(JSONFormatter() if json_format else logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s"))
    logger.handlers[:] = [handler]
    logger.setLevel(level.upper())
    logger.propagate = False
    global access
    access_logger.setLevel(logging.WARNING)  # the fast path replaces its records
    if access is not None:
        access.flush()
    access = AccessLog(sys.stdout, json_format=json_format) if access_log else None
