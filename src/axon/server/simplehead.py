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

import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from ..config import environment
from ..runtime import checked_from
from .answer import MEMORY_BODY_MAX
from .shortcuts import REORDER_SECONDS, VARIANT_HEADERS

if TYPE_CHECKING:
    from ..limits import Limits
    from .shortcuts import Shortcuts

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


#: ``answer(data, tables, writer, flow, peer)`` -> True once it answered ``data`` (one request,
#: nothing after it), else what ``parse(data, 0)`` returns, for the Python path to go on with.
TrustedAnswer = Callable[[bytes, tuple, Any, Any, "str | None"], Any]


def answerer() -> TrustedAnswer | None:
    """The compiled answer (``_simplehead.answer``), or None: no compiled reader (as
    :func:`parser`), or ``AXON_NO_COMPILED_ANSWER=1``.

    Given a read that is one simple request and nothing more, it answers it from the worker's
    tables when the Python path would answer it from them too, with nothing left to decide: a
    fixed answer whose whole bytes were made for this second's ``Date`` line, or a ``GET``
    without ``Range`` or a precondition of a remembered head of one file that the open-file cache
    trusts (its window open, no news of changes owed or queued: one ``FIONREAD``) and whose
    trusted version keeps the answer made for that head. It hands that answer to the writer's
    ``hold`` and the record to the App's ``record_sent``, as the Python path does. Anything else
    (a table not filled yet, a window to reopen, news to take in) it leaves to the Python path,
    with the head it read (what :func:`parser` would have returned)."""
    env = environment()
    if not env.compiled_answer or parser() is None:
        return None
    from ._simplehead import answer

    return answer


def answer_tables(limits: Limits, shortcuts: Shortcuts, cache: Any, record_sent: Callable[..., None],
                  dated: Any, chunk: int) -> tuple:
    """What :func:`answerer`'s ``answer`` reads, for a worker's connections (the order is the C
    module's ``T_*``): the sizes within which ``check_head`` refuses nothing (of ``limits``), the
    longest body its writers of ``chunk`` write at once (:func:`held_at_once`), its ``shortcuts``' fixed answers and remembered heads, the
    headers that vary an answer, the heads' reorder time and clock, the open-file ``cache`` of
    its shared files (None without) and its reorder time, the App's ``record_sent``, the clock
    of a record's start, and what keeps the ``Date`` line (``dated.date_line``: the worker)."""
    most_fields, most_bytes = checked_from(limits)
    return (
        most_fields, most_bytes, held_at_once(chunk), shortcuts.fixed, shortcuts.remembered.heads, VARIANT_HEADERS,
        REORDER_SECONDS, time.monotonic, cache, 1.0 if cache is None else cache.REORDER, record_sent,
        time.perf_counter, dated,
    )


def held_at_once(chunk: int) -> int:
    """The longest body of bytes only (nothing to read from a file) that a writer of ``chunk``
    writes at once (:func:`~.answer.fits_one_write` with nothing to read)."""
    return max(chunk, MEMORY_BODY_MAX)


def describe() -> str:
    """What ``axon serve`` says at start about the head path."""
    if environment().pure_python:
        return "heads read by httptools alone (AXON_PURE_PYTHON=1)"
    if parser() is None:
        return "heads read by httptools alone (the compiled reader of simple heads was not built)"
    if answerer() is None:
        return "simple heads read by the compiled reader, the rest by httptools; every answer made in Python (AXON_NO_COMPILED_ANSWER=1)"
    return "simple heads read by the compiled reader, the rest by httptools; fixed answers and trusted files' remembered heads answered by it too"
