"""Objects the cycle collector need not walk: :func:`untracked` takes one out of its walk.

A full collection of CPython's cycle collector walks every tracked object, and what a warm file
leaves in a worker (the open-file cache's entry, its trusted version and that version's
signature; the server's remembered head and the answer it keeps on the version) are tracked
objects for as long as the file stays warm: a pool of 10,000 files made a full collection stall
the event loop 55-66 ms, far past the 5 ms its lag may reach (docs/design-notes.md, "Warm
files out of the collector's walk"). These objects die by reference count alone, never in a
cycle (``tests/test_untracked.py`` holds a server's memory flat over rounds of new versions and
evictions), so the collector has nothing to find in them: each is made untracked once, when it
is kept.

What is untracked must never join a cycle: one would never be freed. Only objects whose
every reference points down (to bytes, numbers, strings, tuples of those, other such objects)
are given here.

``PyObject_GC_UnTrack`` is CPython's own call (through :mod:`ctypes`, the standard library's
way to call it from Python); on another interpreter, or without ctypes, an object stays tracked
and only the walk's cost is lost.
"""

from __future__ import annotations

import gc
from typing import TypeVar

T = TypeVar("T")


def _untrack_call():  # noqa: ANN202 - the C function, or None
    try:
        import ctypes

        call = ctypes.pythonapi.PyObject_GC_UnTrack
    except (ImportError, AttributeError):  # no ctypes, or not CPython
        return None
    call.argtypes = [ctypes.py_object]
    call.restype = None
    return call


_untrack = _untrack_call()


def untracked(obj: T) -> T:
    """``obj``, no longer walked by the cycle collector (if it was: an object of a type the
    collector does not know stays as it is)."""
    if _untrack is not None and gc.is_tracked(obj):
        _untrack(obj)
    return obj


#: What a tuple may hold for :func:`untracked_tuple`: values no cycle can pass through.
ATOMIC = frozenset({str, bytes, int, float, bool, type(None)})


def untracked_tuple(value: tuple) -> tuple:
    """``value``, a tuple of atomic values and of such tuples, out of the collector's walk with
    every tuple in it. The collector lets such a tuple go by itself, but a level a collection,
    walking it each time: a value kept long (a file version's headers, its kept bytes) would
    reach the old generation first. A tuple holding anything else is left as it is."""
    if _untrack is None or not _atomic(value):
        return value
    _untrack_tuples(value)
    return value


def _atomic(value: tuple) -> bool:
    return all(type(item) in ATOMIC or (type(item) is tuple and _atomic(item)) for item in value)


def _untrack_tuples(value: tuple) -> None:
    for item in value:
        if type(item) is tuple:
            _untrack_tuples(item)
    untracked(value)
