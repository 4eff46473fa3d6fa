"""The server reaches the rest of Axon only through what it declares: no module of axon.server
reads another object's private member (``obj._name``) or imports a private name, so that storage's
and the App's insides can change without the server noticing (the import contract
"storage-behind-its-interface" in pyproject.toml keeps it out of storage's modules)."""

from __future__ import annotations

import ast
from pathlib import Path

import axon.server

SERVER = Path(axon.server.__file__).parent
#: The standard library's documented underscored names (os._exit, argparse._SubParsersAction).
STDLIB = ("os", "sys", "argparse")


def private_reaches(source: str) -> list[str]:
    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Attribute) and node.attr.startswith("_") and not node.attr.startswith("__"):
            if not (isinstance(node.value, ast.Name) and node.value.id in ("self", "cls", *STDLIB)):
                found.append(f"{ast.unparse(node)} (line {node.lineno})")
        elif isinstance(node, ast.ImportFrom) and node.level != 1:  # another package's module
            found += [f"import {alias.name} (line {node.lineno})" for alias in node.names if alias.name.startswith("_")]
    return found


def test_no_server_module_reads_a_private_member_of_another() -> None:
    reaches = {path.name: private_reaches(path.read_text()) for path in sorted(SERVER.glob("*.py"))}
    assert {name: found for name, found in reaches.items() if found} == {}


def test_the_check_sees_a_reach() -> None:
    assert private_reaches("def f(store):\n    return store._cache\n") == ["store._cache (line 2)"]
    assert private_reaches("from ..storage.local import _walk\n") == ["import _walk (line 1)"]
    assert private_reaches("class A:\n    def f(self):\n        return self._x\n") == []
