"""fsspec's byte ranges as the items of an Axon batch, and the checks on the parts that answer them.

fsspec asks for ``(path, start, end)`` with Python's slice semantics: ``None`` is an open end,
a negative value counts from the end of the file, and a range past the end is cut (or empty),
never an error. An Axon batch names a whole file as a string, or a slice as
``{"path", "offset", "length"}`` with HTTP Range semantics: a negative offset is a suffix (and
takes no length), a slice that starts at or past the end of the file is a 416 for the whole
batch. This module turns the first into the second without knowing the file's size where it can,
and says what to cut from the answer where the wire cannot express the range (a negative end).

Pure: no IO, plain values in and out.
"""

from __future__ import annotations

from typing import NamedTuple

from ..batchclient.parts import check_slice  # a part checked against the slice asked
from ..batchclient.request import Item

__all__ = ["EMPTY", "Item", "Slice", "check_slice", "plan"]


class Slice(NamedTuple):
    """What to ask for one range, and how to cut the answer down to it. A tuple: a ``cat`` makes
    one per file, and a frozen dataclass took three times as long to make.

    ``item`` goes into the batch's JSON list. ``cut_to`` trims the part's bytes afterwards: a
    negative value is relative to the part's end (which is the file's end, for the items that
    need it); a positive one is a position in the file, turned into one in the part by the
    part's first byte (its Content-Range).
    """

    item: Item
    cut_to: int | None = None

    def cut(self, data: bytes, first: int) -> bytes:
        if self.cut_to is None:
            return data
        if self.cut_to < 0:
            return data[: self.cut_to]
        return data[: max(0, self.cut_to - first)]


#: The range is empty whatever the file holds: answered without asking.
EMPTY = None


def plan(path: str, start: int | None, end: int | None, size: int | None = None) -> Slice | None:
    """The :class:`Slice` asking for ``file[start:end]``, or :data:`EMPTY`.

    With ``size`` known the range is resolved to absolute offsets (and may turn out empty);
    without it, a range whose emptiness depends on the size is asked as a slice the server can
    refuse with a 416, which names the sizes for :func:`plan` to be called again.
    """
    if size is not None:
        first = _position(0 if start is None else start, size)
        stop = size if end is None else _position(end, size)
        if stop <= first:
            return EMPTY
        if first == 0 and stop == size:
            return Slice(path)
        return Slice({"path": path, "offset": first, "length": stop - first})
    start = 0 if start is None else start
    if start >= 0:
        if end is None:
            return Slice(path if start == 0 else {"path": path, "offset": start})
        if end >= 0:
            if end <= start:
                return EMPTY
            return Slice({"path": path, "offset": start, "length": end - start})
        # To a point counted from the end: ask for the rest of the file, drop the last bytes.
        return Slice(path if start == 0 else {"path": path, "offset": start}, cut_to=end)
    # A suffix (negative start): the wire's own form, cut where the end says.
    if end is None:
        return Slice({"path": path, "offset": start})
    if end <= start or end == 0:
        return EMPTY  # both count from the end (or the end is the file's first byte)
    return Slice({"path": path, "offset": start}, cut_to=end)


def _position(value: int, size: int) -> int:
    """A Python slice bound resolved against ``size``: negatives from the end, clamped to the file."""
    if value < 0:
        value += size
    return min(max(value, 0), size)
