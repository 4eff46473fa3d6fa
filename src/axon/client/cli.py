"""``axon fetch``: download files from an Axon server into a directory, in batches.

    axon fetch http://host:8000 a.bin dir/b.bin -o downloads
    axon fetch http://host:8000 --from-list paths.txt -o downloads --parallel 4
    axon fetch http://host:8000 a.bin dir/b.bin --zip batch.zip            # one archive file
    axon fetch http://host:8000 a.bin dir/b.bin --tar batch.tar --unpack -o downloads

Long lists are cut into batches of ``--batch-size`` files, one request each, ``--parallel`` at a
time. The first failure stops new batches from starting; files already complete stay, and a batch
cut short is saved under ``DIR/.axon-partial/``: running the same command again resumes it where
it stopped (unless ``--no-resume``). ``--secret`` (or ``AXON_SECRET``) signs every request.

``--zip FILE`` / ``--tar FILE`` save the whole list as one archive file instead (one request,
:mod:`.archive`), resumed the same way; ``--unpack`` then extracts it into ``-o DIR``.
"""

from __future__ import annotations

import argparse
import os
import signal
import sys
import threading
import time
from collections.abc import Sequence
from pathlib import Path
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from ..batchclient.request import split_base
from .archive import PARTIAL, fetch_archive, unpack
from .cancel import Cancel
from .errors import BatchTooLarge, FetchError
from .fetch import DEFAULT_TIMEOUT, fetch
from .paths import check_path_shape
from .progress import ProgressTracker, format_bytes, resumed_at

__all__ = ["add_parser", "run"]

DEFAULT_BATCH_SIZE = 500


def add_parser(subparsers: Any) -> argparse.ArgumentParser:
    """Register ``fetch`` on the ``axon`` command's subparsers."""
    parser: argparse.ArgumentParser = subparsers.add_parser(
        "fetch",
        help="download files from an Axon server",
        description="Download files from an Axon server; each lands at DIR/<path>, whole or not at all.",
    )
    parser.add_argument("base_url", metavar="BASE_URL", type=_base_url, help="the server, e.g. http://127.0.0.1:8000")
    parser.add_argument("files", metavar="FILE", nargs="*", help="paths to fetch, as the server names them")
    parser.add_argument(
        "-o", "--output", metavar="DIR", default=".", help="destination directory (default: .)"
    )
    parser.add_argument(
        "--from-list", metavar="LIST", help="read paths from LIST, one a line ('-' for stdin); sent as POST"
    )
    parser.add_argument(
        "--batch-size",
        type=_positive_int,
        default=DEFAULT_BATCH_SIZE,
        help="files per request (default: 500)",
    )
    parser.add_argument("--parallel", type=_positive_int, default=1, metavar="N",
                        help="batches fetched at once, a connection each (default: 1)")
    parser.add_argument(
        "--timeout", type=_positive_seconds, default=DEFAULT_TIMEOUT, help="seconds per network operation"
    )
    parser.add_argument(
        "-H", "--header", action="append", default=[], metavar="'NAME: VALUE'", help="extra request header"
    )
    parser.add_argument(
        "--progress",
        action=argparse.BooleanOptionalAction,
        default=None,
        help="show progress on stderr (default: only when stderr is a terminal)",
    )
    archive = parser.add_mutually_exclusive_group()
    archive.add_argument("--zip", metavar="FILE", help="save the batch as one zip file (one request for the whole list)")
    archive.add_argument("--tar", metavar="FILE", help="save the batch as one tar file (one request for the whole list)")
    parser.add_argument(
        "--unpack", action="store_true", help="with --zip or --tar: also extract the archive into DIR (-o)"
    )
    parser.add_argument(
        "--resume",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="save a batch cut short and continue it on the next run (default: on)",
    )
    parser.add_argument(
        "--secret",
        default=os.environ.get("AXON_SECRET") or None,
        help="sign requests with this secret (default: $AXON_SECRET; prefer it: a flag shows in ps)",
    )
    parser.set_defaults(func=run)
    return parser


def run(args: argparse.Namespace) -> int:
    try:
        paths = _collect_paths(args)
        headers = _parse_headers(args.header)
    except (OSError, ValueError) as exc:
        return _fail(str(exc), code=2)
    if not paths:
        return _fail("no files given: name them as arguments or with --from-list", code=2)
    if args.zip or args.tar:
        return _run_archive(args, paths, headers)
    if args.unpack:
        return _fail("--unpack needs --zip FILE or --tar FILE", code=2)
    batches = [paths[i : i + args.batch_size] for i in range(0, len(paths), args.batch_size)]
    method = "POST" if args.from_list else None
    # Also counts what was written when nothing is shown: a failed batch keeps its whole files.
    tracker = ProgressTracker(len(paths), show=_show_progress(args))
    stop = threading.Event()
    cancel = Cancel()  # Ctrl-C: the batches running stop now (saved to resume), not when done

    def fetch_batch(batch: list[str]) -> None:
        if stop.is_set() or cancel.is_set():
            return
        try:
            fetch(
                args.base_url,
                batch,
                args.output,
                timeout=args.timeout,
                headers=headers,
                method=method,
                progress=tracker.for_batch(len(batch)),
                resume=args.resume,
                secret=args.secret,
                cancel=cancel,
            )
        except BaseException:
            stop.set()
            raise

    started = time.monotonic()
    error: BaseException | None = None
    pool = ThreadPoolExecutor(max_workers=min(args.parallel, len(batches)))
    try:
        futures = [pool.submit(fetch_batch, batch) for batch in batches]
        for future in futures:
            failure = future.exception()
            if failure is not None and error is None:
                error = failure
    except KeyboardInterrupt:
        error = KeyboardInterrupt()
        _hold_interrupts()
        cancel.set()
    finally:
        stop.set()  # before waiting: batches not yet started must not start
        if _wait_for(pool, cancel):
            error = KeyboardInterrupt()
            _hold_interrupts()
        tracker.close()
    elapsed = time.monotonic() - started
    resumed = tracker.resumed()
    if error is None:
        done = f"{tracker.files_done} of {_files(len(paths))} ({format_bytes(tracker.bytes_written)})"
        rate = format_bytes(tracker.rate(elapsed))
        print(f"fetched {done} into {args.output} in {elapsed:.1f} s, {rate}/s" + (f"; {resumed}" if resumed else ""))
        return 0
    # Stopped: what moved counts, the bytes of a part kept to resume too, not only whole files.
    done = f"{tracker.files_done} of {_files(len(paths))} ({format_bytes(tracker.bytes_moved)} received" + (
        f", {resumed})" if resumed else ")")
    if isinstance(error, KeyboardInterrupt):
        again = "; run the same command again to resume" if args.resume else ""
        return _fail(f"interrupted after {done}{again}", code=130)
    if not isinstance(error, (FetchError, OSError, ValueError)):
        raise error
    return _fail(f"{error} (fetched {done} before stopping)")


def _hold_interrupts() -> None:
    """Ignore Ctrl-C from the first one on, in the main thread: what is left is moments of saving
    where each batch stood and saying so, which a second Ctrl-C must not cut short (a traceback,
    or the interpreter's default action as it exits). Not restored: the command ends."""
    if threading.current_thread() is threading.main_thread():
        signal.signal(signal.SIGINT, signal.SIG_IGN)


def _wait_for(pool: ThreadPoolExecutor, cancel: Cancel) -> bool:
    """Wait for the batches running to end; True if Ctrl-C came meanwhile. Another Ctrl-C while
    they save where they stood (moments, once cancelled) must not cut that short."""
    interrupted = False
    while True:
        try:
            pool.shutdown(wait=True, cancel_futures=True)
            return interrupted
        except KeyboardInterrupt:
            interrupted = True
            cancel.set()


def _run_archive(args: argparse.Namespace, paths: list[str], headers: dict[str, str]) -> int:
    fmt, path = ("zip", args.zip) if args.zip else ("tar", args.tar)
    tracker = ProgressTracker(len(paths), show=_show_progress(args))  # all of them, when the archive is
    progress = tracker.for_batch(len(paths))
    started = time.monotonic()
    try:
        result = fetch_archive(
            args.base_url, paths, path, fmt, timeout=args.timeout, headers=headers,
            method="POST" if args.from_list else None, progress=progress, resume=args.resume, secret=args.secret,
        )
        tracker.archive_written(result.size)
        unpacked = unpack(result.path, args.output) if args.unpack else None
    except KeyboardInterrupt:
        return _fail("interrupted" + _resumable(path), code=130)
    except BatchTooLarge as exc:  # nothing sent: the list, not the server, is the problem
        return _fail(f"{exc}; without --zip/--tar, axon fetch cuts the list into batches (--batch-size), "
                     "or split it into several archives", code=2)
    except (FetchError, OSError, ValueError) as exc:
        return _fail(str(exc) + _resumable(path))
    finally:
        tracker.close()
    elapsed = time.monotonic() - started
    resumed = f"; {resumed_at(result.resumed_from, result.size)}" if result.resumed_from else ""
    print(f"saved {_files(len(paths))} as {result.path} ({format_bytes(result.size)}) in {elapsed:.1f} s, "
          f"{format_bytes(tracker.rate(elapsed))}/s{resumed}")
    if unpacked is not None:
        print(f"unpacked {_files(len(unpacked))} into {args.output}")
    return 0


def _resumable(path: str) -> str:
    kept = Path(path + PARTIAL)
    if not (kept.exists() and Path(f"{kept}.json").exists()):
        return ""
    return f"; {format_bytes(kept.stat().st_size)} kept in {kept}: run the same command again to resume"


def _collect_paths(args: argparse.Namespace) -> list[str]:
    paths = list(args.files)
    if args.from_list:
        if args.from_list == "-":
            lines = sys.stdin.read().splitlines()
        else:
            with open(args.from_list, encoding="utf-8") as listing:
                lines = listing.read().splitlines()
        # Only line breaks are stripped: spaces at either end may belong to a file name.
        paths += [line for line in lines if line]
    for path in paths:
        try:
            check_path_shape(path)
        except FetchError as exc:
            raise ValueError(f"refusing to request {path!r}: {exc}") from None
    return paths


def _parse_headers(values: Sequence[str]) -> dict[str, str]:
    headers = {}
    for value in values:
        name, sep, content = value.partition(":")
        if not sep or not name.strip():
            raise ValueError(f"a header must look like 'Name: value', not {value!r}")
        headers[name.strip()] = content.strip()
    return headers


def _show_progress(args: argparse.Namespace) -> bool:
    """Progress lines are for a person watching: by default only on a terminal, never into a
    log file or a pipe."""
    return args.progress if args.progress is not None else sys.stderr.isatty()


def _files(count: int) -> str:
    return f"{count} file" if count == 1 else f"{count} files"


def _base_url(text: str) -> str:
    try:
        split_base(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc) if "://" in text else f"{exc} (try http://{text})") from None
    return text


def _positive_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a whole number, not {text!r}") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be at least 1, not {value}")
    return value


def _positive_seconds(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number of seconds, not {text!r}") from None
    if not 0 < value < float("inf"):
        raise argparse.ArgumentTypeError(f"must be more than 0 seconds, not {text}")
    return value


def _fail(message: str, *, code: int = 1) -> int:
    print(f"axon fetch: error: {message}", file=sys.stderr)
    return code
