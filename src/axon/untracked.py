"""Objects the cycle collector need not walk: :func:`untracked` takes one out of its walk.

A collection of CPython's cycle collector walks every tracked object of its generations, and
what a warm file leaves in a worker (the open-file cache's entry, its trusted version and that
version's signature; the server's remembered head and the answer it keeps on the version; the
tuples of its headers) are tracked objects for as long as the file stays warm: with a pool of
ten thousand files a collection stalled the event loop far past the 5 ms its lag may reach
(docs/design-notes.md, "Warm files out of the collector's walk", with the figures). These objects die by
reference count alone, never in a cycle (``tests/test_untracked.py`` shows it on a real server
over rounds of new versions and evictions), so the collector has nothing to find in them: each
is made untracked once, when it is kept.

What is untracked must never join a cycle: one would never be freed. Only objects whose
references point to bytes, numbers, strings, tuples of those and other such objects are given
here, or to what outlives them and lets them go (an entry names its cache, which drops it from
its tables when it evicts it, and is closed or abandoned before it is dropped; a cache whose
entries may lead back to it otherwise keeps them walked: ``FileCache(walked=True)``).

Tuples: the collector lets a tuple of atomic values go by itself at its first collection, but
one that holds tuples only a level a collection, walking it each time; kept long (a file
version's headers), such a tuple reached the old generation first. So a kept tuple that holds
tuples is given here too, made of values known atomic where it is made (a call costs about as
much as making the tuple: a generic walk of its items would cost several times more).

``PyObject_GC_UnTrack`` is CPython's own call (through :mod:`ctypes`, the standard library's
way to call it from Python); on another interpreter, or without ctypes, an object stays tracked
and only the walk's cost is lost.
"""

from __future__ import annotations

import gc
import sys
from typing import TypeVar

T = TypeVar("T")


def _untrack_call():  # noqa: ANN202 - the C function, or None
    if sys.implementation.name != "cpython":  # the call is CPython's own
        return None
    try:
        import ctypes

        call = ctypes.pythonapi.PyObject_GC_UnTrack
    except (ImportError, AttributeError):  # no ctypes
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

