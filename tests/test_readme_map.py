"""The README's module map ("Development") names every module under ``src/axon``, and only those.

The map is the fenced block that begins ``src/axon/``. Each line is a column of names, then two
spaces and what they do; a line whose first column is not names (``x.py``, ``x/``) continues the
line above. A name belongs to the nearest directory above it that is indented less. A directory
with names under it must list each of its modules (``__init__.py`` only when it holds more than
the package's exports); a directory with none stands for its whole package (``client/``, the tools).
"""

from __future__ import annotations

import re
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
SRC = REPO / "src" / "axon"
NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*(\.py|/)")


def map_lines(readme: str) -> list[str]:
    lines = readme.splitlines()
    start = lines.index("src/axon/")
    end = lines.index("```", start)
    return lines[start + 1 : end]


def parse(lines: list[str]) -> dict[str, list[str]]:
    """The map as {directory: names listed under it}: ``""`` is ``src/axon`` itself, a
    directory's key ends in ``/`` (``"server/"``)."""
    listed: dict[str, list[str]] = {"": []}
    parents: list[tuple[int, str]] = [(-1, "")]  # (indent, directory) from the top down
    for line in lines:
        indent = len(line) - len(line.lstrip(" "))
        names = re.split(r"\s{2,}", line.strip(), maxsplit=1)[0].split()
        if not names or not all(NAME.fullmatch(n) for n in names):
            continue  # a description carried over from the line above
        while parents[-1][0] >= indent:
            parents.pop()
        parent = parents[-1][1]
        for name in names:
            listed[parent].append(name)
            if name.endswith("/"):
                listed.setdefault(parent + name, [])
        if len(names) == 1 and names[0].endswith("/"):
            parents.append((indent, parent + names[0]))
    return listed


def modules_of(directory: Path) -> set[str]:
    """What a directory's map must name: its modules and its packages (``name/``)."""
    found = {p.name for p in directory.glob("*.py")}
    found |= {p.name + "/" for p in directory.iterdir() if (p / "__init__.py").is_file()}
    return found


def differences(listed: dict[str, list[str]]) -> list[str]:
    problems: list[str] = []
    for directory, names in listed.items():
        path = SRC / directory
        if (directory and not names) or not path.is_dir():
            continue  # a package listed whole, or one that is not there (its parent says so)
        exists = modules_of(path)
        for name in sorted(set(names) - exists):
            problems.append(f"listed but not in src/axon: {directory}{name}")
        for name in sorted(exists - set(names) - {"__init__.py"}):
            problems.append(f"in src/axon but not in the map: {directory}{name}")
        for name in sorted({n for n in names if names.count(n) > 1}):
            problems.append(f"listed twice: {directory}{name}")
    return problems


def test_the_map_names_every_module_and_only_those() -> None:
    listed = parse(map_lines((REPO / "README.md").read_text()))
    assert "server/" in listed and "worker.py" in listed["server/"]  # the parse finds what is there
    problems = differences(listed)
    assert not problems, "README.md's module map (Development) and src/axon differ:\n  " + "\n  ".join(problems)


def test_the_parse_sees_a_missing_and_an_extra_module() -> None:
    listed = parse(map_lines((REPO / "README.md").read_text()))
    listed["server/"] = [n for n in listed["server/"] if n != "worker.py"] + ["gone.py"]
    assert set(differences(listed)) >= {
        "in src/axon but not in the map: server/worker.py",
        "listed but not in src/axon: server/gone.py",
    }
