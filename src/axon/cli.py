"""The ``axon`` command: a thin dispatcher. Each subcommand lives beside the code it drives."""

from __future__ import annotations

import argparse
import importlib
import importlib.util
import sys

from . import __version__

# subcommand -> module with ``add_parser(subparsers)``; the parser's ``func(args) -> int`` runs it.
SUBCOMMANDS = {
    "serve": "axon.server.cli",
    "demo": "axon.demo",
    "fetch": "axon.client.cli",
    "sign": "axon.client.cli_sign",
    "bench": "axon.bench.cli",
}


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="axon", description="Serve files in batches over HTTP.")
    parser.add_argument("--version", action="version", version=f"axon {__version__}")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for module_name in SUBCOMMANDS.values():
        if importlib.util.find_spec(module_name) is None:
            continue  # a subcommand whose module is not installed is simply not offered
        importlib.import_module(module_name).add_parser(sub)
    parser.set_defaults(subcommands=sub.choices)
    return parser


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args, unknown = parser.parse_known_args(argv)
    if unknown:  # argparse would print the top-level usage: the subcommand's says what it takes
        args.subcommands[args.command].error(f"unrecognized arguments: {' '.join(unknown)}")
    return int(args.func(args) or 0)


if __name__ == "__main__":
    sys.exit(main())
