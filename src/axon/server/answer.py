"""What the writer sends: :class:`Prepared`, an answer whose head is already framed.

Every answer the server writes is one of these, whoever made it: the App's response
(:func:`prepare`), a fixed answer (the health probe) and a remembered head with its files opened
anew (:mod:`.shortcuts`). The head is the status line and the header lines, without the lines
that depend on the moment and the connection (``Date``, ``Server``, ``Connection``) and without
the blank line: :meth:`~.writer.ResponseWriter.send` adds them, the same way for every answer.

Whether an answer is written at once or by the waiting path is decided by one function,
:func:`fits_one_write`, which the writer and the table of remembered heads both call.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from .wire import UnsafeHeader, frame_head

if TYPE_CHECKING:
    from ..response import Response

#: A body already in memory (small files the open-file cache holds, a handler's bytes) of up to
#: this size leaves in one ``writev``; the transport keeps references to what the socket did not
#: take, so a slow reader of one costs little more than the cached bytes it shares.
MEMORY_BODY_MAX = 256 * 1024


class BadResponse(Exception):
    """A handler's response cannot be encoded (unsafe or non-latin-1 header); nothing was sent."""


class Prepared:
    """An answer whose head is framed: ``head`` (status line and headers, see the module), the
    ``body``'s segments (bytes and ``(fd, offset, count)`` slices) of ``length`` bytes in all, and
    the ``files`` to close once it is written; ``read``, the bytes of file slices in the body when
    its maker knows them (0: the body is bytes only), else None. ``whole``: for an answer sent again and again with
    a body of bytes (a fixed answer), what completed its head last (the ``Date`` line and the
    exchange's ``keep_alive`` and ``http11``: what :meth:`~.writer.ResponseWriter._tail` reads)
    and the whole answer made with it, made again when one of them changes; None for any other."""

    __slots__ = ("head", "body", "length", "files", "read", "whole")

    def __init__(
        self, head: bytes, body: list, length: int, files: Any = (), reusable: bool = False, read: int | None = None,
    ) -> None:
        self.head = head
        self.body = body
        self.length = length
        self.files = files
        self.read = read
        self.whole: tuple[bytes | None, bool | None, bool | None, bytes] | None = (
            (None, None, None, b"") if reusable else None
        )

    def without_body(self) -> Prepared:
        """The same answer to a HEAD: its head (the same ``Content-Length``), no body."""
        return Prepared(self.head, [], 0, reusable=self.whole is not None, read=0)


def prepare(response: Response) -> Prepared:
    """``response`` (of the App; not a stream) as a prepared answer; :class:`BadResponse` if its
    head cannot be encoded (CR, LF or NUL in a header, text that is not latin-1)."""
    try:
        head = frame_head(response.status, response.reason, response.headers)
    except (UnsafeHeader, UnicodeError, TypeError, ValueError) as exc:
        raise BadResponse(str(exc)) from exc
    return Prepared(head, response.body, response.length, response.files)  # type: ignore[arg-type]


def fits_one_write(length: int, read: int, chunk: int) -> bool:
    """Whether a body of ``length`` bytes, ``read`` of them to read from files, is written at once
    (:meth:`~.writer.ResponseWriter.send`): at most one ``chunk`` to read, and the rest in memory
    already (at most ``MEMORY_BODY_MAX``): fewer system calls than the waiting path, nothing to
    wait for while the socket takes one chunk, no more held for a slow reader."""
    return length <= chunk or (read <= chunk and length - read <= MEMORY_BODY_MAX)


def to_read(body: list) -> int:
    """The bytes of ``body`` that are file slices, still to be read."""
    read = 0
    for seg in body:
        if type(seg) is not bytes:
            read += seg[2]
    return read
