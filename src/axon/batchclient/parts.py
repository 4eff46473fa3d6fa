"""Each part of an answer checked against what was asked, before a byte of it is kept.

Two readers ask differently, so two checks, one vocabulary (:class:`MultipartError` naming the
part; :class:`~.errors.UnsafePathError` for a path that could never be written safely):

* :class:`AnyOrder` (``axon fetch``, which writes each part under the name it carries): a part
  names its file (``Content-Location``) and its length (``Content-Length``); the name is safe in
  shape and one of the paths asked and not yet received, in whatever order they come.
* :class:`InOrder` (``axon://``, which hands part ``k`` to whoever asked for item ``k``): part
  ``k`` names item ``k``'s path, and a slice's ``Content-Range`` is the range asked
  (:func:`check_slice`).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Sequence

from ..http.multipart_parser import ContentRange, MultipartError, Part, PartStart
from .paths import check_path_shape
from .request import Item

__all__ = ["AnyOrder", "InOrder", "check_slice", "item_path"]


def item_path(item: Item) -> str:
    return item if isinstance(item, str) else item["path"]


class AnyOrder:
    """The paths asked (repeats allowed), each taken once by the part that carries it."""

    def __init__(self, paths: Iterable[str]) -> None:
        self._due = Counter(paths)

    def admit(self, start: PartStart | Part, path: str | None, content_range: ContentRange | None) -> str:
        """The path part ``start`` carries (``path``, as read from it), taken from those due;
        raises if the part may not be kept."""
        if path is None:
            raise MultipartError("no Content-Location: cannot tell which file it is", part_index=start.index)
        if start.content_length is None:
            raise MultipartError("no Content-Length: its size cannot be verified", part_index=start.index, path=path)
        check_path_shape(path)  # refuse a hostile name before anything else is said of it
        if self._due[path] <= 0:
            raise MultipartError("not requested (or came twice)", part_index=start.index, path=path)
        self._due[path] -= 1
        return path

    def take(self, path: str) -> None:
        """Count ``path`` as received already (a resumed download's files); ValueError if it is not due."""
        if self._due[path] <= 0:
            raise ValueError(f"{path!r} is not in this batch")
        self._due[path] -= 1

    def finish(self) -> None:
        """The answer ended: every path asked must have come."""
        missing = sorted(self._due.elements())
        if missing:
            raise MultipartError(f"the server did not send {len(missing)} requested file(s): {missing[:5]}")


class InOrder:
    """The items asked (paths or slices), answered one part each, in the order asked."""

    __slots__ = ("items", "paths", "started")

    def __init__(self, items: Sequence[Item]) -> None:
        self.items = items
        self.paths = [item_path(item) for item in items]
        self.started = 0

    def admit(self, start: PartStart | Part, named: str | None, content_range: ContentRange | None) -> int:
        """The position, in the items asked, of the part ``start`` that names ``named`` with
        ``content_range`` (as read from it)."""
        index = start.index
        k = self.started
        if k >= len(self.items):
            raise MultipartError(f"more parts than the {len(self.items)} items asked", part_index=index)
        path = self.paths[k]
        if named != path:
            raise MultipartError(f"Content-Location names {named!r}, not {path!r}", part_index=index, path=path)
        why = check_slice(self.items[k], content_range)
        if why is not None:
            raise MultipartError(why, part_index=index, path=path)
        self.started = k + 1
        return k

    def finish(self) -> None:
        """The answer ended: every item asked must have come."""
        if self.started != len(self.items):
            raise MultipartError(f"the answer holds {self.started} parts for the {len(self.items)} items asked")


def check_slice(item: Item, content_range: ContentRange | None) -> str | None:
    """Why a part's Content-Range does not answer ``item``, or None if it does.

    A whole file comes without one. A slice comes with one that starts where asked (a suffix:
    ends at the file's end) and spans what was asked, cut at the end of the file.
    """
    if isinstance(item, str):
        return None if content_range is None else "a whole file came with a Content-Range"
    if content_range is None or content_range.complete_length is None:
        return "a slice came without a Content-Range naming the file's size"
    size = content_range.complete_length
    offset, length = item["offset"], item.get("length")
    if offset < 0:
        want_first, want_span = max(size + offset, 0), min(-offset, size)
    else:
        want_first = offset
        want_span = size - offset if length is None else min(length, size - offset)
    if (content_range.first, content_range.span) != (want_first, want_span):
        got = f"bytes {content_range.first}-{content_range.last}/{size}"
        return f"asked offset {offset}, length {length}; the part holds {got}"
    return None
