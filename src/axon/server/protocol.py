"""One HTTP/1.1 connection: an ``asyncio.Protocol`` around the ``httptools`` (llhttp) parser.

Bytes arrive in :meth:`HTTPProtocol.data_received` and are parsed into complete requests (the
body read whole, up to ``Limits.max_body_bytes``), which queue in order. Requests are answered
one at a time, in order (pipelining). While a response is pending the connection does not parse
further: what arrives is kept (one read at most) and reading pauses until the response is done.

The hot path costs no coroutine, no task and no loop iteration. A route that is a plain function
that never blocks (Axon's own endpoints, any route with ``blocking=False``) is answered through
the App's synchronous ``handle``, and a response that fits one write is written before
``data_received`` returns. Only what must wait becomes a task: an ``async`` handler (always, as
asyncio code expects), a blocking one (in the App's thread pool), a response that needs several
writes, a full socket or ``sendfile``, a stream.

Protection: URL, header bytes and header count are bounded while parsing (414, 431), a body by
``max_body_bytes`` (413, before ``100 Continue`` is sent), and malformed framing is a 400 from
llhttp (``Content-Length`` with ``Transfer-Encoding``, bad chunk sizes, bare LF, ...). After a
refusal nothing more is parsed: the error goes out, the write side is shut, and what the client
still sends is read and dropped for a moment (a lingering close, so the client sees the answer
rather than a reset). Deadlines (slow headers, idle keep-alive, stalled writes) are checked by
the worker's once-a-second sweep.
"""

from __future__ import annotations

import asyncio
import logging
import os
import socket
from collections import deque
from typing import TYPE_CHECKING, Any
from urllib.parse import unquote_to_bytes

from httptools import HttpParserError, HttpParserUpgrade, HttpRequestParser, parse_url

from ..app import Request
from ..errors import BadRequest, HeadersTooLarge, HTTPError, PayloadTooLarge, URITooLong
from ..response import Response, error_response
from .send import (
    BadResponse,
    BodyLengthMismatch,
    ClientGone,
    FileChanged,
    send_response,
    send_simple,
)
from .wire import CONTINUE, CRLF

if TYPE_CHECKING:
    from .worker import Worker

log = logging.getLogger("axon.server")

# What the connection is doing, for the deadline sweep.
IDLE, HEAD, BODY, BUSY, WRITE, LINGER = range(6)
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
        self.sendfile_min = worker.config.sendfile_min
        # Bytes gathered per write: many small parts per writev with sendfile for the large ones;
        # one Limits.chunk_size at a time where everything is copied (TLS, no sendfile).
        self.write_chunk = worker.limits.chunk_size
        self.parser = HttpRequestParser(self)
        self._runs_inline = worker.runs_inline
        self.transport: Any = None
        self.sock_fd = -1
        self._own_sock: socket.socket | None = None  # see own_socket()
        self.lost = False
        self.write_paused = False
        self.phase = IDLE
        self.deadline: float | None = None
        self._waiter: asyncio.Future | None = None
        # The request being parsed.
        self._url = b""
        self._headers: dict[str, str] = {}
        self._body: list[bytes] = []
        self._body_size = 0
        self._head_bytes = 0
        self._head_raw = 0
        self._nheaders = 0
        self._in_message = False
        self._in_head = False
        self._http11 = True
        self._refusal: HTTPError | None = None
        # Requests parsed and not yet answered, and bytes received while a response is pending.
        self._pipeline: deque = deque()
        self._stash: list[bytes] = []
        self._busy = False
        self._task: asyncio.Task | None = None
        self._reading_paused = False
        self._continue_pending = False
        self._dead = False  # nothing more will be parsed: the connection closes after the queue
        self._shutting_down = False  # graceful stop: close after the response in flight
        self._eof = False  # the client shut its side: answer the queue, then close
        self._linger_bytes = 0
        self._fixed = worker.fixed
        self._answered = False  # a fixed response went out during this read (see _answer_fixed)

    # -- asyncio.Protocol ---------------------------------------------------------------------

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport
        worker = self.worker
        if len(worker.connections) >= worker.config.max_connections:
            self.lost = self._dead = True
            transport.write(worker.full_response)  # type: ignore[attr-defined]
            transport.close()
            return
        worker.connections.add(self)
        if transport.get_extra_info("sslcontext") is None:
            # Pause on anything unsent: see send.py. TLS keeps the default marks.
            transport.set_write_buffer_limits(0, 0)  # type: ignore[attr-defined]
            if worker.use_sendfile:
                sock = transport.get_extra_info("socket")
                if sock is not None:
                    self.sock_fd = sock.fileno()
                    self.write_chunk = worker.config.write_chunk
        self.deadline = self.worker.head_deadline

    def connection_lost(self, exc: Exception | None) -> None:
        self.lost = True
        self.parser = None  # type: ignore[assignment]  # no cycle left for the collector
        self._dead = True
        self.deadline = None
        self.worker.connections.discard(self)
        self._pipeline.clear()
        self._stash.clear()
        waiter, self._waiter = self._waiter, None
        if waiter is not None and not waiter.done():
            waiter.set_exception(ClientGone())
        own, self._own_sock = self._own_sock, None
        if own is not None:
            self.loop.remove_writer(own.fileno())
            own.close()

    def data_received(self, data: bytes) -> None:
        if self._dead:
            self._linger_bytes += len(data)
            if self.phase == LINGER and self._linger_bytes > LINGER_BYTES:
                self.transport.close()
            return
        if self._busy:
            self._stash.append(data)
            self._pause_reading()
            return
        if self.phase == IDLE:  # the first bytes of a request: the header clock starts
            self.phase = HEAD
            self.deadline = self.worker.head_deadline
        self._feed(data)
        if self._pipeline or self._answered:
            self._answered = False
            self._advance()

    def eof_received(self) -> bool | None:
        self._eof = True
        if self._busy or self._pipeline:
            return True  # half-closed: answer what was asked, then close
        return None

    def pause_writing(self) -> None:
        self.write_paused = True

    def resume_writing(self) -> None:
        self.write_paused = False
        waiter, self._waiter = self._waiter, None
        if waiter is not None and not waiter.done():
            waiter.set_result(None)

    def own_socket(self) -> socket.socket | None:
        """A socket object of our own on a duplicate of the connection's descriptor, made once
        per connection and closed with it: for ``TCP_CORK`` (the transport's pseudo-socket
        builds a socket object, and calls ``getsockname``, on every ``setsockopt``) and to watch
        writability (transports refuse ``add_writer`` on their own descriptor). None if no
        descriptor is left to duplicate."""
        if self._own_sock is None and not self.lost:
            try:
                self._own_sock = socket.socket(fileno=os.dup(self.sock_fd))
            except OSError:
                return None
        return self._own_sock

    async def writable(self) -> bool:
        """Wait until the socket takes more (``sendfile`` met a full socket). False if no
        descriptor is left to watch it with."""
        if self.lost or self.transport.is_closing():
            raise ClientGone()
        own = self.own_socket()
        if own is None:
            return False
        fd = own.fileno()
        waiter = self._waiter = self.loop.create_future()
        self.loop.add_writer(fd, _wake, waiter)
        self.phase = WRITE
        self.deadline = self.worker.write_deadline
        try:
            await waiter
        finally:
            if self._own_sock is not None:
                self.loop.remove_writer(fd)
            if self.phase == WRITE:
                self.phase = BUSY
                self.deadline = None
        return True

    async def drain(self) -> None:
        """Wait until the transport took everything written so far (see send.py)."""
        if self.lost or self.transport.is_closing():
            raise ClientGone()
        waiter = self._waiter = self.loop.create_future()
        self.phase = WRITE
        self.deadline = self.worker.write_deadline
        try:
            await waiter
        finally:
            if self.phase == WRITE:
                self.phase = BUSY
                self.deadline = None

    # -- parsing --------------------------------------------------------------------------------

    def _feed(self, data: bytes) -> None:
        in_head = self._in_head
        try:
            self.parser.feed_data(data)
        except HttpParserUpgrade:
            # An Upgrade (websocket, h2c) or CONNECT: not served here. The request itself was
            # complete and is answered as plain HTTP/1.1; what follows it is not read.
            if self._pipeline:
                request, _, http11 = self._pipeline[-1]
                self._pipeline[-1] = (request, False, http11)
            self._dead = True
        except HttpParserError as exc:
            refusal, self._refusal = self._refusal, None
            if refusal is None:
                reason = str(exc) or type(exc).__name__
                refusal = BadRequest(f"malformed request: {reason}", code="bad_request")
            self._refuse(refusal)
        else:
            if self._in_head:
                # httptools reports a header only once it is complete: bound the bytes it is
                # holding for a header still arriving (the callbacks count exactly).
                if in_head:
                    self._head_raw += len(data)
                if self._head_raw > self.limits.max_header_bytes:
                    self._refuse(HeadersTooLarge(f"request headers longer than {self.limits.max_header_bytes} bytes"))

    def _refuse(self, error: HTTPError) -> None:
        self._pipeline.append((error, False, self._http11))
        self._dead = True
        self._in_message = False
        self._pause_reading()

    def _fail(self, error: HTTPError) -> None:
        self._refusal = error
        raise _Refused()

    # The parser calls on_url first for every request (there is no on_message_begin: one
    # callback less per request); on_message_complete resets what the next one needs.

    def on_url(self, url: bytes) -> None:
        if not self._in_message:
            self._in_message = self._in_head = True
        self._url += url
        if len(self._url) > self.limits.max_url_bytes:
            self._fail(URITooLong(f"URL longer than {self.limits.max_url_bytes} bytes"))

    def on_header(self, name: bytes, value: bytes) -> None:
        limits = self.limits
        self._nheaders += 1
        self._head_bytes += len(name) + len(value) + 4
        if self._nheaders > limits.max_headers:
            self._fail(HeadersTooLarge(f"more than {limits.max_headers} request headers"))
        if self._head_bytes + len(self._url) > limits.max_header_bytes:
            self._fail(HeadersTooLarge(f"request headers longer than {limits.max_header_bytes} bytes"))
        if not self._in_head:
            return  # a trailer of a chunked body: counted, not used
        key = name.decode("latin-1").lower()
        text = value.decode("latin-1")
        headers = self._headers
        if key in headers:
            headers[key] = f"{headers[key]}, {text}"
        else:
            headers[key] = text

    def on_headers_complete(self) -> None:
        self._in_head = False
        parser = self.parser
        version = parser.get_http_version()
        self._http11 = version == "1.1"
        if version != "1.1" and version != "1.0":
            self._http11 = True
            self._fail(HTTPVersionNotSupported(f"HTTP/{version} is not supported; use HTTP/1.1"))
        headers = self._headers
        if headers:
            encoding = headers.get("transfer-encoding")
            if encoding is not None:
                if not self._http11:
                    self._fail(BadRequest("Transfer-Encoding in an HTTP/1.0 request", code="bad_request"))
                if encoding.strip().lower() != "chunked":
                    self._fail(NotImplementedEncoding(f"Transfer-Encoding {encoding!r} is not supported; use chunked"))
            length = headers.get("content-length")
            limit = self.limits.max_body_bytes
            if length is not None and int(length) > limit:  # llhttp checked it is digits
                self._fail(PayloadTooLarge(f"request body larger than {limit} bytes", code="body_too_large"))
            expect = headers.get("expect")
            if expect is not None and expect.strip().lower() == "100-continue" and self._http11:
                if self._busy or self._pipeline:
                    self._continue_pending = True
                else:
                    self.transport.write(CONTINUE)
        if not self._busy:
            self.phase = BODY
            self.deadline = self.worker.idle_deadline

    def on_body(self, data: bytes) -> None:
        self._body_size += len(data)
        limit = self.limits.max_body_bytes
        if self._body_size > limit:
            self._fail(PayloadTooLarge(f"request body larger than {limit} bytes", code="body_too_large"))
        self._body.append(data)
        if not self._busy:
            self.deadline = self.worker.idle_deadline

    def on_message_complete(self) -> None:
        self._in_message = False
        self._continue_pending = False
        parser = self.parser
        keep_alive = parser.should_keep_alive()
        body = self._body
        url = self._url
        fixed = self._fixed.get(url)
        if fixed is not None and keep_alive and self._http11 and self._answer_fixed(*fixed):
            self._next_message()
            return
        try:
            path, query = _target(url)
        except UnicodeDecodeError:
            error = BadRequest("path is not valid UTF-8 once percent-decoded", code="bad_path")
            self._pipeline.append((error, keep_alive, self._http11))
            self._next_message()
            return
        except HttpParserError:
            self._pipeline.append((BadRequest("malformed request target", code="bad_request"), False, self._http11))
            self._dead = True
            return
        method = parser.get_method()
        request = Request(
            _METHODS.get(method) or method.decode("ascii"),
            path,
            query,
            self._headers,
            (body[0] if len(body) == 1 else b"".join(body)) if body else b"",
        )
        self._pipeline.append((request, keep_alive, self._http11))
        self._next_message()

    def _answer_fixed(self, path: str, response: Response, head: bytes, body: bytes) -> bool:
        """Answer a GET of one of the App's fixed responses (the health probe) from its encoded
        bytes, here in the parser's callback, as nginx's ``return 200`` does: no Request, no
        App, no Response. Only when that is exactly what the App would do (nothing observes
        requests, no signature is needed, the route is still the App's own) and nothing is
        queued before it; else False, and it is answered like any other request."""
        app = self.app
        if (
            self._busy or self._pipeline or self._dead or self._shutting_down or self.write_paused
            or not self.worker.fixed_ok
            or "upgrade" in self._headers  # llhttp stops after it: the answer must say "close"
            or app.fixed.get(path) is not response
            or (app.verifier is not None and path not in app.public_paths)
        ):
            return False
        method = self.parser.get_method()
        if method != b"GET" and method != b"HEAD":
            return False
        self.phase = BUSY  # answered: the settling after this read starts the next clock
        self._answered = True
        if method == b"HEAD":
            self.transport.write(head + self.worker.date_line + CRLF)
        else:
            self.transport.write(head + self.worker.date_line + CRLF + body)
        return True

    def _next_message(self) -> None:
        self._url = b""
        self._headers = {}
        if self._body:
            self._body = []
        self._body_size = self._head_bytes = self._head_raw = self._nheaders = 0

    # -- answering, in order --------------------------------------------------------------------

    def _advance(self) -> None:
        """Answer queued requests in order until one must wait; then parse what waited."""
        pipeline = self._pipeline
        while not self._busy:
            if pipeline:
                self._run(*pipeline.popleft())
            elif self._stash and not self._dead:
                data = b"".join(self._stash)
                self._stash.clear()
                self._feed(data)
            else:
                break
        if self._busy or self.lost:
            return
        if self._dead or self._shutting_down or self._eof:
            if self.phase != LINGER:
                self._close()
            return
        if self._in_message:
            if self.phase not in (HEAD, BODY):
                self.phase = HEAD if self._in_head else BODY
                self.deadline = self.worker.head_deadline
            if self._continue_pending and not self._in_head:
                self._continue_pending = False
                self.transport.write(CONTINUE)
        else:
            self.phase = IDLE
            self.deadline = self.worker.idle_deadline
        if self._reading_paused:
            self._reading_paused = False
            self.transport.resume_reading()

    def _run(self, item: Request | HTTPError, keep_alive: bool, http11: bool) -> None:
        """Answer one request. A plain handler that never blocks runs here, and a response that
        fits the socket is written here: no coroutine, no task, no trip around the loop.
        Whatever must wait (an async or blocking handler, a full socket) becomes a task."""
        self.phase = BUSY
        self.deadline = None
        if isinstance(item, HTTPError):
            self._answer(error_response(item), False, keep_alive, http11)
        elif self._runs_inline(item):
            try:
                response = self.app.handle(item)
            except BaseException as exc:  # noqa: BLE001 - handle answers errors itself: a bug
                self._crashed(exc)
            else:
                self._answer(response, item.method == "HEAD", keep_alive, http11)
        else:
            self._start(self._cycle(self.app.handle_async(item), item, keep_alive, http11))

    def _answer(self, response: Response, head_only: bool, keep_alive: bool, http11: bool) -> None:
        if self._shutting_down:
            keep_alive = False
        try:
            written = send_simple(self, response, keep_alive, http11)
        except OSError as exc:  # FileChanged, or reading a file failed (EIO): nothing was sent
            log.warning("aborting a response: %s", exc)
            _close_quietly(response)
            self._abort()
            return
        except Exception:  # a bug of ours, or a body segment of a kind we do not send
            log.exception("a response could not be sent; aborting the connection")
            _close_quietly(response)
            self._abort()
            return
        if written:
            if response.files:
                _close_quietly(response)
            self._finished(keep_alive)
            return
        coro = self._respond(response, head_only, keep_alive, http11, simple=False)
        try:
            awaited = coro.send(None)
        except StopIteration as stop:
            self._finished(stop.value)
        except BaseException as exc:  # noqa: BLE001 - a bug of ours: cut this connection only
            self._crashed(exc)
        else:
            self._start(_resume(coro, awaited))

    def _start(self, coro: Any) -> None:
        task = self.loop.create_task(coro)
        self._busy = True
        self._task = task
        task.add_done_callback(self._task_done)

    def _task_done(self, task: asyncio.Task) -> None:
        self._task = None
        self._busy = False
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
            self._dead = True
            self._pipeline.clear()

    def _crashed(self, exc: BaseException) -> None:
        log.error("connection failed; closing it", exc_info=exc)
        self._abort()

    async def _cycle(self, handling: Any, request: Request, keep_alive: bool, http11: bool) -> bool:
        response = await handling
        return await self._respond(response, request.method == "HEAD", keep_alive, http11)

    async def _respond(self, response: Response, head_only: bool, keep_alive: bool, http11: bool,
                       simple: bool = True) -> bool:
        """Send ``response`` (``simple``: try the one-write path first; the caller did not)."""
        if self._shutting_down:
            keep_alive = False
        try:
            if simple and send_simple(self, response, keep_alive, http11):
                return keep_alive
            return await send_response(self, response, head_only, keep_alive, http11)
        except ClientGone:
            return False
        except BadResponse as exc:
            log.error("cannot send the response of a handler: %s", exc)
            _close_quietly(response)
            response = error_response(HTTPError("internal server error"))
            try:
                return await send_response(self, response, head_only, False, http11)
            except ClientGone:
                return False
        except (FileChanged, BodyLengthMismatch) as exc:
            log.warning("aborting a response: %s", exc)
            self._abort()
            return False
        except OSError as exc:  # reading a file failed midway (EIO, ...)
            log.warning("aborting a response: %s", exc)
            self._abort()
            return False
        except Exception:
            log.exception("a response failed midway; aborting the connection")
            self._abort()
            return False
        finally:
            _close_quietly(response)

    # -- closing --------------------------------------------------------------------------------

    def _close(self) -> None:
        """Close after what was written; first read and drop what the client still sends."""
        self._dead = True
        self._pipeline.clear()
        self._stash.clear()
        transport = self.transport
        if self.lost or transport.is_closing():
            return
        if not self._eof and transport.can_write_eof():
            transport.write_eof()
            self.phase = LINGER
            self.deadline = self.loop.time() + LINGER_SECONDS
            if self._reading_paused:
                self._reading_paused = False
                transport.resume_reading()
        else:
            transport.close()

    def _abort(self) -> None:
        self._dead = True
        self._pipeline.clear()  # nothing queued behind runs: the connection is going
        self._stash.clear()
        self.deadline = None
        if self.transport is not None:
            self.transport.abort()

    def _pause_reading(self) -> None:
        if not self._reading_paused and not self.lost:
            self._reading_paused = True
            self.transport.pause_reading()

    def on_timeout(self) -> None:
        """Called by the worker's sweep once ``deadline`` passed."""
        phase = self.phase
        self.deadline = None
        if phase in (HEAD, BODY) and not self._busy and not self._dead:
            self._refuse(HTTPError("the request took too long to arrive", status=408, code="request_timeout"))
            self._advance()
        elif phase == WRITE:
            log.debug("closing a connection whose client stopped reading")
            self._abort()
        elif phase == LINGER:
            self._abort()
        elif not self._busy:
            self._close()

    def shutdown(self) -> None:
        """Graceful stop: close now if idle, else once the response in flight is written."""
        self._shutting_down = True
        if not self._busy and not self._pipeline and not self.lost:
            self._close()

    def abort(self) -> None:
        if self._task is not None:
            self._task.cancel()
        self._abort()


def _wake(waiter: asyncio.Future) -> None:
    if not waiter.done():
        waiter.set_result(None)


def _close_quietly(response: Response) -> None:
    try:
        response.close()
    except Exception:
        log.exception("closing a response failed")


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


class _Resume:
    """Await a coroutine that was already stepped by hand and is suspended on ``first``."""

    __slots__ = ("coro", "first")

    def __init__(self, coro: Any, first: Any) -> None:
        self.coro = coro
        self.first = first

    def __await__(self) -> Any:
        coro, value = self.coro, self.first
        while True:
            try:
                yield value
            except BaseException as exc:  # noqa: BLE001 - thrown in by the task: cancellation
                try:
                    value = coro.throw(exc)
                except StopIteration as stop:
                    return stop.value
            else:
                try:
                    value = coro.send(None)
                except StopIteration as stop:
                    return stop.value


async def _resume(coro: Any, first: Any) -> Any:
    return await _Resume(coro, first)
