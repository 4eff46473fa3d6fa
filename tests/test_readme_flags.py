"""Every flag the README gives a command (``axon serve --x``, ``axon fetch --y``) is one that
command has: a documented flag that does not exist is an error a reader meets first."""

from __future__ import annotations

import re
from pathlib import Path

from axon.cli import build_parser

README = (Path(__file__).resolve().parents[1] / "README.md").read_text()


def options_of(command: str) -> set[str]:
    parser = build_parser()
    sub = next(a for a in parser._actions if a.dest == "command").choices[command]  # noqa: SLF001
    return {option for action in sub._actions for option in action.option_strings}  # noqa: SLF001


def documented(command: str) -> set[str]:
    """The ``--flags`` written after ``axon <command>`` on one line of the README."""
    flags: set[str] = set()
    for line in README.splitlines():
        for found in re.finditer(rf"axon {command}\b([^`|#]*)", line):
            flags.update(re.findall(r"(?<![\w-])(--[a-z][a-z0-9-]*)", found.group(1)))
    return flags


def test_the_flags_the_readme_gives_axon_serve_exist() -> None:
    flags = documented("serve")
    assert "--port" in flags and "--browse" in flags  # the scan finds what is there
    assert flags - options_of("serve") == set()


def test_the_flags_the_readme_gives_axon_fetch_exist() -> None:
    assert documented("fetch") - options_of("fetch") == set()
