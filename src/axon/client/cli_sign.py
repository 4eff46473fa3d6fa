"""``axon sign``: mint signed URLs and bearer tokens for a server run with a secret.

    axon sign /files/report.pdf                           # a signed path, valid one hour
    axon sign http://host:8000 a.bin dir/b.bin            # a signed batch URL for these files
    axon sign http://host:8000/api/stream-files.zip a.bin b.bin   # ... as a zip (.tar: a tar)
    axon sign --token --expires-in 86400                  # a bearer token for a day

The secret comes from ``AXON_SECRET`` (or ``--secret``, which other users can see in ``ps``).
See :mod:`axon.signing` for what a signature covers.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from typing import Any
from urllib.parse import urlsplit, urlunsplit

from ..signing import mint_token, sign_url
from ..batchclient.request import ENDPOINT, FORMATS, build_request

__all__ = ["add_parser", "run"]

DEFAULT_LIFETIME = 3600


def add_parser(subparsers: Any) -> argparse.ArgumentParser:
    """Register ``sign`` on the ``axon`` command's subparsers."""
    parser: argparse.ArgumentParser = subparsers.add_parser(
        "sign",
        help="mint a signed URL or a bearer token",
        description="Print a URL signed for an Axon server run with a secret, or a bearer token.",
    )
    parser.add_argument(
        "target",
        metavar="URL",
        nargs="?",
        help="a path with its query (/files/a.bin), a full URL, or with FILEs the server's base URL "
             "or its batch URL (.../api/stream-files, .zip or .tar: the batch as multipart, zip or tar)",
    )
    parser.add_argument("files", metavar="FILE", nargs="*", help="sign the batch URL for these files")
    parser.add_argument("--token", action="store_true", help="print a bearer token instead of a URL")
    parser.add_argument(
        "--expires-in", type=_lifetime, default=DEFAULT_LIFETIME, metavar="SECONDS", help="lifetime (default: 3600)"
    )
    parser.add_argument("--expires-at", type=_whole, metavar="UNIX", help="absolute expiry, in unix seconds")
    parser.add_argument("--secret", default=None, help="the server's secret (default: $AXON_SECRET)")
    parser.set_defaults(func=run)
    return parser


def run(args: argparse.Namespace) -> int:
    secret = args.secret or os.environ.get("AXON_SECRET")
    if not secret:
        return _fail("no secret: set AXON_SECRET (or pass --secret)")
    now = int(time.time())
    if args.expires_at is not None and args.expires_at <= now:
        return _fail(f"--expires-at {args.expires_at} is not in the future (now: {now}): that would be expired already")
    expires = args.expires_at if args.expires_at is not None else now + args.expires_in
    if args.token:
        if args.target or args.files:
            return _fail("--token takes no URL or files")
        print(mint_token(secret, expires))
        return 0
    if not args.target:
        return _fail("name what to sign: a path, a URL, or a base URL and files")
    try:
        if args.files:
            base, fmt = batch_endpoint(args.target)
            request = build_request(base, args.files, method="GET", fmt=fmt)
            print(request.origin + sign_url(request.target, secret, expires))
        else:
            target = args.target if "://" in args.target or args.target.startswith("/") else "/" + args.target
            print(sign_url(target, secret, expires))
    except ValueError as exc:
        return _fail(str(exc))
    return 0


def batch_endpoint(url: str) -> tuple[str, str]:
    """The base URL and the format ``build_request`` takes for a server's base URL or its batch
    URL (``.../api/stream-files.zip``: the zip); a URL with FILEs names no files of its own."""
    parts = urlsplit(url)
    if parts.query:
        raise ValueError(f"with FILEs, name the server's URL without a query, not {url!r}")
    path = parts.path.rstrip("/")
    for fmt, (suffix, _) in FORMATS.items():
        if path.endswith(ENDPOINT + suffix):
            return urlunsplit(parts._replace(path=path[: -len(ENDPOINT + suffix)])), fmt
    return url, "multipart"


def _whole(text: str) -> int:
    try:
        return int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a whole number of seconds, not {text!r}") from None


def _lifetime(text: str) -> int:
    value = _whole(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be 1 second or more, not {value}: a URL signed so would be expired already")
    return value


def _fail(message: str) -> int:
    print(f"axon sign: error: {message}", file=sys.stderr)
    return 2
