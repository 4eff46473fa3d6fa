"""Logging: the JSON formatter, configure(), and the access log (off by default)."""

from __future__ import annotations

import calendar
import io
import json
import logging
import os
import re
import sys
import threading
import time

import pytest

from axon import log
from axon.app import App, Request
from axon.log import JSONFormatter, configure
from axon.records import BATCH


@pytest.fixture(autouse=True)
def restore_loggers():
    """configure() changes process-wide loggers: put them back after each test."""
    saved = [(lg, lg.level, lg.handlers[:], lg.propagate) for lg in (log.logger, log.access_logger)]
    yield
    for lg, level, handlers, propagate in saved:
        lg.setLevel(level)
        lg.handlers[:] = handlers
        lg.propagate = propagate


def _record(msg="hello %s", args=("world",), level=logging.WARNING, extra=None, exc_info=None):
    logger = logging.getLogger("axon.test")
    return logger.makeRecord("axon.test", level, __file__, 1, msg, args, exc_info, extra=extra)


def test_json_formatter_fields():
    record = _record(extra={"path": "/files/a.txt", "status": 200, "ms": 1.5, "obj": object()})
    out = json.loads(JSONFormatter().format(record))
    assert out["level"] == "warning"
    assert out["logger"] == "axon.test"
    assert out["message"] == "hello world"
    assert re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z", out["time"])
    assert (out["path"], out["status"], out["ms"]) == ("/files/a.txt", 200, 1.5)
    assert out["obj"].startswith("<object object")  # unserializable values become strings
    for standard in ("args", "msg", "levelno", "pathname", "lineno", "exc_info", "thread"):
        assert standard not in out


def test_json_formatter_one_line_and_escapes():
    record = _record(msg="line1\nline2 \"quoted\" \x00 é", args=())
    text = JSONFormatter().format(record)
    assert "\n" not in text
    assert json.loads(text)["message"] == "line1\nline2 \"quoted\" \x00 é"


def test_json_formatter_exception():
    try:
        raise ValueError("kaboom")
    except ValueError:
        record = _record(level=logging.ERROR, exc_info=sys.exc_info())
    out = json.loads(JSONFormatter().format(record))
    assert "Traceback" in out["exception"] and "ValueError: kaboom" in out["exception"]


class _Collect(logging.Handler):
    def __init__(self):
        super().__init__(logging.DEBUG)
        self.records: list[logging.LogRecord] = []

    def emit(self, record):
        self.records.append(record)


def test_access_log_off_by_default(root):
    collect = _Collect()
    log.access_logger.addHandler(collect)
    try:
        app = App(root)
        app.handle(Request("GET", "/api/health")).close()
        app.handle(Request("GET", "/nope")).close()
    finally:
        log.access_logger.removeHandler(collect)
    assert collect.records == []
    assert not log.access_logger.isEnabledFor(logging.INFO)


def test_access_log_stays_off_under_an_info_root_logger(root):
    collect = _Collect()
    root_logger = logging.getLogger()
    old = root_logger.level
    root_logger.setLevel(logging.INFO)  # what logging.basicConfig(level=INFO) does
    root_logger.addHandler(collect)
    try:
        App(root).handle(Request("GET", "/api/health")).close()
    finally:
        root_logger.removeHandler(collect)
        root_logger.setLevel(old)
    assert [r for r in collect.records if r.name == "axon.access"] == []


def test_access_log_when_configured(root, capsys):
    configure("warning", access_log=True)
    app = App(root)
    app.handle(Request("GET", "/files/a.txt", "v=1&w=%20", client="192.0.2.7")).close()
    app.handle(Request("HEAD", "/missing")).close()
    app.handle(Request("GET", "/files/a.txt", headers={"x-forwarded-for": "203.0.113.9, 10.0.0.1"}, client="10.0.0.1")).close()
    app.handle(Request("GET", "/files/a\nGET /forged 200", client="192.0.2.7")).close()
    app.records.drain()  # lines are written in batches; a thread drains every 0.25 s
    out = capsys.readouterr().out.splitlines()
    assert len(out) == 4
    stamp = r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z"
    assert re.fullmatch(stamp + r" 192\.0\.2\.7 GET /files/a\.txt\?v=1&w=%20 200 12 \d+\.\dms", out[0]), out[0]
    assert re.fullmatch(stamp + r" - HEAD /missing 404 \d+ \d+\.\dms", out[1]), out[1]
    assert re.fullmatch(stamp + r" 203\.0\.113\.9,10\.0\.0\.1 GET /files/a\.txt 200 12 \d+\.\dms", out[2]), out[2]
    assert " GET /files/a\\nGET /forged 200 404 " in out[3]  # a line break in a path forges no line


def test_access_log_json(root, capsys):
    configure("info", json_format=True, access_log=True)
    app = App(root)
    app.handle(Request("GET", "/api/stream-files", "f=a.txt", {"x-forwarded-for": "203.0.113.9"})).close()
    app.records.drain()
    (line,) = capsys.readouterr().out.splitlines()
    out = json.loads(line)
    assert out["logger"] == "axon.access" and out["level"] == "info"
    assert (out["method"], out["path"], out["status"]) == ("GET", "/api/stream-files", 200)
    assert isinstance(out["bytes"], int) and out["bytes"] > 12
    assert isinstance(out["ms"], float)
    assert out["query"] == "f=a.txt" and out["client"] == "203.0.113.9"
    assert re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z", out["time"]), out["time"]


def test_configured_access_log_reads_the_records_of_apps_built_after(root, capsys):
    """configure() makes the fast access log the axon.access logger's; an App built afterwards
    attaches it to its records, and no LogRecord is made per response."""
    configure("warning", json_format=True, access_log=True)
    collect = _Collect()
    log.access_logger.addHandler(collect)  # would see any LogRecord a response made
    first, second = App(root), App(root)
    assert first.records.logger is None and first.records.readers == second.records.readers
    first.handle(Request("GET", "/files/a.txt")).close()
    second.handle(Request("GET", "/api/health")).close()
    assert capsys.readouterr().out == ""  # in batches: waiting
    first.records.drain()
    second.records.drain()
    lines = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert sorted(line["path"] for line in lines) == ["/api/health", "/files/a.txt"]
    assert collect.records == []


@pytest.mark.parametrize("json_format", [False, True])
def test_an_app_built_before_configure_is_logged_too(root, capsys, json_format):
    """Through the logger, a line at a time, the same line as the App's records would give."""
    early = App(root)
    configure("warning", json_format=json_format, access_log=True)
    late = App(root)
    early.handle(Request("GET", "/files/a.txt")).close()
    late.handle(Request("GET", "/files/a.txt")).close()
    first = capsys.readouterr().out  # the early App's line, at once
    late.records.drain()
    second = capsys.readouterr().out
    if json_format:
        first_line, second_line = json.loads(first), json.loads(second)
        assert first_line.keys() == second_line.keys()
        for key in ("level", "logger", "method", "path", "status", "bytes"):
            assert first_line[key] == second_line[key], key
    else:
        pattern = r"\S+ - GET /files/a\.txt 200 12 \d+\.\dms\n"
        assert re.fullmatch(pattern, first) and re.fullmatch(pattern, second), (first, second)
    assert capsys.readouterr().err == ""  # not on stderr as well


def test_configure_again_replaces_the_access_log(root, capsys):
    configure("warning", access_log=True)
    configure("warning", json_format=True, access_log=True)
    (handler,) = log.access_logger.handlers
    assert isinstance(handler, log.AccessLog) and handler.json_format
    configure("warning")
    assert log.access_logger.handlers == [] and not log.access_logger.isEnabledFor(logging.INFO)
    app = App(root)
    assert not app.records.observed()
    app.handle(Request("GET", "/api/health")).close()
    assert capsys.readouterr().out == ""


def test_a_handler_of_your_own_added_after_the_app_and_beside_the_metrics(root):
    """The axon.access logger is asked per response: a handler added after the App was built
    gets its records, whoever else reads the App's records."""
    from axon.metrics import instrument

    app = App(root)
    instrument(app)
    collect = _Collect()
    log.access_logger.addHandler(collect)
    log.access_logger.setLevel(logging.INFO)
    assert app.records.observed()
    app.handle(Request("GET", "/files/a.txt")).close()
    (record,) = collect.records
    assert (record.method, record.path, record.status, record.bytes) == ("GET", "/files/a.txt", 200, 12)


def _serve(app: App, n: int, path: str = "/files/a.txt") -> None:
    for _ in range(n):
        app.handle(Request("GET", path)).close()


def test_access_log_lines_arrive_without_a_drain(root, tmp_path):
    """A thread hands waiting records over every INTERVAL seconds: a quiet server's lines are late
    by that much, never lost."""
    out = tmp_path / "out.log"
    with open(out, "w") as stream:
        app = App(root)
        app.records.attach(log.AccessLog(stream, json_format=True))
        _serve(app, 3)
        deadline = time.monotonic() + 5
        while out.read_text().count("\n") < 3 and time.monotonic() < deadline:
            time.sleep(0.02)
    lines = out.read_text().splitlines()
    assert len(lines) == 3 and all(json.loads(line)["status"] == 200 for line in lines)


def test_access_log_writes_a_batch_at_once(root, tmp_path):
    out = tmp_path / "out.log"
    with open(out, "w") as stream:
        app = App(root)
        app.records.attach(log.AccessLog(stream))
        _serve(app, BATCH - 1)
        assert out.read_text() == ""  # waiting for the batch, or the thread
        _serve(app, 1)
        assert out.read_text().count("\n") == BATCH


def _logged_through_a_pipe(app: App, paths: list[str], monkeypatch) -> tuple[list[dict], list[bytes]]:
    """The JSON lines the access log writes to a pipe (as stdout is under journald or docker)
    for a GET of each path, and each ``write`` it made to the pipe."""
    read_end, write_end = os.pipe()
    chunks: list[bytes] = []
    writes: list[bytes] = []
    real_write = os.write

    def recording_write(fd: int, data) -> int:
        if fd == write_end:
            writes.append(bytes(data))
        return real_write(fd, data)

    monkeypatch.setattr(os, "write", recording_write)

    def read_all() -> None:  # as journald does: a full pipe (64 KiB) would block the writes
        while data := os.read(read_end, 65536):
            chunks.append(data)

    reader = threading.Thread(target=read_all)
    reader.start()
    try:
        with os.fdopen(write_end, "w", closefd=False) as stream:
            access = log.AccessLog(stream, json_format=True)
            app.records.attach(access)
            for path in paths:
                _serve(app, 1, path)
            app.records.drain()
    finally:
        os.close(write_end)
        reader.join()
        os.close(read_end)
        monkeypatch.undo()
    return [json.loads(line) for line in b"".join(chunks).decode().splitlines()], writes


def test_access_log_cuts_pipe_writes_at_whole_lines(root, monkeypatch):
    """Workers share stdout: a write to a pipe over PIPE_BUF bytes may interleave with another
    worker's, so each write is whole lines and at most 4096 bytes."""
    long_path = "/files/" + "x" * 200  # a 404, with a long path: long lines
    lines, writes = _logged_through_a_pipe(App(root), [long_path] * (BATCH + 8), monkeypatch)
    assert len(lines) == BATCH + 8 and all(line["path"].endswith("x" * 200) for line in lines)
    assert len(writes) > 1 and all(len(w) <= 4096 and w.endswith(b"\n") for w in writes)


def test_access_log_via_caplog(root, caplog):
    caplog.set_level(logging.INFO, logger="axon.access")
    App(root).handle(Request("GET", "/api/health")).close()
    (record,) = [r for r in caplog.records if r.name == "axon.access"]
    assert (record.method, record.path, record.status, record.bytes) == ("GET", "/api/health", 200, 22)


def test_configure_errors_to_stderr_as_json(capsys):
    configure("error", json_format=True)
    assert log.logger.propagate is False
    log.logger.warning("quiet")
    log.logger.error("loud", extra={"code": "x"})
    captured = capsys.readouterr()
    (line,) = captured.err.splitlines()
    assert json.loads(line)["message"] == "loud" and json.loads(line)["code"] == "x"
    assert captured.out == ""
    assert not log.access_logger.isEnabledFor(logging.INFO)  # access log stays off


def test_configure_text_format(capsys):
    configure("info")
    log.logger.info("plain %d", 5)
    err = capsys.readouterr().err
    assert re.fullmatch(r"\S+ \S+ INFO axon: plain 5\n", err), err


def test_access_log_ms_to_the_microsecond():
    stream = io.StringIO()
    access = log.AccessLog(stream, json_format=True)
    seconds = (0.0, 0.0000005, 0.000999, 0.0009999, 0.001, 0.0123456, 2.5)
    ended = time.perf_counter()
    access.read([(ended, "GET", "/p", "", 200, 1, 1, s, None, None) for s in seconds])
    lines = [json.loads(line) for line in stream.getvalue().splitlines()]
    assert [line["ms"] for line in lines] == [0.0, 0.0, 0.999, 0.999, 1.0, 12.345, 2500.0]
    assert '"ms":12.345,' in stream.getvalue()


def test_access_log_time_is_the_wall_clock_of_the_response():
    """Records carry perf_counter() times (cheaper per response); lines carry UTC wall time."""
    stream = io.StringIO()
    access = log.AccessLog(stream, json_format=True)
    wall, now = time.time(), time.perf_counter()
    access.read([(now - 1.5, "GET", "/p", "", 200, 1, 1, 0.0, None, None),
                 (now, "GET", "/p", "", 200, 1, 1, 0.0, None, None)])
    first, second = (json.loads(line)["time"] for line in stream.getvalue().splitlines())
    for stamp, expected in ((first, wall - 1.5), (second, wall)):
        assert re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z", stamp), stamp
        parsed = calendar.timegm(time.strptime(stamp[:19], "%Y-%m-%dT%H:%M:%S")) + int(stamp[20:23]) / 1000
        assert abs(parsed - expected) < 0.05


def test_a_line_longer_than_a_pipe_write_loses_nothing(root, monkeypatch):
    """A line over PIPE_BUF bytes (a long path) goes alone; the lines around it are kept."""
    paths = ["/files/a.txt", "/files/" + "y" * 5000, "/files/a.txt"]
    lines, writes = _logged_through_a_pipe(App(root), paths, monkeypatch)
    assert [len(line["path"]) for line in lines] == [12, 5007, 12]
    assert [w.count(b"\n") for w in writes] == [1, 1, 1]  # whole lines, the long one in a write of its own


def test_a_negative_duration_is_logged_as_zero():
    stream = io.StringIO()
    log.AccessLog(stream, json_format=True).read([(time.perf_counter(), "GET", "/p", "", 200, 1, 1, -0.002, None, None)])
    assert json.loads(stream.getvalue())["ms"] == 0  # never a table lookup from the end


@pytest.mark.slow  # a server process
@pytest.mark.parametrize("runtime", ["gunicorn", "uvicorn"])
def test_the_json_access_log_names_the_client_under_wsgi_and_asgi(root, tmp_path, runtime):
    """The peer's address as the runtime gives it (REMOTE_ADDR, the scope's client)."""
    import http.client
    import signal
    import socket
    import subprocess

    (tmp_path / "logged_site.py").write_text(
        "from axon import log\nfrom axon.asgi import create_app as asgi_app\nfrom axon.wsgi import create_app as wsgi_app\n"
        f"log.configure('warning', json_format=True, access_log=True)\nROOT = {str(root)!r}\n"
        "wsgi, asgi = wsgi_app(ROOT), asgi_app(ROOT)\n")
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    argv = (["gunicorn", "--workers", "1", "--bind", f"127.0.0.1:{port}", "logged_site:wsgi"] if runtime == "gunicorn"
            else ["uvicorn", "logged_site:asgi", "--port", str(port), "--no-access-log"])
    proc = subprocess.Popen([sys.executable, "-m", *argv], cwd=tmp_path, stdout=subprocess.PIPE,
                            stderr=subprocess.DEVNULL, stdin=subprocess.DEVNULL, text=True, start_new_session=True,
                            env={**os.environ, "PYTHONPATH": os.pathsep.join([str(tmp_path), *sys.path])})
    try:
        deadline = time.monotonic() + 20
        while True:
            try:
                connection = http.client.HTTPConnection("127.0.0.1", port, timeout=5)
                connection.request("GET", "/files/a.txt?v=1")
                assert connection.getresponse().status == 200
                break
            except ConnectionRefusedError:
                assert time.monotonic() < deadline and proc.poll() is None, "the server did not start"
                time.sleep(0.1)
        time.sleep(0.6)  # the records are read every 0.25 s
    finally:
        os.killpg(proc.pid, signal.SIGTERM)
        out, _ = proc.communicate(timeout=20)
    (line,) = [json.loads(line) for line in out.splitlines() if '"v=1"' in line]
    assert (line["client"], line["query"], line["path"]) == ("127.0.0.1", "v=1", "/files/a.txt")
