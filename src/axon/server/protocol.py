"""One HTTP/1.1 connection: :class:`HTTPProtocol`, an ``asyncio.Protocol`` around the
``httptools`` (llhttp) parser.

Four objects serve a connection. This one owns the transport, the parser, its state (one table
of states, clocks and transitions, :mod:`.state`, which every change goes through: ``_to``) and
the closing; each request is an :class:`~.exchange.Exchange`; a :class:`~.cycle.RequestCycle`
runs the App for it; a :class:`~.writer.ResponseWriter` writes the answers.

Bytes arrive in :meth:`HTTPProtocol.data_received` and are parsed into complete requests (the
body read whole, up to ``Limits.max_body_bytes``), which queue in order. Where it was built, the
compiled reader of simple heads (:mod:`.simplehead`) reads a plain ``GET`` or ``HEAD`` in one
call before llhttp sees it (``_feed_simple``), and answers it as the callbacks would. Requests
are answered one at a time, in order (pipelining). While a response is pending in a task the
connection does not parse further: what arrives is kept (one read at most) and reading pauses
until the response is done. One of the App's fixed answers (the health probe), or a head the
worker remembered for a repeatable route (a file, a batch) with its files opened anew, is sent
from the parser's callback, past the App (:mod:`.shortcuts`; ``_shortcut``).

Protection: URL, header bytes and header count are bounded while parsing (414, 431), a body by
``max_body_bytes`` (413, before ``100 Continue`` is sent), and malformed framing is a 400 from
llhttp (``Content-Length`` with ``Transfer-Encoding``, bad chunk sizes, bare LF, ...). After a
refusal nothing more is parsed: the error goes out, the write side is shut, and what the client
still sends is read and dropped for a moment (a lingering close, so the client sees the answer
rather than a reset). Deadlines are checked by the worker's once-a-second sweep.

The parser calls back into the connection, so reading a request needs the connection's queue,
clock and transport: the callbacks live here, what runs an answer in :mod:`.cycle`. That is why
this module stays whole at some 500 lines: its methods are one httptools parser protocol over
one connection's state, and split apart each callback would sit a module away from the state it
changes.
"""

from __future__ import annotations

import asyncio
import logging
from collections import deque
from time import perf_counter
from typing import TYPE_CHECKING, Any
from urllib.parse import unquote_to_bytes

from httptools import HttpParserError, HttpParserUpgrade, HttpRequestParser, parse_url

from ..app import Request
from ..errors import BadRequest, HeadersTooLarge, HTTPError, URITooLong
from ..runtime import declared_length
from .cycle import RequestCycle
from .exchange import Exchange
from .flow import FlowControl
from .state import (
    ANSWER, ANSWERING, BODY, CLOCKS, CLOSED, CLOSING, HEAD, IDLE, LAST, LAST_OF, LAST_STALLED, LINGER, NEW, STALLED,
    TRANSITIONS, BadTransition, State,
)
from .wire import CONTINUE, CRLF
from .writer import ResponseWriter

if TYPE_CHECKING:
    from .roles import Host

log = logging.getLogger("axon.server")


#: Seconds a lingering close reads (and drops) what the client still sends.
LINGER_SECONDS = 2.0
LINGER_BYTES = 8 * 1024 * 1024
#: What one chunk's size line and CRLFs may take beyond the header budget (a chunked body's
#: framing; chunk extensions past it are refused with the trailers that overflow it).
CHUNK_LINE_BYTES = 64

#: What httptools says when a callback raised (HttpParserCallbackError), which _feed answers with
#: a 400: the compiled reader's path answers an exception of _complete the same way.
CALLBACK_ERROR = "`on_message_complete` callback error"

_METHODS = {m.encode(): m for m in ("GET", "HEAD", "POST", "PUT", "DELETE", "OPTIONS", "PATCH")}


class _Refused(Exception):
    """Raised inside a parser callback to stop parsing; the reason is in ``_refusal``."""


class HTTPVersionNotSupported(HTTPError):
    status, code = 505, "http_version_not_supported"


class NotImplementedEncoding(HTTPError):
    status, code = 501, "not_implemented"


class HTTPProtocol(asyncio.Protocol):
    # Slots: a connection is read on every request, and past some 30 attributes an instance
    # dict's keys stop being shared and each ``self.x`` costs more (CPython 3.11).
    __slots__ = (
        "worker", "app", "loop", "limits", "_max_headers", "_max_header_bytes", "parser", "_simple_head",
        "_between", "_shortcuts", "_get_fixed", "_remembered", "_open", "_record_sent", "_sync_files",
        "_cached_files", "state", "deadline", "_transport", "flow", "writer", "cycle", "_exchange", "_refusal",
        "_pipeline", "_stash", "_eof", "_linger_bytes",
    )

    def __init__(self, worker: Host) -> None:
        self.worker = worker
        self.app = worker.app
        self.loop = worker.loop
        self.limits = limits = worker.limits
        self._max_headers, self._max_header_bytes = limits.max_headers, limits.max_header_bytes
        self.parser = HttpRequestParser(self)
        self._simple_head = worker.simple_head
        self._between = True  # whether llhttp may be between requests (see _feed)
        self._shortcuts = shortcuts = worker.shortcuts
        self._get_fixed = shortcuts.get_fixed
        self._remembered = shortcuts.remembered
        self._open = worker.app.store.open
        self._record_sent = worker.app.record_sent
        self._sync_files = worker.sync_files
        self._cached_files = worker.cached_files
        self.state = NEW
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
        if self.flow is not None:
            self.flow.connection_lost()

    def data_received(self, data: bytes) -> None:
        state = self.state
        if state in CLOSING:
            self._linger_bytes += len(data)
            if state is LINGER and self._linger_bytes > LINGER_BYTES:
                self._transport.close()
            return
        if state is ANSWER or state is STALLED:  # an answer pending in a task
            self._stash.append(data)
            self.flow.pause_reading()  # type: ignore[union-attr]
            return
        self._feed(data)
        if self._pipeline:
            self._advance()

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

    # -- parsing --------------------------------------------------------------------------------

    def _feed(self, data: bytes) -> None:
        if self._simple_head is not None:
            if self._between and self._exchange is None:
                data = self._feed_simple(data)
                if not data:
                    return
            # Whether llhttp will be between requests after this read, where the compiled reader
            # may take over: a request begun makes an exchange in a callback, but the first bytes
            # of a method ("GE") are held without one. A read ending in "\n" ends no method.
            self._between = data[-1:] == b"\n"
        arriving = ex = self._exchange
        in_head = ex is not None and ex.in_head
        body_before = 0 if ex is None else ex.size
        try:
            self.parser.feed_data(data)
        except HttpParserUpgrade:
            # An Upgrade (websocket, h2c) or CONNECT: not served here. The request itself was
            # complete and is answered as plain HTTP/1.1; what follows it is not read.
            if self._pipeline:
                self._pipeline[-1].keep_alive = False
            self._last()
        except HttpParserError as exc:
            refusal, self._refusal = self._refusal, None
            if refusal is None:
                refusal = _malformed(str(exc) or type(exc).__name__)
            self._refuse(refusal)
        else:
            # A request still arriving when the read is parsed runs the header clock, or once its
            # head is complete the body's; one answered within the read (most) changes no state
            # but its answer's.
            ex = self._exchange
            if ex is None:
                return
            state = self.state
            if ex.in_head:
                # httptools reports a header only once it is complete: bound the bytes it is
                # holding for a header still arriving (the callbacks count exactly).
                if in_head:
                    ex.head_raw += len(data)
                if ex.head_raw > self.limits.max_header_bytes:
                    self._refuse(HeadersTooLarge(f"request headers longer than {self.limits.max_header_bytes} bytes"))
                elif state is IDLE or state is NEW:
                    self._to(HEAD)
            else:
                if ex is arriving and not in_head and ex.chunks:  # a body that was arriving before this read
                    # Past the head, what is not body (chunk lines, a trailer still arriving, which
                    # httptools holds whole) is bounded as a head is.
                    ex.framing += len(data) - (ex.size - body_before)
                    if ex.framing > self.limits.max_header_bytes + CHUNK_LINE_BYTES * ex.chunks:
                        self._refuse(HeadersTooLarge(
                            f"chunk lines and trailers longer than {self.limits.max_header_bytes} bytes"))
                        return
                if state is HEAD or state is IDLE or state is NEW:
                    self._to(BODY)

    def _feed_simple(self, data: bytes) -> bytes:
        """Read the simple heads that ``data`` begins with in one call each (:mod:`.simplehead`)
        and answer them as llhttp's callbacks would; return what is left for llhttp."""
        parse, start, size = self._simple_head, 0, len(data)
        max_url, max_headers, max_header_bytes = self.limits.max_url_bytes, self._max_headers, self._max_header_bytes
        while start < size:
            found = parse(data, start, max_url, max_headers, max_header_bytes)  # type: ignore[misc]
            if found is None:
                break
            method, url, headers, start = found
            ex = Exchange(url)
            ex.headers = headers
            ex.in_head = False
            ex.keep_alive = True  # HTTP/1.1, and no "Connection" but "keep-alive"
            try:
                self._complete(ex, method)
            except Exception:  # noqa: BLE001 - what httptools makes of a callback's exception (_feed)
                self._refuse(_malformed(CALLBACK_ERROR))
            if self.state in CLOSING:
                return b""
        return data[start:] if start else data

    def _refuse(self, error: HTTPError) -> None:
        """Answer ``error`` once what is queued before it is answered; then close."""
        ex = self._exchange or Exchange(b"")
        self._exchange = None
        ex.refusal = error
        ex.keep_alive = False
        self._pipeline.append(ex)
        self._last()
        self.flow.pause_reading()  # type: ignore[union-attr]

    def _fail(self, error: HTTPError) -> None:
        self._refusal = error
        raise _Refused()

    def _check_body(self, size: int) -> None:
        try:
            self.limits.check_body(size)
        except HTTPError as exc:
            self._fail(exc)

    # The parser calls on_url first for every request (there is no on_message_begin: one
    # callback less per request); on_message_complete hands the exchange on.

    def on_url(self, url: bytes) -> None:
        ex = self._exchange
        if ex is None:
            ex = self._exchange = Exchange(url)
        else:
            ex.url += url
        if len(ex.url) > self.limits.max_url_bytes:
            self._fail(URITooLong(f"URL longer than {self.limits.max_url_bytes} bytes"))

    def on_header(self, name: bytes, value: bytes) -> None:
        ex: Exchange = self._exchange  # type: ignore[assignment]
        ex.nheaders = count = ex.nheaders + 1
        ex.head_bytes = size = ex.head_bytes + len(name) + len(value) + 4
        if count > self._max_headers or size + len(ex.url) > self._max_header_bytes:
            self._too_large(ex)
        if not ex.in_head:
            return  # a trailer of a chunked body: counted, not used
        key = name.decode("latin-1").lower()
        text = value.decode("latin-1")
        headers = ex.headers
        if key in headers:
            headers[key] = f"{headers[key]}, {text}"
        else:
            headers[key] = text

    def _too_large(self, ex: Exchange) -> None:
        limits = self.limits
        if ex.nheaders > limits.max_headers:
            self._fail(HeadersTooLarge(f"more than {limits.max_headers} request headers"))
        self._fail(HeadersTooLarge(f"request headers longer than {limits.max_header_bytes} bytes"))

    def on_headers_complete(self) -> None:
        ex: Exchange = self._exchange  # type: ignore[assignment]
        ex.in_head = False
        parser = self.parser
        ex.keep_alive = keep_alive = parser.should_keep_alive()  # a chunked body's trailer may still say close
        headers = ex.headers
        if keep_alive and "connection" not in headers and "proxy-connection" not in headers:
            # Kept alive without a word: HTTP/1.1, the one version llhttp keeps alive by default
            # (1.0 needs "Connection: keep-alive", or llhttp's "Proxy-Connection: keep-alive").
            # get_http_version formats a string each call.
            ex.http11 = http11 = True
        else:
            version = parser.get_http_version()
            ex.http11 = http11 = version == "1.1"
            if not http11 and version != "1.0":
                ex.http11 = True
                self._fail(HTTPVersionNotSupported(f"HTTP/{version} is not supported; use HTTP/1.1"))
        if headers:
            encoding = headers.get("transfer-encoding")
            if encoding is not None:
                if not http11:
                    self._fail(BadRequest("Transfer-Encoding in an HTTP/1.0 request", code="bad_request"))
                if encoding.strip().lower() != "chunked":
                    self._fail(NotImplementedEncoding(f"Transfer-Encoding {encoding!r} is not supported; use chunked"))
            length = headers.get("content-length")
            if length is not None:
                try:
                    declared_length(length, self.limits)  # as every runtime reads it (llhttp checked the digits)
                except HTTPError as exc:
                    self._fail(exc)
            expect = headers.get("expect")
            if expect is not None and expect.strip().lower() == "100-continue" and http11:
                if self._pipeline:  # answers owed before it: after them (see _advance)
                    ex.continue_pending = True
                else:
                    self.writer.release()  # type: ignore[union-attr]  # an answer held before it goes first
                    self._transport.write(CONTINUE)
        # The body clock starts after this read (_feed), if the request is not complete by then:
        # most have no body, and one change of state less is one check less for each.

    def on_body(self, data: bytes) -> None:
        ex: Exchange = self._exchange  # type: ignore[assignment]
        ex.size += len(data)
        self._check_body(ex.size)
        if ex.body is None:
            ex.body = [data]
        else:
            ex.body.append(data)
        if self.state not in CLOSING:  # a request refused in this read: its body is dropped
            self._to(BODY)  # each piece restarts the clock

    def on_chunk_header(self) -> None:  # called for chunked bodies only
        self._exchange.chunks += 1  # type: ignore[union-attr]

    def on_message_complete(self) -> None:
        ex: Exchange = self._exchange  # type: ignore[assignment]
        self._exchange = None
        if self.state in CLOSING:  # cut, or answered "close" already: what follows in this read is dropped
            return
        parser = self.parser
        if ex.keep_alive and ex.chunks:  # a chunked body's trailer may say "Connection: close"
            ex.keep_alive = parser.should_keep_alive()
        self._complete(ex, parser.get_method())

    def _complete(self, ex: Exchange, method: bytes) -> None:
        """``ex`` is read whole: answer it here if a shortcut may, else queue it for the App."""
        ex.head = method == b"HEAD"
        url = ex.url
        if ex.keep_alive and ex.http11 and self._shortcut(ex, method, url):
            return
        self._sync_files()  # before anything opens a file for this request
        try:
            path, query = _target(url)
        except UnicodeDecodeError:
            ex.refusal = BadRequest("path is not valid UTF-8 once percent-decoded", code="bad_path")
            self._pipeline.append(ex)
            return
        except HttpParserError:
            ex.refusal = BadRequest("malformed request target", code="bad_request")
            ex.keep_alive = False
            self._pipeline.append(ex)
            self._last()
            return
        body = ex.body
        ex.request = Request(
            _METHODS.get(method) or method.decode("ascii"),
            path,
            query,
            ex.headers,
            (body[0] if len(body) == 1 else b"".join(body)) if body else b"",
        )
        self._pipeline.append(ex)

    def _shortcut(self, ex: Exchange, method: bytes, url: bytes) -> bool:
        """Answer the request here, in the parser's callback, past the App, if the worker's
        shortcuts (:mod:`.shortcuts`) hold its answer: no Request, no routing, no Response. The
        worker's tables hold only what the App allows now; this adds what the connection must
        allow: nothing queued before it, the socket free, no ``Upgrade`` (llhttp stops after it:
        the answer must say "close"). Else False, and the App answers it."""
        if (
            self._pipeline or self.state in CLOSING or self.flow.paused  # type: ignore[union-attr]
            or "upgrade" in ex.headers
        ):
            return False
        fixed = self._get_fixed(url)
        if fixed is not None:  # a fixed answer (the health probe), for GET and HEAD
            if method != b"GET" and not ex.head:
                return False
            self.writer.send(fixed[1] if ex.head else fixed[0], ex)  # type: ignore[union-attr]
        else:  # a remembered head, for a GET without a body, Range or a precondition
            remembered = self._remembered
            if not remembered.heads or method != b"GET":
                return False
            key = self._shortcuts.key(ex)
            if key is None:
                return False
            self._sync_files()  # before its files are opened (and again by the App's path if it misses)
            started = perf_counter()
            found = remembered.recall(key, self._open, self._cached_files)
            if found is None:
                return False
            head, answer = found
            if not self.writer.send(answer, ex):  # type: ignore[union-attr]
                for f in answer.files:
                    f.close()
                return False  # too much to send at once: the App answers it
            ended = perf_counter()
            self._record_sent(head.path, head.query, head.length, len(head.paths), ended - started, ended,
                              ex.headers.get("x-forwarded-for"))
            if not ex.keep_alive:  # cut: a file could not be read as planned, or the client left
                self._abort()  # nothing more is parsed or answered on this connection
                return True
        self._to(IDLE)  # answered; the next request's first bytes start the header clock
        return True

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
            transport.write_eof()
            self._to(LINGER)
            self.flow.resume_reading()  # type: ignore[union-attr]
        else:
            self._to(CLOSED)
            transport.close()

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


def _malformed(reason: str) -> BadRequest:
    """The 400 of bytes llhttp refused (``reason``: what it said)."""
    return BadRequest(f"malformed request: {reason}", code="bad_request")


def _target(url: bytes) -> tuple[str, str]:
    """The request target's path (percent-decoded once, UTF-8) and raw query string."""
    if url[:1] != b"/":
        if url == b"*":
            return "*", ""
        parsed = parse_url(url)  # absolute-form: http://host/path?query
        path, query = parsed.path or b"/", parsed.query or b""
    else:
        if b"#" in url:
            url = url[: url.index(b"#")]
        if b"?" not in url:
            return (unquote_to_bytes(url) if b"%" in url else url).decode("utf-8"), ""
        path, _, query = url.partition(b"?")
    if b"%" in path:
        path = unquote_to_bytes(path)
    return path.decode("utf-8"), query.decode("latin-1")
