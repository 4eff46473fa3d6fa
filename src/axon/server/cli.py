"""``axon serve``: the command line of Axon's own server.

Every flag can also be set in the environment (``AXON_PORT=9000``), as uvicorn and granian allow;
a flag given on the command line wins over the environment.

    axon serve /srv/files --port 8000 --workers 4
    axon serve --app mysite:app --access-log
    AXON_WORKERS=1 AXON_ACCESS_LOG=1 axon serve /srv/files
"""

from __future__ import annotations

import argparse
import importlib
import os
import shutil
import sys
import tempfile
from typing import Any

from ..config import environment, flag, variable


def _env(name: str, default: Any = None) -> Any:
    return variable(name, default)


def _env_bool(name: str) -> bool:
    return flag(name)


def cpu_count() -> int:
    """The CPUs this process may run on (taskset, cgroup cpusets), else all of them."""
    try:
        return len(os.sched_getaffinity(0)) or 1
    except (AttributeError, OSError):
        return os.cpu_count() or 1


def add_parser(subparsers: argparse._SubParsersAction) -> argparse.ArgumentParser:
    p = subparsers.add_parser(
        "serve",
        help="serve files with Axon's own HTTP/1.1 server (the fast way to run Axon)",
        description=(
            "Serve ROOT over HTTP/1.1 with Axon's own server: pre-forked workers, keep-alive, "
            "sendfile. Each option can also be set as the AXON_* variable named in its help. "
            "HTTP/2 is not spoken here: put nginx (or an ASGI server that speaks it) in front."
        ),
    )
    p.add_argument("root", nargs="?", default=_env("AXON_ROOT"),
                   help="the directory served, or s3://bucket/prefix for the objects of a store "
                        "(the axon-stream[s3] extra) (AXON_ROOT; default: the current directory)")
    p.add_argument("--endpoint-url", default=None, metavar="URL",
                   help="for ROOT s3://bucket/prefix: the S3 endpoint of a self-hosted store (AWS_ENDPOINT_URL; "
                        "credentials from AWS_ACCESS_KEY_ID / AWS_SECRET_ACCESS_KEY, never a flag)")
    p.add_argument("--region", default=None, help="for ROOT s3://...: the bucket's region (AWS_REGION)")
    p.add_argument("--allow-http", action="store_true", default=None,
                   help="for ROOT s3://...: allow a plain http:// endpoint (AWS_ALLOW_HTTP)")
    p.add_argument("--store-timeout", type=float, default=None, metavar="SECONDS",
                   help="for ROOT s3://...: seconds one request to the store may take (AXON_STORE_TIMEOUT; default 30)")
    p.add_argument("--object-cache", type=int, default=None, metavar="MIB",
                   help="for ROOT s3://...: MiB of small objects' bytes (64 KiB or less) each worker keeps by key and "
                        "ETag; a batch's listing tells whether they are current, so a repeated batch costs no GET "
                        "(AXON_OBJECT_CACHE; default 64; 0: none)")
    p.add_argument("--object-listing", action=argparse.BooleanOptionalAction, default=None,
                   help="for ROOT s3://...: name a batch of 16 keys or more by listing them (ListObjectsV2) rather "
                        "than by a request each; --no-object-listing for a store whose listings lag its writes "
                        "(AXON_NO_OBJECT_LISTING=1; default on)")
    p.add_argument("--host", default=_env("AXON_HOST", "127.0.0.1"),
                   help="address to listen on (AXON_HOST; default 127.0.0.1; 0.0.0.0 for every interface)")
    p.add_argument("--port", type=int, default=_env("AXON_PORT", 8000), help="port (AXON_PORT; default 8000; 0: any free port)")
    p.add_argument("--workers", type=int, default=_env("AXON_WORKERS", cpu_count()),
                   help="worker processes (AXON_WORKERS; default: the number of CPUs this process may run on; "
                        "0: serve in this process, without a supervisor)")
    p.add_argument("--app", default=_env("AXON_APP"), metavar="MODULE:ATTR",
                   help="serve your own axon.App (or a function returning one) instead of the built-in one (AXON_APP)")
    p.add_argument("--access-log", action=argparse.BooleanOptionalAction, default=_env_bool("AXON_ACCESS_LOG"),
                   help="one line per request on stdout (AXON_ACCESS_LOG; default off: it costs throughput)")
    p.add_argument("--log-level", default=_env("AXON_LOG_LEVEL", "info"),
                   choices=["debug", "info", "warning", "error", "critical"], type=str.lower,
                   help="AXON_LOG_LEVEL; default info")
    p.add_argument("--json-logs", action=argparse.BooleanOptionalAction, default=_env_bool("AXON_JSON_LOGS"),
                   help="log as JSON objects, one a line (AXON_JSON_LOGS)")
    p.add_argument("--reuse-port", action=argparse.BooleanOptionalAction, default=_env_bool("AXON_REUSE_PORT"),
                   help="one listening socket per worker (SO_REUSEPORT): the kernel spreads new connections "
                        "evenly over the workers (AXON_REUSE_PORT; default off: one shared accept queue)")
    p.add_argument("--graceful-timeout", type=float, default=_env("AXON_GRACEFUL_TIMEOUT", 30.0),
                   help="seconds in-flight responses get to finish on SIGTERM/SIGINT (AXON_GRACEFUL_TIMEOUT; default 30)")
    p.add_argument("--max-connections", type=int, default=_env("AXON_MAX_CONNECTIONS", 10000),
                   help="open connections per worker; more get 503 (AXON_MAX_CONNECTIONS; default 10000)")
    p.add_argument("--file-cache", type=int, default=_env("AXON_FILE_CACHE", 1024), metavar="N",
                   help="open files each worker keeps for reuse; edits, deletions and renames over a file are "
                        "seen at once, other changes to what a path names within 1 s (AXON_FILE_CACHE; "
                        "default 1024; 0: open every file for every request)")
    p.add_argument("--replay", action=argparse.BooleanOptionalAction, default=not _env_bool("AXON_NO_REPLAY"),
                   help="answer a request that repeats the bytes of one answered before from that answer, without "
                        "parsing or planning it again, while every file it holds is unchanged (one fstat each); "
                        "default on (--no-replay or AXON_NO_REPLAY=1: plan every request)")
    p.add_argument("--metrics", action=argparse.BooleanOptionalAction, default=_env_bool("AXON_METRICS"),
                   help="Prometheus metrics at GET /metrics, summed over the workers (AXON_METRICS; the workers "
                        "keep their counts in AXON_METRICS_DIR, default a fresh temporary directory)")
    p.add_argument("--cache-control", default=_env("AXON_CACHE_CONTROL"), metavar="POLICY",
                   help="Cache-Control of file and batch responses (AXON_CACHE_CONTROL; default no-cache: "
                        "caches revalidate, a cheap 304; e.g. 'public, max-age=31536000, immutable' for assets "
                        "that never change under one URL; '' for none)")
    p.add_argument("--browse", action=argparse.BooleanOptionalAction, default=_env_bool("AXON_BROWSE"),
                   help="list directories under /browse/: an HTML page to pick files and download them, "
                        "JSON for programs (AXON_BROWSE; default off, as nginx's autoindex)")
    p.add_argument("--portable-identity", action=argparse.BooleanOptionalAction,
                   default=_env_bool("AXON_PORTABLE_IDENTITY"),
                   help="for several nodes serving copies of the same files behind one balancer: name a file "
                        "by its path, size and mtime (not inode and ctime), so ETags and batch bytes agree on "
                        "every node; needs AXON_IDENTITY_SECRET (or AXON_SECRET) shared by them "
                        "(AXON_PORTABLE_IDENTITY)")
    p.add_argument("--certfile", default=_env("AXON_CERTFILE"), help="TLS certificate chain, PEM (AXON_CERTFILE)")
    p.add_argument("--keyfile", default=_env("AXON_KEYFILE"), help="TLS private key, PEM (AXON_KEYFILE)")
    p.set_defaults(func=run)
    return p


def load_app(
    spec: str | None, root: str | None, cache_control: str | None = None, browse: bool = False,
    portable_identity: bool = False,
) -> Any:
    """The built-in App serving ``root``, or the user's App named ``module:attr``.

    With ``--app``, ROOT (if given) is exported as ``AXON_ROOT`` before the module is imported, so
    an ``App()`` built there without a root serves it (and ``--browse`` as ``AXON_BROWSE``). ``attr`` may be an App, or a function that
    takes no argument and returns one. The current directory is importable, as with uvicorn.
    """
    from ..app import App

    if spec is None:
        return App(root if root is not None else ".", cache_control=cache_control, browse=browse,
                   portable_identity=portable_identity)
    module_name, sep, attr = spec.partition(":")
    if not sep or not module_name or not attr:
        raise SystemExit(f"--app takes MODULE:ATTR, e.g. mysite:app, not {spec!r}")
    if root is not None:
        os.environ["AXON_ROOT"] = root
    if browse:  # and --browse for an App() built there without saying
        os.environ["AXON_BROWSE"] = "1"
    if portable_identity:
        os.environ["AXON_PORTABLE_IDENTITY"] = "1"
    if "" not in sys.path and os.getcwd() not in sys.path:
        sys.path.insert(0, os.getcwd())
    try:
        module = importlib.import_module(module_name)
    except ImportError as exc:
        raise SystemExit(f"--app {spec}: cannot import {module_name}: {exc}") from None
    target: Any = module
    for part in attr.split("."):
        try:
            target = getattr(target, part)
        except AttributeError:
            raise SystemExit(f"--app {spec}: {module_name} has no attribute {attr}") from None
    if not isinstance(target, App) and callable(target) and not hasattr(target, "handle_async"):
        target = target()
    if not hasattr(target, "handle_async"):
        raise SystemExit(f"--app {spec}: expected an axon.App, got {type(target).__name__}")
    return target


def run(args: argparse.Namespace) -> int:
    from .. import log as axon_log
    from .config import ServerConfig
    from .loops import require_httptools

    axon_log.configure(args.log_level, json_format=args.json_logs, access_log=args.access_log)
    require_httptools()
    try:
        config = ServerConfig(
            host=args.host,
            port=args.port,
            workers=args.workers,
            reuse_port=args.reuse_port,
            graceful_timeout=args.graceful_timeout,
            max_connections=args.max_connections,
            file_cache=args.file_cache,
            replay=args.replay,
            certfile=args.certfile,
            keyfile=args.keyfile,
        )
        if config.tls:
            config.ssl_context()  # a bad certificate fails now, not in each worker
    except (ValueError, OSError) as exc:
        raise SystemExit(f"axon serve: {exc}") from None
    # The object store's flags, as the variables they stand for: the source reads those.
    for value, name in ((args.endpoint_url, "AWS_ENDPOINT_URL"), (args.region, "AWS_REGION"),
                        (args.allow_http and "true", "AWS_ALLOW_HTTP"), (args.store_timeout, "AXON_STORE_TIMEOUT"),
                        (args.object_cache, "AXON_OBJECT_CACHE"),
                        (args.object_listing is False and "1", "AXON_NO_OBJECT_LISTING")):
        if value is not None and value is not False and value != "":
            os.environ[name] = str(value)
    if args.object_listing:  # --object-listing wins over AXON_NO_OBJECT_LISTING
        os.environ.pop("AXON_NO_OBJECT_LISTING", None)
    try:
        app = load_app(args.app, args.root, args.cache_control, args.browse, args.portable_identity)
    except ValueError as exc:  # e.g. the root is not a directory
        raise SystemExit(f"axon serve: {exc}") from None
    scratch = None
    if args.metrics:
        from ..metrics import instrument

        # Before the fork: every worker then publishes its counts to the same directory.
        directory = environment().metrics_dir
        if directory is None:
            directory = scratch = tempfile.mkdtemp(prefix="axon-metrics-")
        instrument(app, directory=directory)
    from .supervisor import serve

    try:
        return serve(app, config)
    except OSError as exc:
        raise SystemExit(f"axon serve: cannot listen on {config.host}:{config.port}: {exc}") from None
    finally:
        if scratch is not None:
            shutil.rmtree(scratch, ignore_errors=True)
