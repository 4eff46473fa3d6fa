"""Logging under the ``axon`` logger, a JSON formatter, and an access log that is off by default.

Terminal logging alone halved a server's throughput in one of our seeds (seed 001), so the access
log is opt-in and, when on, costs a tuple per response (axon.records) and under a microsecond.
"""

from __future__ import annotations

import json
import logging
import os
import stat
import sys
import time
from typing import IO

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
_PIPE_BUF = 4096  # a write at most this long to a pipe is never interleaved with another's
# "ms" is to the microsecond, truncated. "0.000" to "0.999" are made once: most responses are
# planned in under a millisecond, and formatting a float was a third of a line's cost.
_SUB_MS = [f"0.{us:03d}" for us in range(1000)]


def _ms(us: int) -> str:
    """Microseconds as milliseconds, to three places (0 for a negative duration: none is)."""
    return f"{us // 1000}.{us % 1000:03d}" if us >= 0 else "0.000"


# Formatting an int costs more than finding its text: statuses and methods, as JSON.
_STATUSES = {status: str(status) for status in range(100, 600)}
_METHODS = {method: f'"{method}"' for method in ("GET", "HEAD", "POST", "PUT", "DELETE", "PATCH", "OPTIONS")}


class AccessLog:
    """One line per response, JSON or text, on stdout: under 1 µs a response.

    Not through the logging module, whose LogRecord, caller lookup and Formatter cost ~150,000
    instructions a line, +69% on T1 (seed 001: logging halved throughput). The App keeps a tuple
    per response (axon.records) and hands them over in batches, at most 0.25 s late; a batch is
    formatted in one comprehension and written whole. A pipe (journald, docker) gets writes of
    at most PIPE_BUF bytes, so workers sharing it never split each other's lines; a regular file
    gets one write a batch.
    """

    def __init__(self, stream: IO[str] | None = None, *, json_format: bool = False, max_query: int = 2048) -> None:
        self.stream = stream if stream is not None else sys.stdout
        self.json_format = json_format
        self.max_query = max_query
        try:
            self.stream.flush()
            self.fd: int | None = self.stream.fileno()
            # A regular file's write is never interleaved with another's: no need to cut it.
            self._chunk = 1 << 30 if stat.S_ISREG(os.fstat(self.fd).st_mode) else _PIPE_BUF
        except (AttributeError, OSError, ValueError):  # not a real file: pytest's capsys, StringIO
            self.fd = None
        self._format = self._json_lines if json_format else self._text_lines
        self._second: tuple[int, str] = (-1, "")  # the last second seen, formatted: one attribute, set at once
        self._stamps: dict[int, str] = {}  # wall-clock millisecond -> its ISO 8601 text
        self._paths: dict[str, str] = {}  # path -> its JSON string: a few paths take most requests

    def read(self, records: list[tuple]) -> None:
        """Write a line for each record (axon.records)."""
        text = self._format(records)
        if self.fd is None:
            self.stream.write(text)
            return
        data = text.encode("utf-8", "backslashreplace")
        chunk = self._chunk
        while len(data) > chunk:  # cut at a line's end, each piece whole lines
            cut = data.rfind(b"\n", 0, chunk) + 1 or data.index(b"\n") + 1  # (a line longer than a piece: alone)
            self._write(data[:cut])
            data = data[cut:]
        self._write(data)

    def _stamp(self, ms: int) -> str:
        """ISO 8601 UTC of a wall-clock millisecond; kept, for the next lines of that millisecond."""
        stamps = self._stamps
        if len(stamps) >= 1024:
            stamps.clear()
        second, milli = divmod(ms, 1000)
        known, text = self._second  # read once: two Apps' records may be formatted at once
        if second != known:
            text = time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(second))
            self._second = (second, text)
        stamps[ms] = stamp = f"{text}.{milli:03d}Z"
        return stamp

    def _json_lines(self, records: list[tuple]) -> str:
        paths, stamps, max_query = self._paths, self._stamps, self.max_query
        offset = time.time() - time.perf_counter()  # records carry perf_counter times
        return "".join([
            f'{{"time":"{stamps.get(ms := int((ended + offset) * 1000)) or self._stamp(ms)}","level":"info",'
            f'"logger":"axon.access","method":{_METHODS.get(method) or _quote(method)},'
            f'"path":{paths.get(path) or self._quote_path(path)},"query":{_quote(query[:max_query])},'
            f'"status":{_STATUSES.get(status, status)},"bytes":{"null" if nbytes is None else nbytes},'
            f'"ms":{_SUB_MS[us] if 0 <= (us := int(seconds * 1_000_000)) < 1000 else _ms(us)},'
            f'"client":{_quote(client) if client else "null"}}}\n'
            for ended, method, path, query, status, nbytes, _, seconds, client, _ in records
        ])

    def _quote_path(self, path: str) -> str:
        quoted = _quote(path)
        if len(self._paths) < 1024:
            self._paths[path] = quoted
        return quoted

    @staticmethod
    def _text_lines(records: list[tuple]) -> str:
        return "".join([
            f"{method} {path} {status} {'-' if nbytes is None else nbytes} {seconds * 1000:.1f}ms\n"
            for _, method, path, _, status, nbytes, _, seconds, _, _ in records
        ])

    def _write(self, data: bytes) -> None:
        try:
            while data:
                data = data[os.write(self.fd, data) :]  # type: ignore[arg-type]
        except OSError:
            pass  # a closed or full stdout must not fail requests


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
        from .records import drain_all

        drain_all()  # the lines waiting for the access log being replaced
    access = AccessLog(sys.stdout, json_format=json_format) if access_log else None
