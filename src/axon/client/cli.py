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
import sys
import threading
import time
from collections.abc import Sequence
from pathlib import Path
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from .archive import PARTIAL, fetch_archive, unpack
from .download import FetchedFile
from .errors import FetchError
from .fetch import DEFAULT_TIMEOUT, fetch
from .paths import check_path_shape
from .progress import ProgressTracker, format_bytes

__all__ = ["add_parser", "run"]

DEFAULT_BATCH_SIZE = 500


def add_parser(subparsers: Any) -> argparse.ArgumentParser:
    """Register ``fetch`` on the ``axon`` command's subparsers."""
    parser: argparse.ArgumentParser = subparsers.add_parser(
        "fetch",
        help="download files from an Axon server",
        description="Download files from an Axon server; each lands at DIR/<path>, whole or not at all.",
    )
    parser.add_argument("base_url", metavar="BASE_URL", help="the server, e.g. http://127.0.0.1:8000")
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
    parser.add_argument("--parallel", type=_positive_int, default=1, metavar="N", help="connections at once")
    parser.add_argument(
        "--timeout", type=float, default=DEFAULT_TIMEOUT, help="seconds per network operation"
    )
    parser.add_argument(
        "-H", "--header", action="append", default=[], metavar="'NAME: VALUE'", help="extra request header"
    )
    parser.add_argument("--no-progress", action="store_true", help="no progress display")
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
    tracker = ProgressTracker(len(paths), show=not args.no_progress)
    stop = threading.Event()

    def fetch_batch(batch: list[str]) -> None:
        if stop.is_set():
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
    finally:
        stop.set()  # before waiting: batches not yet started must not start
        pool.shutdown(wait=True, cancel_futures=True)
        tracker.close()
    elapsed = time.monotonic() - started
    done = f"{tracker.files_done} of {len(paths)} files ({format_bytes(tracker.bytes_written)})"
    if error is None:
        rate = format_bytes(tracker.bytes_written / max(elapsed, 1e-9))
        print(f"fetched {done} into {args.output} in {elapsed:.1f} s, {rate}/s")
        return 0
    if isinstance(error, KeyboardInterrupt):
        return _fail(f"interrupted after {done}", code=130)
    if not isinstance(error, (FetchError, OSError, ValueError)):
        raise error
    return _fail(f"{error} (fetched {done} before stopping)")


def _run_archive(args: argparse.Namespace, paths: list[str], headers: dict[str, str]) -> int:
    fmt, path = ("zip", args.zip) if args.zip else ("tar", args.tar)
    tracker = ProgressTracker(1, show=not args.no_progress)  # one file: the archive
    progress = tracker.for_batch(1)
    started = time.monotonic()
    try:
        result = fetch_archive(
            args.base_url, paths, path, fmt, timeout=args.timeout, headers=headers,
            method="POST" if args.from_list else None, progress=progress, resume=args.resume, secret=args.secret,
        )
        progress.file_written(FetchedFile(path, result.path, result.size))
        unpacked = unpack(result.path, args.output) if args.unpack else None
    except KeyboardInterrupt:
        return _fail("interrupted" + _resumable(path), code=130)
    except (FetchError, OSError, ValueError) as exc:
        return _fail(str(exc) + _resumable(path))
    finally:
        tracker.close()
    elapsed = time.monotonic() - started
    resumed = f", resumed at byte {result.resumed_from}" if result.resumed_from else ""
    print(f"saved {len(paths)} files as {result.path} ({format_bytes(result.size)}{resumed}) in {elapsed:.1f} s")
    if unpacked is not None:
        print(f"unpacked {len(unpacked)} files into {args.output}")
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


def _positive_int(text: str) -> int:
    value = int(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be at least 1, not {value}")
    return value


def _fail(message: str, *, code: int = 1) -> int:
    print(f"axon fetch: error: {message}", file=sys.stderr)
    return code
