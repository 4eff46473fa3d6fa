"""Slices of files inside a batch: the items a ``POST /api/stream-files`` names, checked, then
resolved against each file's size.

An item is a path (the whole file) or ``{"path": "b.parquet", "offset": 1000, "length": 64}``.
The semantics are HTTP Range's, so that a client maps its byte ranges onto items one to one: a
negative ``offset`` is a suffix (``-8``: the last 8 bytes, the whole file when it is shorter), a
missing ``length`` runs to the end, a slice running past the end is clamped, and a slice that
starts at or past the end (or any slice of an empty file) cannot be satisfied: a 416 naming the
paths, decided with the rest of the plan, before the first byte.

Pure: sizes come in, spans and errors come out; the planner opens the files.
"""

from __future__ import annotations

from typing import Any, NamedTuple

from ..errors import BadRequest, HTTPError
from ..http.ranges import Span


class Slice(NamedTuple):
    offset: int  # >= 0: from the start; < 0: the last -offset bytes
    length: int | None  # None: to the end of the file


_KEYS = frozenset({"path", "offset", "length"})
_SHAPE = '{"path": "...", "offset": int, "length": int >= 1 (optional)}'


def parse_items(items: list[Any]) -> tuple[list[str], list[Slice | None] | None]:
    """The paths a POST's ``files`` list names, and their slices (None for a whole file; the
    list itself is None when no item is a slice). One 400 names every malformed item."""
    paths: list[str] = []
    slices: list[Slice | None] = []
    bad: list[tuple[str, str]] = []  # (path or "", what is wrong)
    for item in items:
        if isinstance(item, str):
            paths.append(item)
            slices.append(None)
        elif isinstance(item, dict):
            path, problem, sliced = _check(item)
            if problem:
                bad.append((path, problem))
            paths.append(path)
            slices.append(sliced)
        else:
            raise BadRequest(f'POST a JSON object {{"files": [...]}} whose items are paths or {_SHAPE}', code="bad_json")
    if bad:
        raise _bad_slices(bad)
    return paths, (slices if any(slices) else None)


def _check(item: dict) -> tuple[str, str, Slice | None]:
    """(path, what is wrong or "", the slice)."""
    path = item.get("path")
    if not isinstance(path, str):
        return "", f"a slice names its file as a string: {_SHAPE}", None
    extra = sorted(set(item) - _KEYS)
    if extra:
        return path, f"unknown keys {', '.join(map(repr, extra))} in a slice: {_SHAPE}", None
    offset, length = item.get("offset"), item.get("length")
    if not _integer(offset):
        return path, "a slice's offset is an integer (negative: from the end)", None
    if "length" in item:
        if not _integer(length) or length < 1:
            return path, "a slice's length is an integer of at least 1", None
        if offset < 0:
            return path, "a slice with a negative offset runs to the end: it takes no length", None
    return path, "", Slice(offset, length)


def _integer(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)  # JSON true is no number


def _bad_slices(bad: list[tuple[str, str]]) -> BadRequest:
    paths = [p for p, _ in bad if p]
    details = [{"path": p, "status": 400, "code": "bad_slice", "message": m} for p, m in bad]
    first = bad[0]
    message = f"{first[1]} ({first[0]!r})" if len(bad) == 1 else f"{len(bad)} items are not valid slices"
    return BadRequest(message, code="bad_slice", paths=paths, details=details)


def resolve(sliced: Slice, size: int) -> Span | None:
    """The bytes ``[start, stop)`` of a file of ``size`` bytes the slice names, clamped to the
    file; None when it cannot be satisfied."""
    offset, length = sliced
    if size == 0:
        return None
    if offset < 0:
        return max(0, size + offset), size
    if offset >= size:
        return None
    return offset, size if length is None else min(size, offset + length)


def resolve_all(paths: list[str], sizes: list[int], slices: list[Slice | None]) -> list[Span | None]:
    """Each item's span (None: the whole file, framed as today), or one 416 naming every path
    whose slice cannot be satisfied, with its size."""
    spans: list[Span | None] = []
    failed: dict[str, int] = {}
    for path, size, sliced in zip(paths, sizes, slices):
        span = None if sliced is None else resolve(sliced, size)
        if sliced is not None and span is None:
            failed[path] = size
        spans.append(span)
    if failed:
        details = [
            {"path": p, "status": 416, "code": "range_not_satisfiable", "size": size,
             "message": f"the slice starts at or past the end of the file ({size} bytes)"}
            for p, size in failed.items()
        ]
        raise HTTPError(
            f"{len(failed)} of the requested slices start at or past the end of their file",
            status=416, code="range_not_satisfiable", paths=list(failed), details=details,
        )
    return spans
