"""Reading requests: :class:`RequestReading`, the half of a connection (:mod:`.protocol`)
that turns bytes into complete requests, with the ``httptools`` (llhttp) parser's callbacks.

Bytes arrive in ``data_received`` and are parsed here into complete requests (the body read
whole, up to ``Limits.max_body_bytes``), which queue in order. Where it was built, the compiled
reader of simple heads (:mod:`.simplehead`) reads a plain ``GET`` or ``HEAD`` in one call before
llhttp sees it (``_feed_simple``), and answers it as the callbacks would. What a header list
becomes and its limits are decided by two functions of :mod:`axon.runtime`, which both paths
call: :func:`~axon.runtime.check_head` (414, 431; the compiled path asks it only for a head
past :func:`~axon.runtime.checked_from`'s sizes, within which it refuses none) and
:func:`~axon.runtime.fold_header`; the compiled reader only finds the bytes of a head (which are
a name, a value, where it ends).
One of the App's fixed answers (the health probe), or a head the worker remembered for a
repeatable route (a file, a batch) with its files opened anew, is sent from the parser's
callback, past the App (:mod:`.shortcuts`; ``_complete``).

Protection: URL, header bytes and header count are bounded while parsing (414, 431), a body by
``max_body_bytes`` (413, before ``100 Continue`` is sent), and malformed framing is a 400 from
llhttp (``Content-Length`` with ``Transfer-Encoding``, bad chunk sizes, bare LF, ...). After a
refusal nothing more is parsed (the connection is LAST, :mod:`.state`).

The parser calls back into the object it was made with, the connection: these methods are a
base class of :class:`~.protocol.HTTPProtocol`, which holds their state in its slots.
"""

from __future__ import annotations

from collections import deque
from time import perf_counter
from typing import TYPE_CHECKING, Any
from urllib.parse import unquote_to_bytes

from httptools import HttpParserError, HttpParserUpgrade, parse_url

from ..app import Request
from ..errors import BadRequest, HeadersTooLarge, HTTPError
from ..runtime import check_head, declared_length, fold_header
from .exchange import Exchange, exchange
from .state import BODY, CLOSING, HEAD, IDLE, NEW, State
from .wire import CONTINUE

if TYPE_CHECKING:
    from ..limits import Limits
    from .flow import FlowControl
    from .shortcuts import Shortcuts
    from .simplehead import SimpleHeadParser
    from .writer import ResponseWriter

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


class RequestReading:
    """The parser's callbacks and what feeds it; the connection's life (states, answering in
    order, closing) is :class:`~.protocol.HTTPProtocol`'s."""

    __slots__ = ()

    # What the connection holds for these methods (its slots).
    limits: Limits
    parser: Any
    state: State
    flow: FlowControl | None
    writer: ResponseWriter | None
    _transport: Any
    _simple_head: SimpleHeadParser | None
    _checked_from: tuple[int, int]
    _between: bool
    _exchange: Exchange | None
    _refusal: HTTPError | None
    _pipeline: deque[Exchange]
    _shortcuts: Shortcuts
    _get_fixed: Any
    _remembered: Any
    _open: Any
    _record_sent: Any
    _sync_files: Any
    _cached_files: Any
    peer: str | None  # the client's address, for the records (the connection sets it)

    if TYPE_CHECKING:  # the connection's own (:mod:`.protocol`)

        def _to(self, state: State) -> None: ...

        def _last(self) -> None: ...

        def _abort(self) -> None: ...

    def _feed(self, data: bytes, found: Any = False) -> None:
        """Parse ``data``; ``found``: what the compiled reader made of its first head already
        (``parse(data, 0)``'s answer), False if it was not asked."""
        if self._simple_head is not None:
            if self._between and self._exchange is None:
                data = self._feed_simple(data, found)
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
                # holding for a header still arriving (the callbacks count exactly). Only a head
                # that was arriving before this read owns all of it: one begun in it (after others
                # ended) owns its tail, at most this read, and is counted from the next read on.
                if in_head and ex is arriving:
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

    def _feed_simple(self, data: bytes, found: Any = False) -> bytes:
        """Read the simple heads that ``data`` begins with in one call each (:mod:`.simplehead`;
        ``found``: the first one's, read already, or False) and answer them as llhttp's callbacks
        would; return what is left for llhttp."""
        parse, start, size = self._simple_head, 0, len(data)
        most_fields, most_bytes = self._checked_from
        while start < size:
            if found is False:
                found = parse(data, start)  # type: ignore[misc]
            if found is None:
                break
            method, url, headers, end, count, field_bytes = found
            found = False
            if count > most_fields or end - start > most_bytes:  # within both check_head refuses none (runtime.checked_from)
                try:
                    check_head(len(url), count, field_bytes, self.limits)
                except HTTPError:
                    break  # llhttp's path refuses it, and says why as it counts
            start = end
            # Read whole, HTTP/1.1, and no "Connection" but "keep-alive".
            ex = exchange(url, headers, False, True)  # complete (not in its head), kept alive
            try:
                self._complete(ex, method)
            except Exception:  # noqa: BLE001 - what httptools makes of a callback's exception (_feed)
                self._refuse(_malformed(CALLBACK_ERROR))
            if self.state in CLOSING:
                return b""
        return data[start:] if start else data

    def _refuse(self, error: HTTPError) -> None:
        """Answer ``error`` once what is queued before it is answered; then close."""
        ex = self._exchange or exchange(b"")
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
            ex = self._exchange = exchange(url)
        else:
            ex.url += url
        try:
            check_head(len(ex.url), 0, 0, self.limits)
        except HTTPError as exc:
            self._fail(exc)

    def on_header(self, name: bytes, value: bytes) -> None:
        ex: Exchange = self._exchange  # type: ignore[assignment]
        ex.nheaders = count = ex.nheaders + 1
        ex.head_bytes = size = ex.head_bytes + len(name) + len(value)
        try:
            check_head(len(ex.url), count, size, self.limits)
        except HTTPError as exc:
            self._fail(exc)
        if ex.in_head:  # else a trailer of a chunked body: counted, not used
            fold_header(ex.headers, name, value)

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
        """``ex`` is read whole: answer it here, in the parser's callback, past the App, if the
        worker's shortcuts (:mod:`.shortcuts`) hold its answer (no Request, no routing, no
        Response); else queue it for the App (:meth:`_for_app`). The worker's tables hold only
        what the App allows now; this adds what the connection must allow: HTTP/1.1 kept alive,
        nothing queued before it, the socket free, no ``Upgrade`` (llhttp stops after it: the
        answer must say "close"). One method, not two: a call less for every request."""
        ex.head = head = method == b"HEAD"
        url = ex.url
        if (
            not ex.keep_alive or not ex.http11 or self._pipeline or self.state in CLOSING
            or self.flow.paused or "upgrade" in ex.headers  # type: ignore[union-attr]
        ):
            return self._for_app(ex, method, url)
        fixed = self._get_fixed(url)
        if fixed is not None:  # a fixed answer (the health probe), for GET and HEAD
            if method != b"GET" and not head:
                return self._for_app(ex, method, url)
            self.writer.send(fixed[1] if head else fixed[0], ex)  # type: ignore[union-attr]
        else:  # a remembered head, for a GET without a body, Range or a precondition
            remembered = self._remembered
            key = self._shortcuts.key(ex) if remembered.heads and method == b"GET" else None
            if key is None:
                return self._for_app(ex, method, url)
            self._sync_files()  # before its files are opened (and again by the App's path if it misses)
            started = perf_counter()
            found = remembered.recall(key, self._open, self._cached_files)
            if found is None:
                return self._for_app(ex, method, url)
            remembered_head, answer = found
            if not self.writer.send(answer, ex):  # type: ignore[union-attr]
                for f in answer.files:
                    f.close()
                return self._for_app(ex, method, url)  # too much to send at once: the App answers it
            self._record_sent(remembered_head.path, remembered_head.query, remembered_head.length,
                              len(remembered_head.paths), started, ex.headers, self.peer)
            if not ex.keep_alive:  # cut: a file could not be read as planned, or the client left
                self._abort()  # nothing more is parsed or answered on this connection
                return None
        self._to(IDLE)  # answered; the next request's first bytes start the header clock
        return None

    def _for_app(self, ex: Exchange, method: bytes, url: bytes) -> None:
        """Queue ``ex`` for the App: its Request made, or the refusal of its target."""
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
            self.peer,
        )
        self._pipeline.append(ex)


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
