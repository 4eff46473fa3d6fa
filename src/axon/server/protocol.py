"""One HTTP/1.1 connection's life: :class:`HTTPProtocol`, an ``asyncio.Protocol`` around the
``httptools`` (llhttp) parser.

Five objects serve a connection. This one owns the transport, its state (one table of states,
clocks and transitions, :mod:`.state`, which every change goes through: ``_to``), answering in
order and the closing; reading requests is its base class, :class:`~.reading.RequestReading`
(the parser's callbacks); each request is an :class:`~.exchange.Exchange`; a
:class:`~.cycle.RequestCycle` runs the App for it; a :class:`~.writer.ResponseWriter` writes the
answers.

Requests are answered one at a time, in order (pipelining). While an answer is pending in a task
the connection does not parse further: what arrives is kept (one read at most) and reading
pauses until the answer is done. After a refusal, or the last answer a connection owes, nothing
more is parsed: the answer goes out, the write side is shut, and what the client still sends is
read and dropped for a moment (a lingering close, so the client sees the answer rather than a
reset). Deadlines are checked by the worker's once-a-second sweep.
"""

from __future__ import annotations

import asyncio
import logging
from collections import deque
from typing import TYPE_CHECKING, Any

from httptools import HttpRequestParser

from ..errors import ClientGone, HTTPError
from ..runtime import checked_from
from .cycle import RequestCycle
from .exchange import Exchange
from .flow import FlowControl
from .reading import RequestReading
from .state import (
    ANSWER, ANSWERING, BODY, CLOCKS, CLOSED, CLOSING, HEAD, IDLE, LAST, LAST_OF, LAST_STALLED, LINGER, NEW, READING,
    STALLED, TRANSITIONS, BadTransition, State,
)
from .wire import CONTINUE
from .writer import ResponseWriter

if TYPE_CHECKING:
    from .roles import WorkerView

log = logging.getLogger("axon.server")


#: Seconds a lingering close reads (and drops) what the client still sends.
LINGER_SECONDS = 2.0
LINGER_BYTES = 8 * 1024 * 1024


class HTTPProtocol(RequestReading, asyncio.Protocol):
    # Slots: a connection is read on every request, and past some 30 attributes an instance
    # dict's keys stop being shared and each ``self.x`` costs more (CPython 3.11).
    __slots__ = (
        "worker", "app", "loop", "limits", "parser", "_simple_head", "_answer", "_answer_tables", "_checked_from",
        "_between", "_shortcuts", "_get_fixed", "_remembered", "_open", "_record_sent", "_sync_files",
        "_cached_files", "state", "deadline", "_transport", "flow", "writer", "cycle", "_exchange", "_refusal",
        "_pipeline", "_stash", "_eof", "_linger_bytes", "_closing", "peer",
    )

    def __init__(self, worker: WorkerView) -> None:
        self.worker = worker
        self.app = worker.app
        self.loop = worker.loop
        self.limits = worker.limits
        self.parser = HttpRequestParser(self)
        self._simple_head = worker.simple_head
        self._answer = worker.answer
        self._answer_tables = worker.answer_tables
        self._checked_from = checked_from(self.limits)
        self._between = True  # whether llhttp may be between requests (see _feed)
        self._shortcuts = shortcuts = worker.shortcuts
        self._get_fixed = shortcuts.get_fixed
        self._remembered = shortcuts.remembered
        self._open = worker.app.store.open
        self._record_sent = worker.app.record_sent
        self._sync_files = worker.sync_files
        self._cached_files = worker.cached_files
        self.state = NEW
        self.peer: str | None = None  # the client's address, for the records (connection_made)
        self.deadline: float | None = None  # when the current state's clock runs out (see _to)
        self._transport: Any = None
        self.flow: FlowControl | None = None
        self.writer: ResponseWriter | None = None
        self.cycle: RequestCycle | None = None
        self._exchange: Exchange | None = None  # the request being read
        self._refusal: HTTPError | None = None  # why a parser callback stopped the parser
        # Requests read and not yet answered, bytes that arrived while one was answered in a task.
        self._pipeline: deque[Exchange] = deque()
        self._stash: list[bytes] = []
        # The client shut its side: what arrived is answered, then the connection closes (at
        # once: a lingering close would wait for bytes that cannot come).
        self._eof = False
        self._linger_bytes = 0
        self._closing: asyncio.Task | None = None  # waits for the last answers to leave (_close)

    @property
    def transport(self) -> Any:
        return self._transport

    @transport.setter
    def transport(self, transport: Any) -> None:
        # Replaced (a wrapper around it): the writer writes through the same one.
        self._transport = transport
        if self.writer is not None:
            self.writer.transport = self.flow.transport = transport  # type: ignore[union-attr]

    @property
    def _busy(self) -> bool:
        """Whether an answer is pending (a task: seen from outside the connection's own calls,
        an answer made at once is never pending), and so nothing more is parsed until it is done."""
        return self.state in ANSWERING

    def _last(self) -> None:
        """A reason to close came: nothing more is read, what is queued is answered, then the
        connection closes (:data:`.state.LAST_OF`)."""
        if self.state not in CLOSING:
            self._to(LAST_OF.get(self.state, LAST))

    def _to(self, state: State) -> None:
        """Go to ``state`` and start its clock (:mod:`.state`): the one way the state changes."""
        if state not in TRANSITIONS[self.state]:
            raise BadTransition(f"{self.state.name} -> {state.name}")
        self.state = state
        clock = CLOCKS[state]
        if clock is None:
            self.deadline = None
        elif clock == "linger":
            self.deadline = self.loop.time() + LINGER_SECONDS
        else:
            self.deadline = getattr(self.worker, clock)

    # -- asyncio.Protocol ---------------------------------------------------------------------

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self._transport = transport
        worker = self.worker
        if len(worker.connections) >= worker.config.max_connections:
            self._to(CLOSED)
            transport.write(worker.full_response)  # type: ignore[attr-defined]
            transport.close()
            return
        worker.connections.add(self)
        # The client's address for the access log, asked once a connection (a system call), and
        # only while someone reads the records.
        peer = transport.get_extra_info("peername") if self.app.records_responses() else None
        self.peer = peer[0] if isinstance(peer, tuple) else None
        sock_fd = -1
        if transport.get_extra_info("sslcontext") is None:
            # Pause on anything unsent: see writer.py. TLS keeps the default marks.
            transport.set_write_buffer_limits(0, 0)  # type: ignore[attr-defined]
            if worker.use_sendfile:
                sock = transport.get_extra_info("socket")
                if sock is not None:
                    sock_fd = sock.fileno()
        self.flow = flow = FlowControl(self, transport, worker.loop, sock_fd)
        self.writer = ResponseWriter(transport, flow, worker, sock_fd)
        self.cycle = RequestCycle(self)
        self._to(NEW)  # the first request must come as fast as a head

    def connection_lost(self, exc: Exception | None) -> None:
        if self.state is not CLOSED:
            self._to(CLOSED)
        self.parser = None  # type: ignore[assignment]  # no cycle left for the collector
        self.worker.connections.discard(self)
        self._pipeline.clear()
        self._stash.clear()
        if self.cycle is not None:
            self.cycle.cancel()  # nobody to answer: a request waiting for its turn leaves the line
        if self.flow is not None:
            self.flow.connection_lost()

    def data_received(self, data: bytes) -> None:
        state = self.state
        if state in READING:
            answer = self._answer
            if answer is not None and self._between and self._exchange is None and not self._pipeline:
                # One request, answered whole from the worker's tables in one compiled call
                # (simplehead.answerer), or read by it and handed on as parse() would.
                try:
                    found = answer(data, self._answer_tables, self.writer, self.flow, self.peer)
                except Exception:  # a bug of ours: this connection goes, the others are answered
                    log.exception("a compiled answer failed; aborting the connection")
                    self._abort()
                    return
                if found is True:
                    self._to(IDLE)  # answered; the next request's first bytes start the header clock
                    return
                self._feed(data, found)
            else:
                self._feed(data)
            if self._pipeline:
                self._advance()
        elif state in CLOSING:
            self._linger_bytes += len(data)
            if state is LINGER and self._linger_bytes > LINGER_BYTES:
                self._transport.close()
        else:  # ANSWER, STALLED: an answer pending in a task
            self._stash.append(data)
            self.flow.pause_reading()  # type: ignore[union-attr]

    def eof_received(self) -> bool | None:
        self._eof = True
        if self.writer is not None:
            self.writer.release()  # answers held to the turn's end go before the transport closes
        if self._busy or self._pipeline:
            return True  # half-closed: answer what was asked, then close
        return None

    def pause_writing(self) -> None:
        self.flow.pause_writing()  # type: ignore[union-attr]

    def resume_writing(self) -> None:
        self.flow.resume_writing()  # type: ignore[union-attr]

    # -- told by the flow control ---------------------------------------------------------------

    def stalled(self) -> None:
        """The writer waits for the client to take what was written: the write clock runs."""
        if self.state is ANSWER:
            self._to(STALLED)
        elif self.state is LAST:
            self._to(LAST_STALLED)

    def unstalled(self) -> None:
        if self.state is STALLED:
            self._to(ANSWER)
        elif self.state is LAST_STALLED:
            self._to(LAST)

    # -- answering, in order --------------------------------------------------------------------

    def _advance(self) -> None:
        """Answer queued requests in order until one must wait; then parse what waited."""
        pipeline = self._pipeline
        cycle = self.cycle
        while cycle.task is None:  # type: ignore[union-attr]
            if pipeline:
                self._to(LAST if self.state is LAST else ANSWER)
                cycle.run(pipeline.popleft())  # type: ignore[union-attr]
            elif self._stash and self.state not in CLOSING:
                data = b"".join(self._stash)
                self._stash.clear()
                self._feed(data)
            else:
                break
        if cycle.task is not None or self.state is CLOSED:  # type: ignore[union-attr]
            return
        if self.state in CLOSING or self._eof:
            if self.state is not LINGER:
                self._close()
            return
        ex = self._exchange
        if ex is not None:  # the next request is arriving
            if self.state is not HEAD and self.state is not BODY:
                self._to(HEAD if ex.in_head else BODY)
            if ex.continue_pending and not ex.in_head:
                ex.continue_pending = False
                self.writer.release()  # type: ignore[union-attr]
                self._transport.write(CONTINUE)
        else:
            self._to(IDLE)
        flow = self.flow
        if flow.read_paused:  # type: ignore[union-attr]
            flow.resume_reading()  # type: ignore[union-attr]

    # -- told by the request cycle --------------------------------------------------------------

    def answered(self, keep_alive: bool, later: bool = False) -> None:
        """An answer is done; ``later``: in a task, so what waited behind it goes on now."""
        if not keep_alive:
            self._last()
            self._pipeline.clear()
        if later:
            self._advance()

    def crashed(self, exc: BaseException) -> None:
        log.error("connection failed; closing it", exc_info=exc)
        self._abort()

    # -- closing --------------------------------------------------------------------------------

    def _close(self) -> None:
        """Close after what was written; first read and drop what the client still sends."""
        self._pipeline.clear()
        self._stash.clear()
        transport = self._transport
        if self.state is CLOSED:
            return
        if transport.is_closing():
            self._to(CLOSED)
            return
        self.writer.release()  # type: ignore[union-attr]  # the last answers, held to the turn's end
        if not self._eof and transport.can_write_eof():
            if self.flow.paused:  # type: ignore[union-attr]
                # Part of the last answers is still in the transport: the lingering close's
                # clock would cut it off. It leaves first, under the write clock as any answer.
                self._last()
                self._closing = self.loop.create_task(self._close_once_sent())
                return
            transport.write_eof()
            self._to(LINGER)
            self.flow.resume_reading()  # type: ignore[union-attr]
        else:
            self._to(CLOSED)
            transport.close()

    async def _close_once_sent(self) -> None:
        try:
            if self.flow.paused:  # type: ignore[union-attr]  # (it may have emptied before this ran)
                await self.flow.drain()  # type: ignore[union-attr]
        except ClientGone:
            return
        self._close()

    def _abort(self) -> None:
        self._pipeline.clear()  # nothing queued behind runs: the connection is going
        self._stash.clear()
        if self.state is not CLOSED:
            self._to(CLOSED)
        if self._transport is not None:
            self._transport.abort()

    def on_timeout(self) -> None:
        """Called by the worker's sweep once ``deadline`` passed; every way out changes the
        state, and so the clock."""
        state = self.state
        if state is HEAD or state is BODY:
            self._refuse(HTTPError("the request took too long to arrive", status=408, code="request_timeout"))
            self._advance()
        elif state is STALLED or state is LAST_STALLED:
            log.debug("closing a connection whose client stopped reading")
            self._abort()
        elif state is LINGER:
            self._abort()
        else:  # NEW, IDLE
            self._close()

    def shutdown(self) -> None:
        """Graceful stop: close now if idle, else once the answer in flight is written (it says
        ``Connection: close``)."""
        if self.state is CLOSED:
            return
        if not self._busy and not self._pipeline:
            self._close()
            return
        self._last()
        self.cycle.last()  # type: ignore[union-attr]

    def abort(self) -> None:
        if self.cycle is not None:
            self.cycle.cancel()
        self._abort()
