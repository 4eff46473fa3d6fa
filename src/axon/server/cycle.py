"""Answering a connection's requests, one at a time: :class:`RequestCycle`.

The connection (:mod:`.protocol`) reads and parses; once a request is complete and its turn has
come, it hands the :class:`~.exchange.Exchange` here. The cycle runs the App and gives the
response to the writer, and tells the connection when the answer is done (:meth:`HTTPProtocol.answered`).
As uvicorn keeps its ``RequestResponseCycle`` apart from the connection, this keeps what runs an
answer apart from what reads requests; unlike uvicorn's, one cycle serves the whole connection
(the requests on it are answered in order, never two at once), so a request costs no object.

The hot path costs no coroutine, no task and no loop iteration: a route that is a plain function
that never blocks (Axon's own endpoints, any route with ``blocking=False``) is answered by the
App's ``handle_on_loop`` here, and a response that fits one write is written before this
returns. The App decides what runs inline: ``handle_on_loop`` gives the response, or a coroutine
that makes it. Only what must wait becomes a task: an ``async`` handler (always, as asyncio code
expects), a blocking one (in the App's thread pool), a plain one that found its work would block
after all (a zip whose CRC-32s must be read: finished in the pool), a response that needs several
writes, a full socket or ``sendfile``, a stream.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable
from types import CoroutineType
from typing import TYPE_CHECKING, Any, Protocol

from ..response import Response, error_response
from .eager import resume

if TYPE_CHECKING:
    from .exchange import Exchange
    from .roles import WorkerView
    from .writer import ResponseWriter

log = logging.getLogger("axon.server")


class Deferred:
    """What :attr:`RequestCycle.task` holds while a request waits for a turn without a task."""

    __slots__ = ()


DEFERRED = Deferred()


class Connection(Protocol):
    """What the cycle uses of its connection (:class:`~.protocol.HTTPProtocol`, which imports
    this module: named by what it offers, so that no import goes back)."""

    worker: WorkerView
    writer: ResponseWriter | None

    def answered(self, keep_alive: bool, later: bool = False) -> None: ...

    def crashed(self, exc: BaseException) -> None: ...

    def abort(self) -> None: ...


class RequestCycle:
    """Runs the App for one connection's requests and writes each answer with its writer."""

    __slots__ = (
        "conn", "loop", "task", "_answering", "_handle", "_shortcuts", "_respond_now", "_respond", "_pace", "_go_on",
    )

    def __init__(self, conn: Connection) -> None:
        self.conn = conn
        worker = conn.worker
        self.loop = worker.loop
        #: The task answering the current request, while one must wait (``DEFERRED``: the request
        #: waits for a turn, without a task); else None.
        self.task: asyncio.Task | Deferred | None = None
        self._answering: Exchange | None = None  # the request the task answers
        self._handle = worker.app.handle_on_loop
        self._shortcuts = worker.shortcuts
        self._pace = worker.pace
        writer = conn.writer
        self._respond_now = writer.respond_now  # type: ignore[union-attr]
        self._respond = writer.respond  # type: ignore[union-attr]
        self._go_on = self._turn_came  # one bound method, given to the pace for each deferral

    def run(self, ex: Exchange) -> None:
        """Answer ``ex``: here if the handler never blocks and the answer fits one write, else in
        a task; in a later turn if this one has run its budget or others wait for one
        (:mod:`axon.pace`). The connection learns the end through :meth:`HTTPProtocol.answered`."""
        if ex.request is None:
            self._answer(ex, error_response(ex.refusal))  # type: ignore[arg-type]
        elif self._pace.must_wait():
            self._answering = ex
            self.task = DEFERRED
            self._pace.defer(self._go_on)
        else:
            self._run(ex)

    def _turn_came(self) -> None:
        """The pace's turn came for the deferred request: answered as :meth:`run` would have,
        and what waited behind it on the connection goes on after it."""
        ex = self._answering
        self.task = self._answering = None
        self._run(ex, later=True)  # type: ignore[arg-type]

    def _run(self, ex: Exchange, later: bool = False) -> None:
        try:
            answer = self._handle(ex.request)
        except BaseException as exc:  # noqa: BLE001 - the App answers errors itself: a bug
            self.conn.crashed(exc)
        else:
            if type(answer) is CoroutineType:  # it must wait: in a task
                self._start(self._respond_later(ex, answer), ex)
            else:
                self._answer(ex, answer, later)  # the Response

    def _remember(self, ex: Exchange, response: Response) -> None:
        """Keep ``response``'s head for the shortcuts, if it may be answered again past the App."""
        if response.repeatable and self._shortcuts.remembering and ex.request.method == "GET":  # type: ignore[union-attr]
            key = self._shortcuts.key(ex)
            if key is not None:
                try:
                    self._shortcuts.remembered.remember(key, response, ex.request.path, ex.request.query_string)  # type: ignore[union-attr]
                except Exception:  # noqa: BLE001 - a bug of ours, or a source's odd File: answer anyway
                    log.exception("remembering a response's head failed")

    def _answer(self, ex: Exchange, response: Response, later: bool = False) -> None:
        self._remember(ex, response)
        if self._respond_now(response, ex):
            self.conn.answered(ex.keep_alive, later)
            return
        coro = self._respond(response, ex, tried=True)
        try:
            awaited = coro.send(None)
        except StopIteration as stop:
            self.conn.answered(stop.value, later)
        except BaseException as exc:  # noqa: BLE001 - a bug of ours: cut this connection only
            self.conn.crashed(exc)
        else:
            self._start(resume(coro, awaited), ex)

    def _start(self, coro: Any, ex: Exchange) -> None:
        self._answering = ex
        task = self.task = self.loop.create_task(coro)
        task.add_done_callback(self._done)

    def _done(self, task: asyncio.Task) -> None:
        self.task = self._answering = None
        conn = self.conn
        if task.cancelled():
            conn.abort()
            return
        exc = task.exception()
        if exc is not None:
            conn.crashed(exc)
            return
        conn.answered(task.result(), later=True)

    async def _respond_later(self, ex: Exchange, answer: Awaitable[Response]) -> bool:
        response = await answer
        return await self._respond(response, ex)

    def last(self) -> None:
        """The answer in flight is the connection's last (the worker stops): it says so."""
        if self._answering is not None:
            self._answering.keep_alive = False

    def cancel(self) -> None:
        """The answer in flight will not be needed (the connection is cut, or lost): stop it."""
        task = self.task
        if task is DEFERRED:
            self._pace.drop(self._go_on)
            self.task = self._answering = None
        elif task is not None:
            task.cancel()
