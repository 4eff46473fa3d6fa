"""How bytes leave the socket: :class:`ResponseWriter` writes one connection's responses with as
few system calls as we can.

The head, the part headers and small file slices are gathered into one buffer list and leave in
one ``writev`` (uvloop's ``writelines``) per ``write_chunk``: a batch of small files is one
``pread`` each and a few writes, not three system calls a file. A response whose files hold
at most one chunk is written whole, synchronously: small slices read into one ``writev``, head
included, and a slice of ``sendfile_min`` (a 64 KB file) by ``sendfile`` right after the head,
so that it is not copied twice. In a larger response, a slice of at least ``sendfile_min``
leaves through ``os.sendfile`` on the socket itself too, zero-copy, once the
transport's own buffer is empty so that bytes stay in order. What precedes it (the head, part
headers) is sent with ``MSG_MORE``, so that it rides in a full segment with the file's data
instead of going out as a small packet that wakes the client for a few hundred bytes. The
socket is not corked (``TCP_CORK``, nginx's ``tcp_nopush``): a cork costs two ``setsockopt``
calls a response, and holding a whole response back until it is released made the kernel's
loopback path cost the server about twice the CPU per 512 KB response (BENCHMARKS.md). Under TLS, or with
``AXON_NO_SENDFILE=1``, every slice is read in ``Limits.chunk_size`` chunks instead.

Flow control (waiting for a client that does not keep up) is :class:`~.flow.FlowControl`'s;
when ``sendfile`` meets a full socket it waits there until the socket takes more, and should no
descriptor be left to watch the socket with, one small chunk is handed to the transport instead,
which queues it and resumes us once it drained.

What goes wrong while writing is decided here too (:meth:`ResponseWriter.respond`). A response
whose head cannot be encoded is replaced by a 500. A slice shorter than it claimed (the file
shrank under us) raises ``FileChanged``, and the connection is aborted rather than send a part
shorter than its ``Content-Length``; so is it when a stream with a declared ``Content-Length``
delivers more or fewer bytes (h11's rule), or when a file cannot be read.
"""

from __future__ import annotations

import asyncio
import logging
import os
from typing import TYPE_CHECKING, Any

from ..chunks import read_slice
from ..errors import ClientGone, FileChanged, HTTPError
from ..response import Response, error_response
from ..streams import aiter_stream
from .wire import CHUNKED, CLOSE, CRLF, KEEP_ALIVE, LAST_CHUNK, UnsafeHeader, chunk_head, encode_head

if TYPE_CHECKING:
    from .exchange import Exchange
    from .flow import FlowControl
    from .shortcuts import FixedAnswer, Head
    from .roles import WorkerView

#: Bytes read from the file and handed to the transport when ``sendfile`` finds the socket full
#: and no descriptor is left to watch the socket with.
NUDGE = 16 * 1024
#: Below this many bytes a buffer list is joined into one bytes object (cheaper than an iovec).
JOIN_MAX = 16 * 1024
#: A body already in memory (small files the open-file cache holds, a handler's bytes) of up to
#: this size leaves in one ``writev``; the transport keeps references to what the socket did not
#: take, so a slow reader of one costs little more than the cached bytes it shares.
MEMORY_BODY_MAX = 256 * 1024

log = logging.getLogger("axon.server")

__all__ = ["BadResponse", "BodyLengthMismatch", "ResponseWriter", "fits_one_write"]


def fits_one_write(length: int, read: int, chunk: int) -> bool:
    """Whether a body of ``length`` bytes, ``read`` of them to read from files, is written at once
    (:meth:`ResponseWriter.respond_now`): at most one ``chunk`` to read, and the rest in memory
    already (at most ``MEMORY_BODY_MAX``): fewer system calls than the async path, nothing to wait
    for while the socket takes one chunk, no more held for a slow reader."""
    return length <= chunk or (read <= chunk and length - read <= MEMORY_BODY_MAX)


class BadResponse(Exception):
    """A handler's response cannot be encoded (unsafe or non-latin-1 header); nothing was sent."""


class BodyLengthMismatch(Exception):
    """A stream with a declared ``Content-Length`` delivered more or fewer bytes (h11's rule)."""


class ResponseWriter:
    """Writes the responses of one connection, one at a time, in the order it asks.

    :meth:`respond_now` writes a response that fits one write, synchronously; :meth:`respond`
    writes any response, waiting whenever the client does not keep up. Both frame the response
    for its :class:`~.exchange.Exchange` (the ``Connection`` header from its ``keep_alive`` and
    ``http11``).
    """

    def __init__(self, transport: Any, flow: FlowControl, worker: WorkerView, sock_fd: int) -> None:
        #: Where bytes go; the connection sets it again if it is replaced.
        self.transport = transport
        self._flow = flow
        self._worker = worker
        self._app = worker.app
        #: The socket's descriptor for ``sendfile``; -1 copies every slice (TLS, switched off).
        self._sock_fd = sock_fd
        self._sendfile_min = worker.config.sendfile_min
        # Bytes gathered per write: many small parts per writev with sendfile for the large ones;
        # one Limits.chunk_size at a time where everything is copied (TLS, no sendfile).
        self._chunk = worker.config.write_chunk if sock_fd >= 0 else worker.limits.chunk_size
        self._outbox = worker.outbox
        #: Whole answers of this turn of the loop, not yet handed to the transport (:mod:`.outbox`).
        self._held: list[bytes] | None = None
        self._held_bytes = 0

    # -- responses ------------------------------------------------------------------------------

    def _fits(self, body: list, length: int) -> bool:
        if length <= self._chunk:
            return True
        read = 0
        for seg in body:
            if type(seg) is not bytes:
                read += seg[2]
        return fits_one_write(length, read, self._chunk)

    def _tail(self, exchange: Exchange) -> bytes:
        tail = self._worker.date_line
        if not exchange.keep_alive:
            return tail + CLOSE
        if not exchange.http11:
            return tail + KEEP_ALIVE
        return tail

    def respond_now(self, response: Response, exchange: Exchange) -> bool:
        """Write a response that fits one write (:meth:`_fits`), and close it: health, errors,
        JSON, a body already in memory (small files the open-file cache holds), or up to one
        chunk to read from files (:meth:`_write_now`); never a stream, nor while the socket is
        full. True once done with it: written, or the connection cut because a file could not be
        read as planned or the client went away (``exchange.keep_alive`` is then False). False,
        with nothing written, for anything else: :meth:`respond` then writes it."""
        if response.stream is not None or self._flow.paused:
            return False
        body = response.body
        if not self._fits(body, response.length):  # type: ignore[arg-type]
            return False  # more to read than one chunk (sendfile, by chunks), or much to hold
        try:
            head = encode_head(response.status, response.reason, response.headers, self._tail(exchange))
        except (UnsafeHeader, UnicodeError, TypeError, ValueError):
            return False  # respond() says why, and answers 500
        self._send_now(head, body, response.length, response.files, exchange)  # type: ignore[arg-type]
        return True

    def send_remembered(self, head: Head, files: list, body: list, exchange: Exchange) -> bool:
        """Write a remembered head (:mod:`.shortcuts`) with this second's ``Date`` and ``body``
        (its files, opened anew), and close the files, as :meth:`respond_now` does. False, with
        the files closed and nothing written, if it does not fit one write."""
        length = head.length
        if not files:  # every file's bytes in memory: the body is bytes, held as it is
            if not fits_one_write(length, 0, self._chunk):
                return False
        elif not self._fits(body, length):
            for f in files:
                f.close()
            return False
        head_bytes = b"".join((head.head, self._tail(exchange), CRLF))
        if files:
            self._send_now(head_bytes, body, length, files, exchange)
        else:
            self._hold([head_bytes, *body], len(head_bytes) + length)
        return True

    def _send_now(self, head: bytes, body: list, length: int, files: Any, exchange: Exchange) -> None:
        """Write ``head`` and ``body`` now (or hold them to the end of the loop's turn), then close
        ``files``; on a failure, cut the connection."""
        try:
            if not body:
                self._hold([head], len(head))
            elif len(body) == 1 and type(body[0]) is bytes:
                self._hold([head, body[0]], len(head) + len(body[0]))
            else:
                self._write_now([head], body, length)
        except (ClientGone, BrokenPipeError, ConnectionError):  # sending found the client gone
            self._cut(files, exchange)
            return
        except OSError as exc:  # FileChanged, or reading a file failed (EIO)
            log.warning("aborting a response: %s", exc)
            self._cut(files, exchange)
            return
        except Exception:  # a bug of ours, or a body segment of a kind we do not send
            log.exception("a response could not be sent; aborting the connection")
            self._cut(files, exchange)
            return
        for f in files:
            f.close()

    def send_fixed(self, fixed: FixedAnswer, head_only: bool = False) -> None:
        """Write one of the App's fixed answers (:mod:`.shortcuts`) with this second's ``Date``;
        its head alone with ``head_only`` (a HEAD)."""
        date = self._worker.date_line
        if head_only:
            data = b"".join((fixed.head, date, CRLF))
        else:
            whole = fixed.whole  # one read: the line and the answer made with it
            if whole[0] is not date:  # a new second (the worker's line is one object a second)
                whole = fixed.whole = (date, b"".join((fixed.head, date, CRLF, fixed.body)))
            data = whole[1]
        self._hold([data], len(data))

    def _hold(self, buffers: list[bytes], size: int) -> None:
        """Keep one whole answer (``buffers``, ``size`` bytes in all; joined when small) for the
        outbox to write when the loop's turn ends. Past ``MEMORY_BODY_MAX`` held (a large answer,
        or a client pipelining many requests in one read), what is held is handed over at once:
        a socket that does not take it pauses the connection (flow control), and its next
        requests wait for the client as any response does."""
        if size <= JOIN_MAX and len(buffers) > 1:
            buffers = [b"".join(buffers)]
        held = self._held
        if held is None:
            self._held = buffers
            self._held_bytes = size
            self._outbox.hold(self)
        else:
            held.extend(buffers)  # pipelined answers of one read: in order
            self._held_bytes += size
        if self._held_bytes > MEMORY_BODY_MAX:
            self.release()

    def release(self) -> None:
        """Hand what is held to the transport: the outbox at the end of the turn, or this writer
        before it writes anything by another way. Dropped if the connection is closing."""
        held, self._held = self._held, None
        if held is None:
            return
        transport = self.transport
        if transport.is_closing():  # cut, or the client went away
            return
        if len(held) == 1:
            transport.write(held[0])
        else:
            transport.writelines(held)

    def _write_now(self, out: list[bytes], body: list, length: int) -> None:
        """Write ``out`` and then ``body`` (at most one chunk to read, see :meth:`respond_now`)
        now, without waiting: a slice by one ``pread`` into one ``writev`` with the rest, or,
        if it is at least ``sendfile_min``, by ``sendfile``, what precedes it with ``MSG_MORE``
        (as :meth:`write` does, but synchronously: a 64 KB file is not copied twice). What the
        socket does not take of such a slice is read and handed to the transport, which sends
        it, and all that follows, in order; FileChanged if the file is shorter than planned.
        ``length``, the body's, only chooses between joining what is gathered and ``writev``."""
        flow = self._flow
        transport = self.transport
        big = self._sendfile_min if self._sock_fd >= 0 else -1
        direct = False  # whether anything went to the socket by sendfile: then the rest follows it
        for seg in body:
            if type(seg) is bytes:
                out.append(seg)
                continue
            fd, offset, count = seg
            if not 0 <= big <= count:
                out.append(read_slice(fd, offset, count))
                continue
            if not direct:
                direct = True
                self.release()  # what this connection holds goes first
            if out:
                flow.send_more(out)
                out = []
            sent = 0
            # sendfile only while the transport holds nothing (else its bytes go first): paused
            # says so, and the buffer's size too where a writelines() of what was held leaves
            # some unsent without pausing us (asyncio's selector transport before 3.12.9/3.13.2).
            if not flow.paused and not transport.get_write_buffer_size():
                try:
                    sent = os.sendfile(self._sock_fd, fd, offset, count)
                except BlockingIOError:
                    pass
            if sent < count:  # a full socket, or the file shrank (read_slice raises FileChanged)
                transport.write(read_slice(fd, offset + sent, count - sent))
        if not out:
            return
        if direct:
            _write(transport, out, length)
        else:
            self._hold(out, len(out[0]) + length)  # the head and the body

    async def respond(self, response: Response, exchange: Exchange, tried: bool = False) -> bool:
        """Write ``response``, waiting for the client as needed, and close it; return whether the
        connection may carry another request. ``tried``: :meth:`respond_now` was tried already.
        A failure is dealt with here: the client gone ends the connection; a head that cannot be
        encoded is answered 500; a body that cannot be what it claimed cuts the connection."""
        if not tried and self.respond_now(response, exchange):
            return exchange.keep_alive
        self.release()  # what this connection holds goes first
        try:
            await self.write(response, exchange)
            return exchange.keep_alive
        except ClientGone:
            return False
        except BadResponse as exc:
            log.error("cannot send the response of a handler: %s", exc)
            _close_quietly(response)
            response = error_response(HTTPError("internal server error"))
            if exchange.head:
                response.without_body()
            exchange.keep_alive = False
            try:
                await self.write(response, exchange)
            except ClientGone:
                pass
            return False
        except (FileChanged, BodyLengthMismatch) as exc:
            log.warning("aborting a response: %s", exc)
        except OSError as exc:  # reading a file failed midway (EIO, ...)
            log.warning("aborting a response: %s", exc)
        except Exception:
            log.exception("a response failed midway; aborting the connection")
        finally:
            _close_quietly(response)
        self._cut((), exchange)
        return False

    def _cut(self, files: Any, exchange: Exchange) -> None:
        """Abort the connection, closing ``files``: what was written cannot be completed as it claimed."""
        for f in files:
            try:
                f.close()
            except Exception:
                log.exception("closing a file failed")
        exchange.keep_alive = False
        self._held = None  # an earlier answer held is lost with the connection, as if written
        self.transport.abort()

    async def write(self, response: Response, exchange: Exchange) -> None:
        """Write ``response``, waiting for the client as needed. A body that only the end of the
        connection can delimit sets ``exchange.keep_alive`` to False."""
        if response.stream is not None:
            await self._write_stream(response, exchange)
            return
        head = self._head(response, exchange)
        if self._flow.paused:
            await self._flow.drain()
        body = response.body
        if not body:
            self.transport.write(head)
        elif len(body) == 1 and type(body[0]) is bytes:
            self.transport.write(head + body[0])  # type: ignore[operator]
        else:
            await self._write_segments(head, body)

    def _head(self, response: Response, exchange: Exchange, extra: bytes = b"") -> bytes:
        tail = self._worker.date_line + extra
        if not exchange.keep_alive:
            tail += CLOSE
        elif not exchange.http11:
            tail += KEEP_ALIVE
        try:
            return encode_head(response.status, response.reason, response.headers, tail)
        except (UnsafeHeader, UnicodeError, TypeError, ValueError) as exc:
            raise BadResponse(str(exc)) from exc

    async def _write_segments(self, head: bytes, body: list) -> None:
        transport = self.transport
        flow = self._flow
        chunk = self._chunk
        big = self._sendfile_min if self._sock_fd >= 0 else -1
        pread = os.pread
        out: list = [head]
        size = len(head)
        for seg in body:
            if type(seg) is bytes:
                out.append(seg)
                size += len(seg)  # type: ignore[arg-type]
            else:
                fd, offset, count = seg
                if 0 <= big <= count:
                    if out:
                        # The head and part headers wait for the file's data (MSG_MORE)
                        # rather than go out as a small packet of their own.
                        flow.send_more(out)
                        out, size = [], 0
                    await self._sendfile(fd, offset, count)
                    continue
                while count:
                    take = chunk if count > chunk else count
                    data = pread(fd, take, offset)
                    if len(data) != take:  # end of file early: read_slice retries, or raises
                        data = read_slice(fd, offset, take)
                    out.append(data)
                    size += take
                    offset += take
                    count -= take
                    if size >= chunk:
                        _write(transport, out, size)
                        out, size = [], 0
                        if flow.paused:
                            await flow.drain()
                continue
            if size >= chunk:
                _write(transport, out, size)
                out, size = [], 0
                if flow.paused:
                    await flow.drain()
        if out:
            _write(transport, out, size)

    async def _sendfile(self, fd: int, offset: int, count: int) -> None:
        transport = self.transport
        flow = self._flow
        sendfile = os.sendfile
        while count:
            if flow.paused:
                await flow.drain()
                continue
            if transport.get_write_buffer_size():
                # Not paused yet something queued (cannot happen with a high-water mark of 0);
                # let the loop flush it rather than send out of order.
                await asyncio.sleep(0.001)
                continue
            # Checked right before the call, with no await between: a closing transport may have
            # closed its descriptor already, and the number could now belong to another client.
            if flow.gone():
                raise ClientGone()
            try:
                sent = sendfile(self._sock_fd, fd, offset, count)
            except BlockingIOError:
                if not await flow.writable():
                    # Out of descriptors to watch with: hand the transport one small chunk read
                    # from the file; it queues it, pauses us, and resumes us once it drained.
                    take = min(NUDGE, count)
                    transport.write(read_slice(fd, offset, take))
                    offset += take
                    count -= take
                continue
            except (BrokenPipeError, ConnectionError) as exc:
                raise ClientGone() from exc
            if not sent:
                raise FileChanged(f"file shrank while streaming (fd {fd}, {count} bytes missing at {offset})")
            offset += sent
            count -= sent

    async def _write_stream(self, response: Response, exchange: Exchange) -> None:
        """A body of unknown length: chunked on HTTP/1.1, delimited by closing the connection on
        HTTP/1.0. A stream whose handler declared a ``Content-Length`` is sent as is and must
        deliver exactly that."""
        declared = None
        for name, value in response.headers:
            if name.lower() == "content-length":
                try:
                    declared = int(value)
                except ValueError:
                    raise BadResponse(f"bad Content-Length {value!r}") from None
        chunked = declared is None and exchange.http11
        if declared is None and not exchange.http11:
            exchange.keep_alive = False
        head = self._head(response, exchange, CHUNKED if chunked else b"")
        flow = self._flow
        if flow.paused:
            await flow.drain()
        transport = self.transport
        transport.write(head)
        sent = 0
        async for data in aiter_stream(response.stream, self._app.executor):  # type: ignore[arg-type]
            if not data:
                continue
            if flow.gone():
                raise ClientGone()
            if type(data) is not bytes:
                data = _unchanging(data)
            sent += len(data)
            if declared is not None and sent > declared:
                raise BodyLengthMismatch(f"stream longer than its Content-Length {declared}")
            if chunked:
                transport.writelines((chunk_head(len(data)), data, CRLF))
            else:
                transport.write(data)
            if flow.paused:
                await flow.drain()
        if declared is not None and sent != declared:
            raise BodyLengthMismatch(f"stream sent {sent} bytes of its Content-Length {declared}")
        if chunked:
            transport.write(LAST_CHUNK)


def _unchanging(data: Any) -> bytes | memoryview:
    """A stream's chunk as the transport may keep it until sent: a read-only, contiguous view of
    bytes as it is (an object body hands the store's buffer so, uncopied); anything else copied,
    since its owner may change it after it is queued. (The write buffer's high-water mark of 0
    means a stream is not asked for its next chunk before the last one left, so even a view
    whose memory changes later is sent as yielded; the copy is for a writer that stops waiting.)"""
    if type(data) is memoryview and data.readonly and data.contiguous and data.itemsize == 1 and data.ndim == 1:
        return data
    return bytes(data)


def _close_quietly(response: Response) -> None:
    try:
        response.close()
    except Exception:
        log.exception("closing a response failed")


def _write(transport: asyncio.Transport, out: list, size: int) -> None:
    if len(out) == 1:
        transport.write(out[0])
    elif size <= JOIN_MAX:
        transport.write(b"".join(out))
    else:
        transport.writelines(out)
