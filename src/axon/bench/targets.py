"""The servers ``axon bench --compare`` starts, each as it would be deployed for speed on one core.

Choices that hold for every target, so that the comparison is of the servers and not of their
settings: no per-request server log (seed 001), keep-alive on, a listen backlog of 2048, the
whole target pinned to the server CPUs. Threaded WSGI servers run the original's tuned
2 processes x 16 threads; event-loop servers run one worker per server CPU, since more processes
than cores only adds switching. Every Axon target serves :mod:`axon.bench.echo_app`: Axon's
built-in endpoints plus the echo route; for a scenario that measures zip CRCs cold, its
``cold_`` twin, which keeps no CRC-32 (:mod:`axon.bench.echo_app`).
"""

from __future__ import annotations

import importlib.util
import shutil
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from . import nginx, original
from .procs import Command
from .scenarios import AXON, ORIGINAL, STATIC, Dialect

WSGI_APP = "axon.bench.echo_app:wsgi"
ASGI_APP = "axon.bench.echo_app:asgi"
STATIC_APP = "axon.bench.static_app:app"
BACKLOG = "2048"


@dataclass(frozen=True)
class Context:
    """Where a target runs: the files it serves, a scratch directory of its own, its port."""

    root: Path
    workdir: Path
    port: int
    cache_dir: Path
    workers: int = 1  # event-loop servers: one per server CPU
    cold_crc: bool = False  # serve the app that keeps no CRC-32 (every zip reads its files)
    #: Count each worker's requests (per_worker): Axon with --metrics, nginx with a log line each.
    count_workers: bool = False

    @property
    def host(self) -> str:
        return "127.0.0.1"

    @property
    def env(self) -> dict[str, str]:
        env = {"AXON_ROOT": str(self.root)}
        if self.count_workers:
            env["AXON_METRICS_DIR"] = str(self.metrics_dir)
        return env

    @property
    def metrics_dir(self) -> Path:
        """Where Axon's workers keep their counts, one file each (when counted)."""
        return self.workdir / "metrics"

    @property
    def worker_log(self) -> Path:
        """nginx's line per request naming its worker (when counted)."""
        return self.workdir / "nginx" / "workers.log"

    def app(self, spec: str) -> str:
        """``module:name`` of the bench app to serve: ``spec``, or its ``cold_`` twin."""
        module, _, name = spec.partition(":")
        return f"{module}:cold_{name}" if self.cold_crc else spec


@dataclass(frozen=True)
class Target:
    name: str
    description: str
    dialect: Dialect
    commands: Callable[[Context], list[Command]]  # started in order; the last one takes the port
    requires: tuple[str, ...] = ()  # executables ("nginx") or modules ("py:gunicorn") it needs

    def describe(self, workers: int = 1) -> str:
        """The description, with the number of worker processes ``--workers`` gives it."""
        if workers == 1:
            return self.description
        if ", 1 worker" in self.description:  # the event-loop servers
            return self.description.replace(", 1 worker", f", {workers} workers (SO_REUSEPORT)")
        if self.name == "nginx":
            return f"{self.description}, {workers} workers (reuseport)"
        return self.description  # the threaded servers keep their own 2x16

    def missing(self) -> list[str]:
        """What this machine lacks to run the target (empty when it can)."""
        out = []
        for need in self.requires:
            if need.startswith("py:"):
                if importlib.util.find_spec(need[3:]) is None:
                    out.append(f"Python module {need[3:]}")
            elif shutil.which(need) is None and shutil.which(need, path="/usr/sbin:/sbin") is None:
                out.append(need)  # (sbin: nginx is there, and not on a non-root user's PATH)
        return out


def _nginx(ctx: Context) -> list[Command]:
    return [nginx.static_command(ctx.workdir / "nginx", ctx.port, ctx.root, workers=ctx.workers,
                                 worker_log=ctx.worker_log if ctx.count_workers else None)]


def _original(ctx: Context) -> list[Command]:
    site = original.install(ctx.cache_dir)
    workdir = original.prepare_workdir(ctx.workdir / "original", ctx.root)
    sock = ctx.workdir / "uwsgi.sock"
    return [
        original.uwsgi_command(site, workdir, sock),
        nginx.uwsgi_front_command(ctx.workdir / "nginx", ctx.port, sock),
    ]


def _gunicorn(ctx: Context) -> list[Command]:
    # gthread: the threaded worker, the only sync-style one that keeps connections alive.
    # No cap on the request line but Axon's own (as the README deploys it): gunicorn's default,
    # 4,094 bytes, refuses R256's URL, which Axon's client sends as a GET.
    argv = [sys.executable, "-m", "gunicorn", "-k", "gthread", "-w", "2", "--threads", "16",
            "--keep-alive", "75", "--backlog", BACKLOG, "--log-level", "warning", "--limit-request-line", "0",
            "-b", f"{ctx.host}:{ctx.port}", ctx.app(WSGI_APP)]
    return [Command(argv, "gunicorn", ctx.env)]


def _uwsgi(ctx: Context) -> list[Command]:
    # http11-socket: uWSGI parses HTTP in its workers (no router process) and keeps alive.
    # buffer-size: the request head's bytes, its largest (the default 4 KB refuses R256's URL).
    argv = [shutil.which("uwsgi") or "uwsgi", "--http11-socket", f"{ctx.host}:{ctx.port}",
            "--master", "--processes", "2", "--threads", "16", "--buffer-size", "65535", "--module", ctx.app(WSGI_APP),
            "--listen", BACKLOG, "--disable-logging", "--die-on-term", "--need-app"]
    return [Command(argv, "uwsgi", ctx.env)]


def _uvicorn(ctx: Context) -> list[Command]:
    argv = [sys.executable, "-m", "uvicorn", ctx.app(ASGI_APP), "--host", ctx.host, "--port", str(ctx.port),
            "--workers", str(ctx.workers), "--no-access-log", "--log-level", "warning",
            "--backlog", BACKLOG, "--loop", "auto", "--http", "auto"]
    return [Command(argv, "uvicorn", ctx.env)]


def _granian(ctx: Context) -> list[Command]:
    argv = [sys.executable, "-m", "granian", "--interface", "asgi", "--host", ctx.host,
            "--port", str(ctx.port), "--workers", str(ctx.workers), "--no-access-log",
            "--log-level", "warning", "--backlog", BACKLOG, ctx.app(ASGI_APP)]
    return [Command(argv, "granian", ctx.env)]


def _granian_static(ctx: Context) -> list[Command]:
    # granian's own static files (Rust) under /files/, a peer of nginx; a minimal ASGI app for
    # the rest (the health answer). No Expires/Cache-Control: the others send none that long.
    argv = [sys.executable, "-m", "granian", "--interface", "asgi", "--host", ctx.host,
            "--port", str(ctx.port), "--workers", str(ctx.workers), "--no-access-log",
            "--log-level", "warning", "--backlog", BACKLOG, "--static-path-mount", str(ctx.root),
            "--static-path-route", "/files", "--static-path-expires", "0", STATIC_APP]
    return [Command(argv, "granian-static")]


def _axon_serve(ctx: Context) -> list[Command]:
    argv = [sys.executable, "-m", "axon.cli", "serve", str(ctx.root), "--host", ctx.host,
            "--port", str(ctx.port), "--workers", str(ctx.workers), "--app", ctx.app("axon.bench.echo_app:app"),
            "--log-level", "warning"]
    if ctx.workers > 1:
        argv.append("--reuse-port")  # a listening socket per worker, as nginx's reuseport
    if ctx.count_workers:
        # Each worker's requests, in its file under ctx.metrics_dir (per_worker). Observing
        # requests has a cost, and turns the fixed answers (health) off.
        argv.append("--metrics")
    return [Command(argv, "axon-serve", ctx.env)]


def _axon_observed(ctx: Context) -> list[Command]:
    # As deployed with deploy/: Prometheus metrics and a JSON access log (to the target's log file).
    (command,) = _axon_serve(ctx)
    argv = [*(a for a in command.argv if a != "--metrics"), "--metrics", "--access-log", "--json-logs"]
    return [Command(argv, "axon-observed", ctx.env)]


TARGETS = {
    t.name: t
    for t in [
        Target("nginx", "nginx, static files one per request (the yardstick)", STATIC, _nginx, ("nginx",)),
        Target("original", f"axon-api {original.VERSION} on uWSGI 2x16 behind nginx (its own deployment)",
               ORIGINAL, _original, ("nginx", "uwsgi")),
        Target("gunicorn", "Axon WSGI on gunicorn, gthread 2x16", AXON, _gunicorn, ("py:gunicorn",)),
        Target("uwsgi", "Axon WSGI on uWSGI, http11-socket 2x16", AXON, _uwsgi, ("uwsgi",)),
        Target("uvicorn", "Axon ASGI on uvicorn (httptools, uvloop), 1 worker", AXON, _uvicorn, ("py:uvicorn",)),
        Target("granian", "Axon ASGI on granian, 1 worker", AXON, _granian, ("py:granian",)),
        Target("granian-static", "granian's static-file mount (Rust), one file per request, 1 worker", STATIC,
               _granian_static, ("py:granian",)),
        Target("axon", "axon serve (native server), 1 worker", AXON, _axon_serve, ("py:axon.server.cli",)),
        Target("axon-observed", "axon serve with --metrics and a JSON access log, 1 worker", AXON, _axon_observed,
               ("py:axon.server.cli",)),
    ]
}
REFERENCES = ("nginx", "original")  # every figure is also given as a ratio to these


def select(spec: str) -> list[Target]:
    names = [n.strip() for n in spec.split(",") if n.strip()]
    if names == ["all"]:
        return list(TARGETS.values())
    unknown = [n for n in names if n not in TARGETS]
    if unknown:
        raise ValueError(f"unknown target(s) {', '.join(unknown)}; choose from {', '.join(TARGETS)}")
    return [TARGETS[n] for n in names]
