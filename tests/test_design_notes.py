"""docs/design-notes.md's "Layers" block is the list in pyproject.toml's ``[tool.importlinter]``:
the notes say why each layer sits where it does, so they must name the layers the contract checks."""

from __future__ import annotations

import re
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    tomllib = pytest.importorskip("tomli")


def contract_layers() -> list[str]:
    config = tomllib.loads((REPO / "pyproject.toml").read_text())
    contract = next(c for c in config["tool"]["importlinter"]["contracts"] if c["id"] == "layers")
    return [" ".join(layer.split()) for layer in contract["layers"]]


def noted_layers() -> list[str]:
    """The first column of the fenced block in the notes' "Layers" section (a layer, then two
    spaces and what it is)."""
    text = (REPO / "docs" / "design-notes.md").read_text()
    section = text.split("\n## Layers\n", 1)[1].split("\n## ", 1)[0]
    block = section.split("```\n", 2)[1]
    return [" ".join(re.split(r"\s{2,}", line.strip(), maxsplit=1)[0].split())
            for line in block.splitlines() if line.strip()]


def test_the_notes_name_the_contracts_layers_in_its_order() -> None:
    noted, checked = noted_layers(), contract_layers()
    assert noted == checked, (
        "docs/design-notes.md, \"Layers\", and pyproject.toml's layers differ:\n"
        f"  only in the notes: {[x for x in noted if x not in checked]}\n"
        f"  only in pyproject.toml: {[x for x in checked if x not in noted]}\n"
        f"  notes: {noted}\n  pyproject.toml: {checked}"
    )
