"""``axon serve``'s command line: flags, their AXON_* variables, and --app."""

from __future__ import annotations

import json
import os
import re
import socket
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest
from conftest import FILES, Client, get

from axon.app import App
from axon.cli import build_parser
from axon.errors import HTTPError
from axon.server.cli import load_app

ENV = ["AXON_HOST", "AXON_PORT", "AXON_WORKERS", "AXON_ROOT", "AXON_APP", "AXON_ACCESS_LOG", "AXON_LOG_LEVEL",
       "AXON_GRACEFUL_TIMEOUT", "AXON_CERTFILE", "AXON_KEYFILE", "AXON_MAX_CONNECTIONS", "AXON_JSON_LOGS",
       "AXON_METRICS", "AXON_FILE_CACHE", "AXON_CACHE_CONTROL", "AXON_BROWSE",
       "AXON_PORTABLE_IDENTITY", "AXON_REUSE_PORT", "AXON_NO_REPLAY", "AXON_FILE_CACHE_VALID",
       "AXON_FILE_CACHE_INACTIVE"]


@pytest.fixture
def clean_env(monkeypatch):
    for name in ENV:
        monkeypatch.delenv(name, raising=False)
    return monkeypatch


def test_defaults(clean_env) -> None:
    args = build_parser().parse_args(["serve"])
    assert (args.host, args.port, args.workers) == ("127.0.0.1", 8000, len(os.sched_getaffinity(0)))
    assert (args.root, args.app, args.access_log, args.log_level) == (None, None, False, "info")
    assert (args.graceful_timeout, args.certfile, args.keyfile) == (30.0, None, None)
    assert args.file_cache == 10000 and args.cache_control is None and args.browse is False
    assert args.file_cache_valid == 5.0 and args.file_cache_inactive == 60.0
    assert args.replay is None  # parsed only to be refused (test_server_cli_input)


def test_every_flag_has_an_environment_variable(clean_env, tmp_path) -> None:
    clean_env.chdir(tmp_path)
    (tmp_path / "c.pem").write_text("-")  # --certfile and --keyfile must name files it can read
    (tmp_path / "k.pem").write_text("-")
    values = {
        "AXON_HOST": "0.0.0.0", "AXON_PORT": "9001", "AXON_WORKERS": "3", "AXON_ROOT": "/srv",
        "AXON_APP": "site:app", "AXON_ACCESS_LOG": "true", "AXON_LOG_LEVEL": "DEBUG",
        "AXON_GRACEFUL_TIMEOUT": "2.5", "AXON_CERTFILE": "c.pem", "AXON_KEYFILE": "k.pem",
        "AXON_MAX_CONNECTIONS": "77", "AXON_JSON_LOGS": "1", "AXON_METRICS": "yes", "AXON_FILE_CACHE": "0",
        "AXON_CACHE_CONTROL": "max-age=60", "AXON_BROWSE": "1", "AXON_PORTABLE_IDENTITY": "1",
        "AXON_REUSE_PORT": "1", "AXON_FILE_CACHE_VALID": "30", "AXON_FILE_CACHE_INACTIVE": "120",
    }
    for name, value in values.items():
        clean_env.setenv(name, value)
    args = build_parser().parse_args(["serve"])
    assert (args.host, args.port, args.workers, args.root, args.app) == ("0.0.0.0", 9001, 3, "/srv", "site:app")
    assert (args.access_log, args.log_level, args.graceful_timeout) == (True, "debug", 2.5)
    assert (args.certfile, args.keyfile, args.max_connections, args.json_logs) == ("c.pem", "k.pem", 77, True)
    assert args.metrics is True and args.file_cache == 0 and args.cache_control == "max-age=60"
    assert args.browse is True and args.portable_identity is True and args.reuse_port is True
    assert args.file_cache_valid == 30.0 and args.file_cache_inactive == 120.0


def test_cache_control_reaches_the_built_in_app(clean_env, tmp_path) -> None:
    assert load_app(None, str(tmp_path), "public, max-age=600").cache_control == "public, max-age=600"
    assert load_app(None, str(tmp_path)).cache_control == "no-cache"
    assert load_app(None, str(tmp_path), "").cache_control == ""


def test_browse_reaches_the_app(clean_env, tmp_path, root) -> None:
    """--browse turns the listing on in the built-in app, and (as AXON_BROWSE) in a user's
    App() that does not say; without it /browse/ is no route at all."""
    assert load_app(None, str(tmp_path), browse=True).match("GET", "/browse/")
    with pytest.raises(HTTPError) as caught:
        load_app(None, str(tmp_path)).match("GET", "/browse/")
    assert caught.value.status == 404
    clean_env.setenv("AXON_BROWSE", "")  # so that what load_app exports is undone after the test
    (tmp_path / "browsing.py").write_text("from axon import App\napp = App()\n")
    clean_env.syspath_prepend(str(tmp_path))
    assert load_app("browsing:app", str(root), browse=True).match("GET", "/browse/")


def test_a_flag_wins_over_its_variable(clean_env) -> None:
    clean_env.setenv("AXON_PORT", "9001")
    clean_env.setenv("AXON_ACCESS_LOG", "1")
    args = build_parser().parse_args(["serve", "/data", "--port", "9002", "--no-access-log"])
    assert (args.port, args.access_log, args.root) == (9002, False, "/data")


def test_a_bad_variable_is_a_usage_error(clean_env, capsys) -> None:
    clean_env.setenv("AXON_PORT", "eighty")
    with pytest.raises(SystemExit):
        build_parser().parse_args(["serve"])
    assert "expected a whole number, not 'eighty'" in capsys.readouterr().err


@pytest.fixture
def user_module(tmp_path: Path, root: Path, monkeypatch) -> str:
    (tmp_path / "usersite.py").write_text(textwrap.dedent(f"""
        from axon import App

        app = App({str(root)!r})

        @app.route("/api/echo", methods=["POST"])
        async def echo(request):
            return request.json()

        @app.route("/api/gc")
        async def collector(request):
            import gc
            return {{"thresholds": gc.get_threshold(), "frozen": gc.get_freeze_count()}}

        def make():
            return app

        not_an_app = 42
    """))
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.chdir(tmp_path)
    return "usersite"


def test_load_app(user_module, root, clean_env) -> None:
    builtin = load_app(None, str(root))
    assert isinstance(builtin, App) and builtin.store.root == str(root.resolve())
    user = load_app(f"{user_module}:app", None)
    assert load_app(f"{user_module}:make", None) is user  # a factory is called
    for bad in (f"{user_module}:not_an_app", f"{user_module}:missing", "no_such_module_xyz:app", "noattr"):
        with pytest.raises(SystemExit):
            load_app(bad, None)


def test_root_is_exported_for_a_user_app(tmp_path, root, clean_env, monkeypatch) -> None:
    (tmp_path / "rootless.py").write_text("from axon import App\napp = App()\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    app = load_app("rootless:app", str(root))
    assert app.store.root == str(root.resolve())


def test_serve_a_user_app_with_an_access_log(spawn, user_module) -> None:
    server = spawn("--workers", "1", "--app", f"{user_module}:app", "--access-log")
    with Client(server.port) as c:
        resp = c.request("POST", "/api/echo", {"Content-Type": "application/json"}, b'{"x": [1, 2]}')
        assert resp.status == 200 and json.loads(resp.body) == {"x": [1, 2]}
        assert c.get("/files/a.txt").status == 200
    deadline = time.monotonic() + 5
    while "POST /api/echo 200" not in server.log() and time.monotonic() < deadline:
        time.sleep(0.05)
    assert "POST /api/echo 200" in server.log()


def test_a_worker_collects_cycles_by_its_own_thresholds(spawn, user_module) -> None:
    from axon.server.worker import GC_THRESHOLDS

    server = spawn("--workers", "1", "--app", f"{user_module}:app")
    with Client(server.port) as c:
        resp = c.get("/api/gc")
    said = json.loads(resp.body)
    # What start-up made is frozen (never walked again), and young objects wait for more company.
    assert tuple(said["thresholds"]) == GC_THRESHOLDS != (700, 10, 10) and said["frozen"] > 1000


def _serve_fails(*args: str, env: dict | None = None) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "axon.cli", "serve", *args], check=False, capture_output=True, text=True,
                          timeout=20, env={**os.environ, **(env or {})})


@pytest.mark.slow  # a process per failure
def test_startup_errors_are_one_line_and_nonzero(root, tmp_path) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        done = _serve_fails(str(root), "--port", str(port))
        assert done.returncode != 0 and "cannot listen" in done.stderr
    done = _serve_fails(str(tmp_path / "nowhere"), "--port", "0")
    assert done.returncode != 0 and "not a directory" in done.stderr
    done = _serve_fails(str(root), "--port", "0", "--certfile", str(tmp_path / "none.pem"), "--keyfile", str(tmp_path / "k"))
    assert done.returncode != 0 and "axon serve:" in done.stderr
    (tmp_path / "only-one.pem").write_text("-")
    done = _serve_fails(str(root), "--port", "0", "--certfile", str(tmp_path / "only-one.pem"))
    assert done.returncode != 0 and "both" in done.stderr


@pytest.mark.slow  # worker processes
def test_metrics_are_summed_over_the_workers(spawn, monkeypatch) -> None:
    monkeypatch.delenv("AXON_METRICS_DIR", raising=False)
    server = spawn("--workers", "2", "--metrics")
    for _ in range(20):
        assert get(server.port, "/files/a.txt").status == 200
    time.sleep(0.6)  # each worker publishes its counts four times a second
    text = get(server.port, "/metrics").body.decode()
    total = sum(float(line.rsplit(" ", 1)[1]) for line in text.splitlines()
                if line.startswith("axon_requests_total{") and 'status="200"' in line)
    assert total >= 20, text


def test_workers_0_serves_in_process(spawn) -> None:
    server = spawn("--workers", "0")
    assert server.workers() == []
    assert get(server.port, "/api/health").status == 200


@pytest.mark.slow  # a process
def test_a_root_the_user_app_does_not_serve_is_a_usage_error(user_module, root, tmp_path) -> None:
    other = tmp_path / "other-root"
    other.mkdir()
    done = _serve_fails(str(other), "--app", f"{user_module}:app", "--port", "0")
    assert done.returncode == 2, done.stderr
    assert f"ROOT {other} is not what --app {user_module}:app serves ({root})" in done.stderr


@pytest.mark.slow  # a process
def test_a_store_url_without_its_extra_names_the_pip_install(tmp_path) -> None:
    # The s3 extra missing, as in an install without it: its module cannot be imported.
    blocker = tmp_path / "without-obstore"
    blocker.mkdir()
    (blocker / "sitecustomize.py").write_text("import sys\nsys.modules['obstore'] = None\n")
    path = os.pathsep.join(p for p in (str(blocker), os.environ.get("PYTHONPATH")) if p)
    done = _serve_fails("s3://bucket/prefix", "--port", "0", env={"PYTHONPATH": path})
    assert done.returncode == 1, done.stderr
    assert "serving s3://bucket/prefix needs obstore, which is not installed: pip install 'axon-stream[s3]'" in done.stderr
    assert "Traceback" not in done.stderr


def _logged_line(server, needle: str) -> str:
    deadline = time.monotonic() + 5  # the access log writes its lines at most 0.25 s late
    while time.monotonic() < deadline:
        found = [line for line in server.log().splitlines() if needle in line]
        if found:
            return found[0]
        time.sleep(0.05)
    raise AssertionError(f"no access-log line with {needle!r}:\n{server.log()}")


@pytest.mark.slow  # a server process
def test_the_access_log_line_says_when_who_and_the_query(spawn) -> None:
    server = spawn("--workers", "1", "--access-log")
    with Client(server.port) as c:
        assert c.get("/files/a.txt?v=1").status == 200
    line = _logged_line(server, "/files/a.txt")
    stamp = r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z"
    assert re.fullmatch(stamp + r" 127\.0\.0\.1 GET /files/a\.txt\?v=1 200 12 \d+\.\dms", line), line


@pytest.mark.slow  # a server process
def test_the_json_access_log_names_the_client(spawn) -> None:
    server = spawn("--workers", "1", "--access-log", "--json-logs")
    with Client(server.port) as c:
        for _ in range(3):  # again: a repeated answer may be sent past the App (server/shortcuts.py)
            assert c.get("/files/a.txt?v=1").status == 200
        assert c.get("/files/a.txt", {"X-Forwarded-For": "203.0.113.9"}).status == 200
    forwarded = json.loads(_logged_line(server, "203.0.113.9"))
    direct = [json.loads(line) for line in server.log().splitlines() if '"v=1"' in line]
    assert [(line["client"], line["query"]) for line in direct] == [("127.0.0.1", "v=1")] * 3
    assert forwarded["client"] == "203.0.113.9"  # a proxy in front says who its client was


def test_axon_serve_builds_its_app_with_shared_open_files(clean_env, tmp_path, monkeypatch) -> None:
    """The App axon serve loads, built-in or a module's App(), is built with its open files
    shared (the open-file cache); without a server's config, and with --file-cache 0, it is not."""
    from axon.server.config import ServerConfig
    from axon.storage.shared_files import SharedFiles

    built_in = load_app(None, str(tmp_path), config=ServerConfig())
    assert isinstance(built_in.store, SharedFiles) and built_in.shared_files is built_in.store
    assert load_app(None, str(tmp_path)).shared_files is None
    assert load_app(None, str(tmp_path), config=ServerConfig(file_cache=0)).shared_files is None
    (tmp_path / "shared_site.py").write_text("from axon import App\napp = App()\n")
    monkeypatch.chdir(tmp_path)
    mine = load_app("shared_site:app", str(tmp_path), config=ServerConfig())
    assert isinstance(mine.store, SharedFiles) and mine.store.root == str(tmp_path.resolve())
    from axon import App

    assert App(tmp_path).shared_files is None  # built outside axon serve: WSGI, ASGI


@pytest.mark.slow
def test_a_file_unused_for_file_cache_inactive_is_closed(spawn, root) -> None:
    """``--file-cache-inactive`` reaches the worker's open-file cache: a file kept open after its
    request is closed once unused that long (the sweep runs once a second), and kept before."""
    server = spawn("--workers", "0", "--file-cache-inactive", "1")
    wanted = os.path.realpath(root / "a.txt")

    def holds() -> bool:
        fds = f"/proc/{server.proc.pid}/fd"
        return any(os.path.realpath(os.path.join(fds, n)) == wanted for n in os.listdir(fds))

    with Client(server.port) as c:
        assert c.get("/files/a.txt").status == 200
        assert holds()  # kept for the next request
        deadline = time.monotonic() + 5
        while holds() and time.monotonic() < deadline:
            time.sleep(0.1)
        assert not holds() and time.monotonic() < deadline
        assert c.get("/files/a.txt").body == FILES["a.txt"]  # opened anew
