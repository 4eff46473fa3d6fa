"""One batch answer read as it arrives: its bytes counted against ``Content-Length``, parsed by
the streaming multipart parser, and each part admitted by a check of what was asked
(:mod:`.parts`) before the caller sees a byte of it. Sans-IO: chunks in, events out.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any, Generic, Protocol, TypeVar

from ..http.multipart_parser import (
    ContentRange,
    Event,
    MultipartError,
    MultipartParser,
    Part,
    PartStart,
    boundary_from_content_type,
)
from .errors import FetchError

__all__ = ["BatchReader", "PartCheck"]

Key = TypeVar("Key", covariant=True)


class PartCheck(Protocol[Key]):
    """:class:`~.parts.AnyOrder` or :class:`~.parts.InOrder`: what a part answers (its head, a
    :class:`PartStart` or a whole :class:`Part`: both have ``index`` and ``content_length``), or
    a MultipartError; ``finish`` once the answer ended."""

    def admit(self, start: PartStart | Part, path: str | None, content_range: ContentRange | None) -> Key: ...

    def finish(self) -> None: ...


class BatchReader(Generic[Key]):
    """``feed`` the body's chunks, then ``close``. Each event comes with the key ``check`` gave
    its part when it started (:class:`PartStart` and :class:`Part`; None for the others): the
    path asked (:class:`~.parts.AnyOrder`) or the item's position (:class:`~.parts.InOrder`).

    ``content_type`` that is not ``multipart/*`` with a boundary is a :class:`FetchError`.
    """

    def __init__(
        self,
        content_type: str | None,
        check: PartCheck[Key],
        *,
        content_length: int | None = None,
        parser: dict[str, Any] | None = None,
        body_bytes: int = 0,
        **options: Any,
    ) -> None:
        try:
            boundary = boundary_from_content_type(content_type or "")
        except MultipartError as exc:
            raise FetchError(f"the server did not answer with a multipart body: {exc}") from exc
        self.boundary = boundary
        # ``parser``: a snapshot to go on from (a resumed download, ``body_bytes`` into the body).
        limits = {k: v for k, v in options.items() if k != "whole_parts"}
        self.parser = (MultipartParser(boundary, **options) if parser is None
                       else MultipartParser.restore(boundary, parser, **limits))
        self.check = check
        self.content_length = content_length
        self.body_bytes = body_bytes

    def feed(self, chunk: bytes) -> Iterator[tuple[Key | None, Event]]:
        """The events of ``chunk``, each part admitted only as its turn comes: a part refused
        stops the stream after the parts before it were handled, not before."""
        self.body_bytes += len(chunk)
        if self.content_length is not None and self.body_bytes > self.content_length:
            raise FetchError(f"the response body is longer than its Content-Length {self.content_length}")
        admit = self.check.admit
        for event in self.parser.feed(chunk):
            kind = type(event)
            if kind is Part or kind is PartStart:  # a part's path and range were read by the parser
                yield admit(event, event.path, event.content_range), event  # type: ignore[arg-type, union-attr]
            else:
                yield None, event

    def close(self) -> None:
        """The body ended: the stream must be closed properly, as long as announced, and every
        item asked must have come."""
        self.parser.close()
        if self.content_length is not None and self.body_bytes != self.content_length:
            raise FetchError(f"the response body ended after {self.body_bytes} of its {self.content_length} bytes")
        self.check.finish()
