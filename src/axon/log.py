"""Logging under the ``axon`` logger, a JSON formatter, and an access log that is off by default.

A line per response through the logging module costs more than the request it describes (a
LogRecord, the caller lookup, a Formatter and a write per line), so the access log is opt-in and
its fast form, :class:`AccessLog`, reads an App's records (axon.records) in batches instead.
"""

from __future__ import annotations

import json
import logging
import os
import stat
import sys
import time
from typing import IO, TYPE_CHECKING

from .records import Record, Records

if TYPE_CHECKING:
    from .request import Request
    from .response import Response

logger = logging.getLogger("axon")
access_logger = logging.getLogger("axon.access")
# Off unless asked for, whatever the root logger's level: an application's
# logging.basicConfig(level=INFO) must not turn on a line per response.
access_logger.setLevel(logging.WARNING)


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


class AccessLog(logging.Handler):
    """One line per response, JSON or text, on stdout, without a LogRecord per line.

    It reads an App's records (axon.records) in batches, at most 0.25 s late: a batch is
    formatted in one comprehension and written whole. A pipe (journald, docker) gets writes of
    at most PIPE_BUF bytes, so workers sharing it never split each other's lines; a regular file
    gets one write a batch. It is a logging handler too, so that :func:`configure` can make it
    the ``axon.access`` logger's: Apps built afterwards attach it to their records
    (:func:`connect`), and a record that reaches it through the logger (from an App built before)
    gets the same line.
    """

    def __init__(self, stream: IO[str] | None = None, *, json_format: bool = False, max_query: int = 2048) -> None:
        super().__init__()
        self.stream = stream if stream is not None else sys.stdout
        self.json_format = json_format
        self.max_query = max_query
        if json_format:
            self.setFormatter(JSONFormatter())  # for a record that is not a response's
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

    def read(self, records: list[Record]) -> None:
        """Write a line for each record (axon.records)."""
        self._put(self._format(records))

    def emit(self, record: logging.LogRecord) -> None:
        """A record from the ``axon.access`` logger: a response's (:func:`log_response`) gets the
        line its App's records would give (without query and client, which it does not carry)."""
        fields = vars(record)
        if "status" in fields and "method" in fields:
            ended = record.created - time.time() + time.perf_counter()  # records carry perf_counter times
            ms = fields.get("ms") or 0.0
            self.read([Record(ended, record.method, record.path, "", record.status, fields.get("bytes"), 0, ms / 1000, None, None)])
        else:
            self._put(self.format(record) + "\n")

    def flush(self) -> None:
        if self.fd is None:  # a real file's lines were written at once
            try:
                self.stream.flush()
            except (OSError, ValueError):  # closed
                pass

    def _put(self, text: str) -> None:
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

    def _json_lines(self, records: list[Record]) -> str:
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

    def _text_lines(self, records: list[Record]) -> str:
        """``TIME CLIENT METHOD PATH?QUERY STATUS BYTES MSms``: "-" for a client or length not
        known; a path or query holding a control character (a line break) escaped as in JSON."""
        stamps, max_query = self._stamps, self.max_query
        offset = time.time() - time.perf_counter()  # records carry perf_counter times
        return "".join([
            f"{stamps.get(ms := int((ended + offset) * 1000)) or self._stamp(ms)} {client.replace(' ', '') if client else '-'} {method} "
            f"{path if path.isprintable() else _quote(path)[1:-1]}"
            f"{'' if not query else '?' + (q if (q := query[:max_query]).isprintable() else _quote(q)[1:-1])} "
            f"{status} {'-' if nbytes is None else nbytes} {seconds * 1000:.1f}ms\n"
            for ended, method, path, query, status, nbytes, _, seconds, client, _ in records
        ])

    def _write(self, data: bytes) -> None:
        try:
            while data:
                data = data[os.write(self.fd, data) :]  # type: ignore[arg-type]
        except OSError:
            pass  # a closed or full stdout must not fail requests


def log_response(logger: logging.Logger, request: "Request", response: "Response", seconds: float) -> None:
    """A LogRecord for one response, for the handlers a user gives ``axon.access``."""
    logger.info(
        '%s %s %d %s %.1fms', request.method, request.path, response.status,
        "-" if response.length is None else response.length, seconds * 1000,
        extra={"method": request.method, "path": request.path, "status": response.status,
               "bytes": response.length, "ms": round(seconds * 1000, 3)},
    )


def connect(records: "Records") -> None:
    """Have a new App's ``records`` feed the access log as logging is set up now: the fast access
    logs that :func:`configure` made the ``axon.access`` logger's read them in batches; without
    one, the logger is told of each response while a user's handler makes it enabled."""
    fast = [handler for handler in access_logger.handlers if isinstance(handler, AccessLog)]
    for access_log in fast:
        records.attach(access_log)
    records.logger = None if fast else access_logger


def configure(level: str = "warning", *, json_format: bool = False, access_log: bool = False) -> None:
    """Set up the ``axon`` loggers for a command-line run (libraries leave this to the user).
    ``access_log``: a line per response on stdout, from the Apps built after this call in
    batches (from any built before, through the logger, one by one)."""
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(JSONFormatter() if json_format else logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s"))
    logger.handlers[:] = [handler]
    logger.setLevel(level.upper())
    logger.propagate = False
    replaced = [h for h in access_logger.handlers if isinstance(h, AccessLog)]
    for old in replaced:
        access_logger.removeHandler(old)
        old.close()
    if access_log:
        access_logger.addHandler(AccessLog(sys.stdout, json_format=json_format))
        access_logger.setLevel(logging.INFO)
        access_logger.propagate = False  # its lines go to stdout alone, not to the stderr above too
    else:
        access_logger.setLevel(logging.WARNING)
        if replaced:
            access_logger.propagate = True
