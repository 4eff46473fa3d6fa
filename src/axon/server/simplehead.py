"""The server's optional accelerator: simple request heads read in one call (``_simplehead.c``).

Most requests a server gets are the simplest kind: a ``GET`` (or ``HEAD``) of HTTP/1.1 with a
few plain headers and no body, arriving whole in one read. llhttp reads them fast, but httptools
calls the connection back in Python for the URL, for each header and twice more, and those calls
cost more than the reading. This one call hands back the method, the target, the headers as the
connection keeps them, where the head ended, and what the limits are checked on (the fields'
count and bytes: ``axon.runtime.check_head`` decides, on both paths; the reader knows no limit).

:func:`parser` is that call, or None where it was not built (no C compiler or Python headers at
install: pip warns and goes on) or is turned off (``AXON_PURE_PYTHON=1``). With None every head
goes to llhttp, as it always can: the accelerator reads a strict subset of what llhttp accepts
(``_simplehead.c`` lists it) and hands anything else back, untouched, so a request is never
refused or read differently because of it. ``tests/server/test_server_simplehead.py`` compares the two
on generated heads, and the suite's connection tests run with and without it.
"""

from __future__ import annotations

from collections.abc import Callable

from ..config import environment

#: ``parse(data, start)`` -> ``(method, url, headers, end, count, field_bytes)``, or None for a
#: head it does not read (incomplete, or not simple).
SimpleHeadParser = Callable[[bytes, int], "tuple[bytes, bytes, dict[str, str], int, int, int] | None"]


def parser() -> SimpleHeadParser | None:
    """The compiled reader of simple heads, or None: not built here, or ``AXON_PURE_PYTHON=1``."""
    if environment().pure_python:
        return None
    try:
        from ._simplehead import parse
    except ImportError:
        return None
    return parse


def describe() -> str:
    """What ``axon serve`` says at start about the head path."""
    if environment().pure_python:
        return "heads read by httptools alone (AXON_PURE_PYTHON=1)"
    if parser() is None:
        return "heads read by httptools alone (the compiled reader of simple heads was not built)"
    return "simple heads read by the compiled reader, the rest by httptools"
