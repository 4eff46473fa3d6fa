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
import ssl
import sys
import tempfile
from contextlib import nullcontext
from typing import TYPE_CHECKING, Any

from ..config import environment, flag, must_be, parse_size, variable
from ..storage import FILE_CACHE_INACTIVE, FILE_CACHE_SIZE, FILE_CACHE_VALID

if TYPE_CHECKING:
    from .config import ServerConfig


def _env(name: str, default: Any = None) -> Any:
    return variable(name, default)


#: AXON_* switches set to a word that is neither true nor false, met while the parser was built:
#: ``run`` reports them as a usage error (the parser is built for every subcommand's sake).
_BAD_SWITCHES: list[str] = []


def _env_bool(name: str) -> bool:
    try:
        return flag(name)
    except ValueError as exc:
        _BAD_SWITCHES.append(str(exc))
        return False


def _port(text: str) -> int:
    value = _int(text)
    if not 0 <= value <= 65535:
        raise argparse.ArgumentTypeError(f"a port is 0 to 65535 (0: any free port), not {value}")
    return value


def _int(text: str) -> int:
    try:
        return int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a whole number, not {text!r}") from None


def _at_least(least: int) -> Any:
    def check(text: str) -> int:
        value = _int(text)
        if value < least:
            raise argparse.ArgumentTypeError(f"must be {least} or more, not {value}")
        return value
    return check


def _seconds(*, positive: bool) -> Any:
    def check(text: str) -> float:
        try:
            value = float(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"expected a number of seconds, not {text!r}") from None
        must = must_be(value, positive=positive)
        if must is not None:
            raise argparse.ArgumentTypeError(f"must be {must} seconds, not {text}")
        return value
    return check


def _size(text: str) -> int:
    try:
        return parse_size(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def _readable_file(text: str) -> str:
    """A PEM file named by --certfile or --keyfile: named in the error when it cannot be read."""
    try:
        with open(text, "rb"):
            pass
    except OSError as exc:
        raise argparse.ArgumentTypeError(f"cannot read {text}: {exc.strerror or exc}") from None
    return text


def usage_error(message: str) -> SystemExit:
    """``axon serve: error: ...`` on stderr and exit status 2, as argparse does for a bad flag."""
    print(f"axon serve: error: {message}", file=sys.stderr)
    return SystemExit(2)


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
    p.add_argument("--store-timeout", type=_seconds(positive=True), default=None, metavar="SECONDS",
                   help="for ROOT s3://...: seconds one request to the store may take (AXON_STORE_TIMEOUT; default 30)")
    p.add_argument("--object-cache", type=_at_least(0), default=None, metavar="MIB",
                   help="for ROOT s3://...: MiB of small objects' bytes (64 KiB or less) each worker keeps by key and "
                        "ETag; a batch's listing tells whether they are current, so a repeated batch costs no GET "
                        "(AXON_OBJECT_CACHE; default 64; 0: none)")
    p.add_argument("--object-listing", action=argparse.BooleanOptionalAction, default=None,
                   help="for ROOT s3://...: name a batch of 16 keys or more by listing them (ListObjectsV2) rather "
                        "than by a request each; --no-object-listing for a store whose listings lag its writes "
                        "(AXON_NO_OBJECT_LISTING=1; default on)")
    p.add_argument("--object-listing-valid", type=_seconds(positive=False), default=None, metavar="SECONDS",
                   help="for ROOT s3://...: trust a listing's entries this long for objects whose bytes are kept (in "
                        "memory or on disk), so that a batch of them asks the store nothing; an object may then be "
                        "served up to SECONDS older than the store's current version (AXON_OBJECT_LISTING_VALID; "
                        "default 0: every batch lists)")
    p.add_argument("--object-disk-cache", default=None, metavar="DIR",
                   help="for ROOT s3://...: keep objects of any size fetched from the store as files in DIR, shared by "
                        "the workers and kept across restarts, and send them as local files; each is used only under "
                        "the ETag the store gives now (AXON_OBJECT_DISK_CACHE; default none)")
    p.add_argument("--object-disk-size", type=_size, default=None, metavar="SIZE",
                   help="bytes on disk --object-disk-cache may take, least recently used out first, e.g. 50G "
                        "(AXON_OBJECT_DISK_SIZE; default 10G)")
    p.add_argument("--host", default=_env("AXON_HOST", "127.0.0.1"),
                   help="address to listen on (AXON_HOST; default 127.0.0.1; 0.0.0.0 for every interface)")
    p.add_argument("--port", type=_port, default=_env("AXON_PORT", 8000), help="port (AXON_PORT; default 8000; 0: any free port)")
    p.add_argument("--workers", type=_at_least(0), default=_env("AXON_WORKERS", cpu_count()),
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
    p.add_argument("--graceful-timeout", type=_seconds(positive=False), default=_env("AXON_GRACEFUL_TIMEOUT", 30.0),
                   help="seconds in-flight responses get to finish on SIGTERM/SIGINT (AXON_GRACEFUL_TIMEOUT; default 30)")
    p.add_argument("--max-connections", type=_at_least(1), default=_env("AXON_MAX_CONNECTIONS", 10000),
                   help="open connections per worker; more get 503 (AXON_MAX_CONNECTIONS; default 10000)")
    p.add_argument("--file-cache", type=_at_least(0), default=_env("AXON_FILE_CACHE", FILE_CACHE_SIZE), metavar="N",
                   help="open files each worker keeps for reuse, as nginx's open_file_cache: closed after 60 s "
                        "unused; edits, deletions and renames over a file are seen at once, other changes to what "
                        "a path names within 5 s (AXON_FILE_CACHE; default 10000, at most half the open-files "
                        "limit; 0: open every file for every request)")
    p.add_argument("--file-cache-valid", type=_seconds(positive=False), metavar="SECONDS",
                   default=_env("AXON_FILE_CACHE_VALID", FILE_CACHE_VALID),
                   help="how often a cached path is resolved again, as nginx's open_file_cache_valid: what "
                        "inotify cannot see (a path re-pointed, an mmap or NFS write) shows within this "
                        "(AXON_FILE_CACHE_VALID; default 5)")
    p.add_argument("--file-cache-inactive", type=_seconds(positive=False), metavar="SECONDS",
                   default=_env("AXON_FILE_CACHE_INACTIVE", FILE_CACHE_INACTIVE),
                   help="how long a cached file may go unused before it is closed, as nginx's open_file_cache "
                        "inactive= (AXON_FILE_CACHE_INACTIVE; default 60)")
    # Parsed only to refuse it with a message that says why (see run).
    p.add_argument("--replay", action=argparse.BooleanOptionalAction, default=None, help=argparse.SUPPRESS)
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
    p.add_argument("--certfile", type=_readable_file, default=_env("AXON_CERTFILE"), help="TLS certificate chain, PEM (AXON_CERTFILE)")
    p.add_argument("--keyfile", type=_readable_file, default=_env("AXON_KEYFILE"), help="TLS private key, PEM (AXON_KEYFILE)")
    p.set_defaults(func=run)
    return p


def load_app(
    spec: str | None, root: str | None, cache_control: str | None = None, browse: bool = False,
    portable_identity: bool = False, config: ServerConfig | None = None,
) -> Any:
    """The built-in App serving ``root``, or the user's App named ``module:attr``; either built
    for the server ``config`` describes (its open files shared: the open-file cache).

    With ``--app``, ROOT (if given) is exported as ``AXON_ROOT`` before the module is imported, so
    an ``App()`` built there without a root serves it (and ``--browse`` as ``AXON_BROWSE``); an App
    that names another root is a usage error, not ROOT ignored. ``attr`` may be an App, or a function that
    takes no argument and returns one. The current directory is importable, as with uvicorn.
    """
    from ..app import built_for_offset_reads

    building = built_for_offset_reads(config.serving_store) if config is not None else nullcontext()
    with building:
        return _load_app(spec, root, cache_control, browse, portable_identity)


def _load_app(spec: str | None, root: str | None, cache_control: str | None, browse: bool,
              portable_identity: bool) -> Any:
    from ..app import App

    if spec is None:
        return App(root if root is not None else ".", cache_control=cache_control, browse=browse,
                   portable_identity=portable_identity)
    module_name, sep, attr = spec.partition(":")
    if not sep or not module_name or not attr:
        raise usage_error(f"--app takes MODULE:ATTR, e.g. mysite:app, not {spec!r}")
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
    if not isinstance(target, App) and callable(target) and not hasattr(target, "handle_on_loop"):
        target = target()
    if not hasattr(target, "handle_on_loop"):
        raise SystemExit(f"--app {spec}: expected an axon.App, got {type(target).__name__}")
    served = getattr(getattr(target, "settings", None), "root", None)
    if root is not None and served is not None and not _same_root(root, served):
        raise usage_error(f"ROOT {root} is not what --app {spec} serves ({served}): that App names its own "
                          "root; leave ROOT out, or build the App without one to serve ROOT")
    return target


def _same_root(given: str, served: Any) -> bool:
    from ..storage.sources import is_store_url

    if is_store_url(given) or is_store_url(served):
        return given.rstrip("/") == str(served).rstrip("/")
    return os.path.realpath(given) == os.path.realpath(served)


def run(args: argparse.Namespace) -> int:
    from .. import log as axon_log
    from ..runtime import CannotServe, build_app
    from .config import ServerConfig
    from .loops import require_httptools
    from .worker import raise_fd_limit

    if _BAD_SWITCHES:
        raise usage_error(_BAD_SWITCHES[0])
    if (args.certfile is None) != (args.keyfile is None):
        raise usage_error("TLS needs both --certfile and --keyfile")
    axon_log.configure(args.log_level, json_format=args.json_logs, access_log=args.access_log)
    require_httptools()
    if args.replay is not None:
        raise usage_error("--replay and --no-replay were removed: answers are no longer replayed "
                          "(README, axon serve); drop the flag")
    try:
        config = ServerConfig(
            host=args.host,
            port=args.port,
            workers=args.workers,
            reuse_port=args.reuse_port,
            graceful_timeout=args.graceful_timeout,
            max_connections=args.max_connections,
            file_cache=args.file_cache,
            file_cache_valid=args.file_cache_valid,
            file_cache_inactive=args.file_cache_inactive,
            certfile=args.certfile,
            keyfile=args.keyfile,
        )
        if config.tls:
            config.ssl_context()  # a bad certificate fails now, not in each worker
    except ssl.SSLError as exc:  # its text names no file
        raise SystemExit(f"axon serve: cannot load --certfile {args.certfile} with --keyfile {args.keyfile}: "
                         f"{exc.reason or exc}") from None
    except (ValueError, OSError) as exc:
        raise SystemExit(f"axon serve: {exc}") from None
    # The object store's flags, as the variables they stand for: the source reads those.
    for value, name in ((args.endpoint_url, "AWS_ENDPOINT_URL"), (args.region, "AWS_REGION"),
                        (args.allow_http and "true", "AWS_ALLOW_HTTP"), (args.store_timeout, "AXON_STORE_TIMEOUT"),
                        (args.object_cache, "AXON_OBJECT_CACHE"),
                        (args.object_listing_valid, "AXON_OBJECT_LISTING_VALID"),
                        (args.object_disk_cache, "AXON_OBJECT_DISK_CACHE"),
                        (args.object_disk_size, "AXON_OBJECT_DISK_SIZE"),
                        (args.object_listing is False and "1", "AXON_NO_OBJECT_LISTING")):
        if value is not None and value is not False and value != "":
            os.environ[name] = str(value)
    if args.object_listing:  # --object-listing wins over AXON_NO_OBJECT_LISTING
        os.environ.pop("AXON_NO_OBJECT_LISTING", None)
    try:
        raise_fd_limit()  # before the open-file cache is sized: at most half of the limit
        app = build_app(lambda: load_app(args.app, args.root, args.cache_control, args.browse, args.portable_identity,
                                         config))
    except CannotServe as failure:
        cause = failure.__cause__
        # The root is not a directory, a setting cannot be: what was asked cannot be served (2).
        # The store refused (StoreMisconfigured), an extra is missing: no usage error (1).
        if isinstance(cause, ValueError) and type(cause).__name__ != "StoreMisconfigured":
            raise usage_error(str(failure)) from None
        raise SystemExit(f"axon serve: {failure}") from None
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
