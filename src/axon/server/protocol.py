"""One HTTP/1.1 connection: :class:`HTTPProtocol`, an ``asyncio.Protocol`` around the
``httptools`` (llhttp) parser.

Three objects serve a connection. This one owns the transport, the parser, the clocks (its
:class:`~.state.State` says which one runs) and the closing; each request is an
:class:`~.exchange.Exchange`; a :class:`~.writer.ResponseWriter` writes the answers.

Bytes arrive in :meth:`HTTPProtocol.data_received` and are parsed into complete requests (the
body read whole, up to ``Limits.max_body_bytes``), which queue in order. Requests are answered
one at a time, in order (pipelining). While a response is pending the connection does not parse
further: what arrives is kept (one read at most) and reading pauses until the response is done.

The hot path costs no coroutine, no task and no loop iteration. A route that is a plain function
that never blocks (Axon's own endpoints, any route with ``blocking=False``) is answered through
the App's synchronous ``handle``, and a response that fits one write is written before
``data_received`` returns. Only what must wait becomes a task: an ``async`` handler (always, as
asyncio code expects), a blocking one (in the App's thread pool), a plain one that found its
work would block after all (a zip whose CRC-32s must be read: finished in the pool), a response
that needs several writes, a full socket or ``sendfile``, a stream. Shorter still: a read that
repeats, byte for byte, a request answered before is answered again from that answer while the
files it holds are unchanged, without parsing it (:mod:`.replay`; ``_replayed``, ``_remember``).

Protection: URL, header bytes and header count are bounded while parsing (414, 431), a body by
``max_body_bytes`` (413, before ``100 Continue`` is sent), and malformed framing is a 400 from
llhttp (``Content-Length`` with ``Transfer-Encoding``, bad chunk sizes, bare LF, ...). After a
refusal nothing more is parsed: the error goes out, the write side is shut, and what the client
still sends is read and dropped for a moment (a lingering close, so the client sees the answer
rather than a reset). Deadlines are checked by the worker's once-a-second sweep.

The module is longer than most because the parser calls back into the connection: reading a
request needs the connection's queue, clock and transport, and splitting them apart would only
move these methods into another file that reaches back in here.
"""

from __future__ import annotations

import asyncio
import logging
from collections import deque
from collections.abc import Awaitable
from time import perf_counter
from types import CoroutineType
from typing import TYPE_CHECKING, Any
from urllib.parse import unquote_to_bytes

from httptools import HttpParserError, HttpParserUpgrade, HttpRequestParser, parse_url

from ..app import Request
from ..errors import BadRequest, HeadersTooLarge, HTTPError, URITooLong
from ..records import record_of
from ..response import Response, error_response
from .eager import resume
from .exchange import Exchange
from .flow import FlowControl
from .replay import READ_MAX, Replay
from .state import ANSWER, BODY, CLOSED, HEAD, IDLE, LINGER, STALLED
from .wire import CONTINUE, CRLF
from .writer import ResponseWriter

if TYPE_CHECKING:
    from .worker import Worker

log = logging.getLogger("axon.server")


#: Seconds a lingering close reads (and drops) what the client still sends.
LINGER_SECONDS = 2.0
LINGER_BYTES = 8 * 1024 * 1024

_METHODS = {m.encode(): m for m in ("GET", "HEAD", "POST", "PUT", "DELETE", "OPTIONS", "PATCH")}


class _Refused(Exception):
    """Raised inside a parser callback to stop parsing; the reason is in ``_refusal``."""


class HTTPVersionNotSupported(HTTPError):
    status, code = 505, "http_version_not_supported"


class NotImplementedEncoding(HTTPError):
    status, code = 501, "not_implemented"


class HTTPProtocol(asyncio.Protocol):
    def __init__(self, worker: Worker) -> None:
        self.worker = worker
        self.app = worker.app
        self.loop = worker.loop
        self.limits = worker.limits
        self.parser = HttpRequestParser(self)
        self._runs_inline = worker.runs_inline
        self._fixed = worker.fixed
        self._replays = worker.replays
        self._records = worker.app.records
        self.state = IDLE
        self.deadline: float | None = None
        self._transport: Any = None
        self.flow: FlowControl | None = None
        self.writer: ResponseWriter | None = None
        self._exchange: Exchange | None = None  # the request being read
        self._refusal: HTTPError | None = None  # why a parser callback stopped the parser
        # Requests read and not yet answered, the task answering one, bytes that arrived meanwhile.
        self._pipeline: deque[Exchange] = deque()
        self._task: asyncio.Task | None = None
        self._stash: list[bytes] = []
        # Why the connection will close once what is queued is answered.
        self._closing = False  # nothing more is read: refused, not kept alive, upgraded, cut
        self._stopping = False  # the worker stops gracefully: the answer in flight is the last
        self._eof = False  # the client shut its side: answer what it asked, then close
        self._linger_bytes = 0
        # Whether the parser is between requests: the last bytes fed ended a request (see
        # _feed). False while a request is partly read, and after a read that ended otherwise
        # (a body, bytes of a next request the parser keeps without calling back).
        self._clean = True
        self._ended = True  # the last callback was on_message_complete
        # The read being answered, while it may be remembered (see _replayed), the requests it
        # held, and how its one request's answer may be sent again.
        self._read: bytes | None = None
        self._completed = 0
        self._replay: Replay | None = None

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
        """Whether an answer is pending in a task (and so nothing more is parsed until it is done)."""
        return self._task is not None

    # -- asyncio.Protocol ---------------------------------------------------------------------

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self._transport = transport
        worker = self.worker
        if len(worker.connections) >= worker.config.max_connections:
            self.state = CLOSED
            self._closing = True
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
        self.writer = writer = ResponseWriter(transport, flow, worker, sock_fd)
        self._respond_now = writer.respond_now
        self._respond = writer.respond
        self.deadline = worker.head_deadline  # the first request must come as fast as a head

    def connection_lost(self, exc: Exception | None) -> None:
        self.state = CLOSED
        self.parser = None  # type: ignore[assignment]  # no cycle left for the collector
        self._closing = True
        self.deadline = None
        self.worker.connections.discard(self)
        self._pipeline.clear()
        self._stash.clear()
        if self.flow is not None:
            self.flow.connection_lost()

    def data_received(self, data: bytes) -> None:
        if self._closing:
            self._linger_bytes += len(data)
            if self.state is LINGER and self._linger_bytes > LINGER_BYTES:
                self._transport.close()
            return
        if self._task is not None:
            self._stash.append(data)
            self.flow.pause_reading()  # type: ignore[union-attr]
            return
        if self.state is IDLE:  # the first bytes of a request: the header clock starts
            clean = self._clean
            if clean and self._replays.answers and self._replayed(data):
                return
            self.state = HEAD
            self.deadline = self.worker.head_deadline
            self._completed = 0
            if clean and len(data) <= READ_MAX and self._replays.size:
                self._read = data
            self._feed(data)
            if self._pipeline:
                self._advance()
            self._read = None
            if self._replay is not None:
                self._remember(data)
            return
        self._feed(data)
        if self._pipeline:
            self._advance()

    def eof_received(self) -> bool | None:
        self._eof = True
        if self._task is not None or self._pipeline:
            return True  # half-closed: answer what was asked, then close
        return None

    def pause_writing(self) -> None:
        self.flow.pause_writing()  # type: ignore[union-attr]

    def resume_writing(self) -> None:
        self.flow.resume_writing()  # type: ignore[union-attr]

    # -- told by the flow control ---------------------------------------------------------------

    def stalled(self) -> None:
        """The writer waits for the client to take what was written: the write clock runs."""
        self.state = STALLED
        self.deadline = self.worker.write_deadline

    def unstalled(self) -> None:
        if self.state is STALLED:
            self.state = ANSWER
            self.deadline = None

    # -- parsing --------------------------------------------------------------------------------

    def _feed(self, data: bytes) -> None:
        ex = self._exchange
        in_head = ex is not None and ex.in_head
        # A read that ends with a request's blank line, after which the parser called nothing
        # more, leaves the parser between requests (a body or a next request's first bytes
        # would end it otherwise): conservative, it only decides _repeated_fixed.
        self._clean = False
        try:
            self.parser.feed_data(data)
        except HttpParserUpgrade:
            # An Upgrade (websocket, h2c) or CONNECT: not served here. The request itself was
            # complete and is answered as plain HTTP/1.1; what follows it is not read.
            if self._pipeline:
                self._pipeline[-1].keep_alive = False
            self._closing = True
        except HttpParserError as exc:
            refusal, self._refusal = self._refusal, None
            if refusal is None:
                reason = str(exc) or type(exc).__name__
                refusal = BadRequest(f"malformed request: {reason}", code="bad_request")
            self._refuse(refusal)
        else:
            self._clean = self._ended and data[-4:] == b"\r\n\r\n"
            ex = self._exchange
            if ex is not None and ex.in_head:
                # httptools reports a header only once it is complete: bound the bytes it is
                # holding for a header still arriving (the callbacks count exactly).
                if in_head:
                    ex.head_raw += len(data)
                if ex.head_raw > self.limits.max_header_bytes:
                    self._refuse(HeadersTooLarge(f"request headers longer than {self.limits.max_header_bytes} bytes"))

    def _refuse(self, error: HTTPError) -> None:
        """Answer ``error`` once what is queued before it is answered; then close."""
        ex = self._exchange or Exchange(b"")
        self._exchange = None
        ex.refusal = error
        ex.keep_alive = False
        self._pipeline.append(ex)
        self._closing = True
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
        self._ended = False
        ex = self._exchange
        if ex is None:
            ex = self._exchange = Exchange(url)
            if self.state is IDLE:  # after an answer sent from the parser's callback
                self.state = HEAD
                self.deadline = self.worker.head_deadline
        else:
            ex.url += url
        if len(ex.url) > self.limits.max_url_bytes:
            self._fail(URITooLong(f"URL longer than {self.limits.max_url_bytes} bytes"))

    def on_header(self, name: bytes, value: bytes) -> None:
        ex: Exchange = self._exchange  # type: ignore[assignment]
        limits = self.limits
        ex.nheaders += 1
        ex.head_bytes += len(name) + len(value) + 4
        if ex.nheaders > limits.max_headers:
            self._fail(HeadersTooLarge(f"more than {limits.max_headers} request headers"))
        if ex.head_bytes + len(ex.url) > limits.max_header_bytes:
            self._fail(HeadersTooLarge(f"request headers longer than {limits.max_header_bytes} bytes"))
        if not ex.in_head:
            return  # a trailer of a chunked body: counted, not used
        key = name.decode("latin-1").lower()
        text = value.decode("latin-1")
        headers = ex.headers
        if key in headers:
            headers[key] = f"{headers[key]}, {text}"
        else:
            headers[key] = text

    def on_headers_complete(self) -> None:
        ex: Exchange = self._exchange  # type: ignore[assignment]
        ex.in_head = False
        version = self.parser.get_http_version()
        ex.http11 = http11 = version == "1.1"
        if not http11 and version != "1.0":
            ex.http11 = True
            self._fail(HTTPVersionNotSupported(f"HTTP/{version} is not supported; use HTTP/1.1"))
        headers = ex.headers
        if headers:
            encoding = headers.get("transfer-encoding")
            if encoding is not None:
                if not http11:
                    self._fail(BadRequest("Transfer-Encoding in an HTTP/1.0 request", code="bad_request"))
                if encoding.strip().lower() != "chunked":
                    self._fail(NotImplementedEncoding(f"Transfer-Encoding {encoding!r} is not supported; use chunked"))
            length = headers.get("content-length")
            if length is not None:
                self._check_body(int(length))  # llhttp checked it is digits
            expect = headers.get("expect")
            if expect is not None and expect.strip().lower() == "100-continue" and http11:
                if self._pipeline:  # answers owed before it: after them (see _advance)
                    ex.continue_pending = True
                else:
                    self._transport.write(CONTINUE)
        self.state = BODY
        self.deadline = self.worker.idle_deadline

    def on_body(self, data: bytes) -> None:
        ex: Exchange = self._exchange  # type: ignore[assignment]
        ex.size += len(data)
        self._check_body(ex.size)
        if ex.body is None:
            ex.body = [data]
        else:
            ex.body.append(data)
        self.deadline = self.worker.idle_deadline

    def on_message_complete(self) -> None:
        self._ended = True
        self._completed += 1
        ex: Exchange = self._exchange  # type: ignore[assignment]
        self._exchange = None
        parser = self.parser
        ex.keep_alive = keep_alive = parser.should_keep_alive()
        method = parser.get_method()
        ex.head = method == b"HEAD"
        url = ex.url
        fixed = self._fixed.get(url)
        if fixed is not None and keep_alive and ex.http11 and self._answer_fixed(ex, method, fixed):
            return
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
            self._closing = True
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

    def _answer_fixed(self, ex: Exchange, method: bytes, fixed: tuple[bytes, bytes]) -> bool:
        """Answer a GET of one of the App's fixed answers (the health probe) from its encoded
        bytes, here in the parser's callback, as nginx's ``return 200`` does: no Request, no
        App, no Response. The worker's table holds only what the App allows now; this adds what
        the connection must allow: nothing queued before it, the socket free, no ``Upgrade``
        (llhttp stops after it: the answer must say "close"). Else False, and it is answered
        like any other request."""
        if (
            self._pipeline or self._closing or self._stopping or self.flow.paused  # type: ignore[union-attr]
            or "upgrade" in ex.headers
            or (method != b"GET" and not ex.head)
        ):
            return False
        self.state = IDLE  # answered; the next request's first bytes start the header clock
        self.deadline = self.worker.idle_deadline
        if self._read is not None and self._may_repeat(ex):
            self._replay = fixed
        self.writer.send_again(fixed, head_only=ex.head)  # type: ignore[union-attr]
        return True

    # -- answering a repeated read again (server/replay.py) -------------------------------------

    def _may_repeat(self, ex: Exchange) -> bool:
        """Whether the one request of this read may be answered again from its answer: a GET
        without a body on a connection kept alive, whose answer is all that was written for it
        (no ``100 Continue``)."""
        return (
            self._completed == 1 and ex.keep_alive and ex.http11 and not ex.head and not ex.size
            and "expect" not in ex.headers
        )

    def _replayed(self, data: bytes) -> bool:
        """Answer ``data`` from the answer remembered for the same bytes, if it still holds.
        The parser is left between requests, as parsing them would leave it."""
        replay = self._replays.get(data)
        if replay is None or self._stopping or self._exchange is not None or self._pipeline or self.flow.paused:  # type: ignore[union-attr]
            return False
        if not replay.pins:  # a fixed answer (the health probe): nothing to check, count or record
            self._transport.write(b"".join((replay.head, self.worker.date_line, CRLF, replay.body)))  # type: ignore[arg-type]
            self.deadline = self.worker.idle_deadline
            return True
        # Counted, and recorded while observed, as the App does.
        records = self._records
        observed = records.wanted
        if observed:
            started = perf_counter()
        if not self.writer.send_again(replay):  # type: ignore[union-attr]
            self._replays.forget(data)  # a file changed: answered anew (and counted) by the App
            return False
        next(records.begun)
        if observed:
            ended = perf_counter()
            records.add_again(replay.record, ended - started, ended)  # type: ignore[arg-type]
        self.deadline = self.worker.idle_deadline
        return True

    def _remember(self, data: bytes) -> None:
        """After a read was answered: remember its answer if it held one request that may be
        answered again, answered whole and at once, with the parser left between requests."""
        replay, self._replay = self._replay, None
        if (
            self._clean and self._completed == 1 and self.state is IDLE and self._task is None
            and not self._pipeline and not self._closing
        ):
            self._replays.remember(data, replay)
        else:
            replay.release()

    # -- answering, in order --------------------------------------------------------------------

    def _advance(self) -> None:
        """Answer queued requests in order until one must wait; then parse what waited."""
        pipeline = self._pipeline
        while self._task is None:
            if pipeline:
                self._run(pipeline.popleft())
            elif self._stash and not self._closing:
                data = b"".join(self._stash)
                self._stash.clear()
                self._feed(data)
            else:
                break
        if self._task is not None or self.state is CLOSED:
            return
        if self._closing or self._stopping or self._eof:
            if self.state is not LINGER:
                self._close()
            return
        ex = self._exchange
        if ex is not None:  # the next request is arriving
            if self.state is not HEAD and self.state is not BODY:
                self.state = HEAD if ex.in_head else BODY
                self.deadline = self.worker.head_deadline
            if ex.continue_pending and not ex.in_head:
                ex.continue_pending = False
                self._transport.write(CONTINUE)
        else:
            self.state = IDLE
            self.deadline = self.worker.idle_deadline
        flow = self.flow
        if flow.read_paused:  # type: ignore[union-attr]
            flow.resume_reading()  # type: ignore[union-attr]

    def _run(self, ex: Exchange) -> None:
        """Answer one request. A plain handler that never blocks runs here, and a response that
        fits the socket is written here: no coroutine, no task, no trip around the loop.
        Whatever must wait (an async or blocking handler, a full socket) becomes a task."""
        self.state = ANSWER
        self.deadline = None
        request = ex.request
        if request is None:
            self._answer(ex, error_response(ex.refusal))  # type: ignore[arg-type]
        elif self._runs_inline(request):
            request.on_loop = True  # work that would block (a cold zip) goes to the pool
            try:
                response = self.app.handle(request)
            except BaseException as exc:  # noqa: BLE001 - handle answers errors itself: a bug
                self._crashed(exc)
            else:
                if type(response) is CoroutineType:  # it would have blocked: finished in the pool
                    self._start(self._respond_later(ex, response))
                else:
                    self._answer(ex, response)
        else:
            self._start(self._cycle(ex, request))

    def _answer(self, ex: Exchange, response: Response) -> None:
        if self._stopping:
            ex.keep_alive = False
        if (
            response.repeatable and self._read is not None and self._replays.seen_before(self._read)
            and self._may_repeat(ex) and self.writer.fits_now(response)  # type: ignore[union-attr]
        ):
            # Seen twice, and written whole now (at most one chunk to read: all that sending it
            # again may hold in memory): remembered once written (see _remember).
            self._replay = Replay.of(response, record_of(ex.request, response, 0.0, 0.0))  # type: ignore[arg-type]
        if self._respond_now(response, ex):
            self._finished(ex.keep_alive)
            return
        replay, self._replay = self._replay, None
        if replay is not None:  # not written now after all (a head that cannot be encoded)
            replay.release()
        coro = self._respond(response, ex, tried=True)
        try:
            awaited = coro.send(None)
        except StopIteration as stop:
            self._finished(stop.value)
        except BaseException as exc:  # noqa: BLE001 - a bug of ours: cut this connection only
            self._crashed(exc)
        else:
            self._start(resume(coro, awaited))

    def _start(self, coro: Any) -> None:
        task = self._task = self.loop.create_task(coro)
        task.add_done_callback(self._task_done)

    def _task_done(self, task: asyncio.Task) -> None:
        self._task = None
        if task.cancelled():
            self._abort()
            return
        exc = task.exception()
        if exc is not None:
            self._crashed(exc)
            return
        self._finished(task.result())
        self._advance()

    def _finished(self, keep_alive: bool) -> None:
        if not keep_alive:
            self._closing = True
            self._pipeline.clear()

    def _crashed(self, exc: BaseException) -> None:
        log.error("connection failed; closing it", exc_info=exc)
        self._abort()

    async def _cycle(self, ex: Exchange, request: Request) -> bool:
        return await self._respond_later(ex, self.app.handle_async(request))

    async def _respond_later(self, ex: Exchange, answer: Awaitable[Response]) -> bool:
        response = await answer
        if self._stopping:  # began while the handler ran
            ex.keep_alive = False
        return await self._respond(response, ex)

    # -- closing --------------------------------------------------------------------------------

    def _close(self) -> None:
        """Close after what was written; first read and drop what the client still sends."""
        self._closing = True
        self._pipeline.clear()
        self._stash.clear()
        transport = self._transport
        if self.state is CLOSED or transport.is_closing():
            return
        if not self._eof and transport.can_write_eof():
            transport.write_eof()
            self.state = LINGER
            self.deadline = self.loop.time() + LINGER_SECONDS
            self.flow.resume_reading()  # type: ignore[union-attr]
        else:
            transport.close()

    def _abort(self) -> None:
        self._closing = True
        self._pipeline.clear()  # nothing queued behind runs: the connection is going
        self._stash.clear()
        self.deadline = None
        if self._transport is not None:
            self._transport.abort()

    def on_timeout(self) -> None:
        """Called by the worker's sweep once ``deadline`` passed."""
        state = self.state
        self.deadline = None
        if (state is HEAD or state is BODY) and self._task is None and not self._closing:
            self._refuse(HTTPError("the request took too long to arrive", status=408, code="request_timeout"))
            self._advance()
        elif state is STALLED:
            log.debug("closing a connection whose client stopped reading")
            self._abort()
        elif state is LINGER:
            self._abort()
        elif self._task is None:
            self._close()

    def shutdown(self) -> None:
        """Graceful stop: close now if idle, else once the response in flight is written."""
        self._stopping = True
        if self._task is None and not self._pipeline and self.state is not CLOSED:
            self._close()

    def abort(self) -> None:
        if self._task is not None:
            self._task.cancel()
        self._abort()


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
