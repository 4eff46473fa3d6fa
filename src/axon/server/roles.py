"""What a connection and its parts use of the worker that accepted it: :class:`WorkerView`.

The worker makes the connections (:mod:`.protocol`), and each connection its writer and its
request cycle; all of them read the worker's tables, clocks and ``Date`` line. They name it by
this Protocol rather than by importing :mod:`.worker`, so that the server's modules import one
way only (no import circle: ``pyproject.toml``'s ``[tool.importlinter]``). Annotations only.
"""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING, Any, Protocol

if TYPE_CHECKING:
    from ..limits import Limits
    from .config import ServerConfig
    from .outbox import Outbox
    from ..pace import Pace
    from .served import ServedApp
    from .shortcuts import Shortcuts
    from .simplehead import SimpleHeadParser, TrustedAnswer


class WorkerView(Protocol):
    """The worker (:class:`~.worker.Worker`) as its connections see it."""

    app: ServedApp
    config: ServerConfig
    limits: Limits
    loop: asyncio.AbstractEventLoop
    #: The open connections (:class:`~.protocol.HTTPProtocol`).
    connections: set[Any]
    #: What connections may send without calling the App (fixed answers, remembered heads).
    shortcuts: Shortcuts
    #: The compiled reader of simple request heads (:mod:`.simplehead`), or None: llhttp alone.
    simple_head: SimpleHeadParser | None
    #: The compiled answer (:func:`.simplehead.answerer`), or None, and the tables it reads.
    answer: TrustedAnswer | None
    answer_tables: tuple
    #: The 503 a connection over the limit gets, whole.
    full_response: bytes
    use_sendfile: bool
    #: Whole answers held to the end of the loop's turn (:mod:`.outbox`).
    outbox: Outbox
    #: The loop turn's budget of batch work (:mod:`axon.pace`), shared with the App's plans.
    pace: Pace
    #: ``Date`` and ``Server`` header lines, rebuilt at each second boundary.
    date_line: bytes
    #: Deadlines for a phase starting now (:data:`.state.CLOCKS` names them), rebuilt by each sweep.
    head_deadline: float
    idle_deadline: float
    write_deadline: float

    def sync_files(self) -> None:
        """A request begins: the shared open files take in the changes the kernel told of."""

    def cached_files(self, paths: list[str]) -> list[Any]:
        """For each of ``paths``, the shared file (its ``version`` token and ``data``) when its
        bytes are current (nothing held), or None."""
