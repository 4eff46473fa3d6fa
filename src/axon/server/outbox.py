"""Answers held to the end of the loop's turn: :class:`Outbox`.

An answer written whole at once (a fixed answer, a remembered head, a small response the App
planned) is not handed to its transport as soon as it is made: the connection's
:class:`~.writer.ResponseWriter` holds it, and the worker's outbox writes every connection's
held answers when the event loop has run the callbacks of the sockets it found readable (one
``call_soon`` a turn): many answers then leave back to back instead of one at a time.

Why: on loopback and in a VM, most of what a write costs the server is waking the client's
thread on the other core (an inter-processor interrupt). A client that reads its answer faster
than the server makes the next one sleeps again between two writes, and is woken for each; one
that is woken once while the writes follow each other is still awake for the next ones
(BENCHMARKS.md has the measurements). An answer waits at most for the turn's other requests to
be parsed and answered; a connection that is the only one busy waits one ``call_soon``.

Order on a connection is kept by one rule: whatever a writer writes by any other way (a stream,
``sendfile``, a ``100 Continue``, the end of the connection) comes after what it holds, which it
writes first (:meth:`~.writer.ResponseWriter.release`).
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any, Protocol

log = logging.getLogger("axon.server")


class Holder(Protocol):
    """What holds answers (a connection's :class:`~.writer.ResponseWriter`)."""

    transport: Any

    def release(self) -> None:
        """Hand what is held to the transport."""


class Outbox:
    """The writers holding answers in this turn of ``loop``, released when it ends."""

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self._loop = loop
        self._writers: list[Holder] = []
        self._flush = self.flush  # one bound method, not one a turn

    def hold(self, writer: Holder) -> None:
        """``writer`` holds an answer now (its first of this turn): release it when the turn ends."""
        if not self._writers:
            self._loop.call_soon(self._flush)
        self._writers.append(writer)

    def flush(self) -> None:
        """Write what every writer holds, in the order they took it."""
        writers, self._writers = self._writers, []
        for writer in writers:
            try:
                writer.release()
            except Exception:  # a bug of ours: that connection goes, the others are answered
                log.exception("a held answer could not be written; aborting the connection")
                writer.transport.abort()
