"""How bytes leave the socket: :class:`ResponseWriter` writes one connection's answers with as
few system calls as we can.

Every answer is a prepared answer (:mod:`.answer`) and leaves through one method,
:meth:`ResponseWriter.send`, which completes its head (``Date``, ``Connection``: :meth:`_tail`)
and writes it at once when it fits one write (:func:`~.answer.fits_one_write`); anything else,
and a stream, takes the waiting path (:meth:`ResponseWriter.respond`). Both walk the body with
one method, :meth:`_gather`: bytes and small file slices gathered into one buffer list that
leaves in one ``writev`` (uvloop's ``writelines``); a slice of at least ``sendfile_min`` stops
the gathering and leaves by ``os.sendfile`` on the socket itself, zero-copy, once the transport's
own buffer is empty so that bytes stay in order (and so does a slice of a file that an object
body hands over: an object the disk tier keeps or fills, :meth:`ObjectBody.with_file_slices`).
What precedes it (the head, part headers) is
sent with ``MSG_MORE``, so that it rides in a full segment with the file's data. The socket is
not corked (``TCP_CORK``): a cork costs two ``setsockopt`` calls a response, and a response held
back whole makes the kernel's loopback path costlier (BENCHMARKS.md). Under TLS, or with
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
from ..http.segments import FileSlice
from ..response import Response, error_response
from ..streams import aiter_stream
from .answer import MEMORY_BODY_MAX, BadResponse, Prepared, fits_one_write, prepare, to_read
from .wire import CHUNKED, CLOSE, CRLF, KEEP_ALIVE, LAST_CHUNK, chunk_head

if TYPE_CHECKING:
    from .exchange import Exchange
    from .flow import FlowControl
    from .roles import WorkerView

#: Bytes read from the file and handed to the transport when ``sendfile`` finds the socket full
#: and no descriptor is left to watch the socket with.
NUDGE = 16 * 1024
#: Below this many bytes a buffer list is joined into one bytes object (cheaper than an iovec).
JOIN_MAX = 16 * 1024

log = logging.getLogger("axon.server")

__all__ = ["BadResponse", "BodyLengthMismatch", "ResponseWriter"]


class BodyLengthMismatch(Exception):
    """A stream with a declared ``Content-Length`` delivered more or fewer bytes (h11's rule)."""


class ResponseWriter:
    """Writes the answers of one connection, one at a time, in the order it asks.

    :meth:`send` writes a prepared answer that fits one write, synchronously, or says False;
    :meth:`respond` writes any response of the App, waiting whenever the client does not keep up.
    Both frame the answer for its :class:`~.exchange.Exchange` (:meth:`_tail`).
    """

    def __init__(self, transport: Any, flow: FlowControl, worker: WorkerView, sock_fd: int) -> None:
        #: Where bytes go; the connection sets it again if it is replaced.
        self.transport = transport
        self._flow = flow
        self._worker = worker
        self._app = worker.app
        #: The socket's descriptor for ``sendfile``; -1 copies every slice (TLS, switched off).
        self._sock_fd = sock_fd
        #: The smallest slice sent by ``sendfile``; -1: none is.
        self._big = worker.config.sendfile_min if sock_fd >= 0 else -1
        # Bytes gathered per write: many small parts per writev with sendfile for the large ones;
        # one Limits.chunk_size at a time where everything is copied (TLS, no sendfile).
        self._chunk = worker.config.write_chunk if sock_fd >= 0 else worker.limits.chunk_size
        self._outbox = worker.outbox
        #: The loop turn's budget: a body written by the waiting path asks it before each chunk.
        self._pace = worker.pace
        #: Whole answers of this turn of the loop, not yet handed to the transport (:mod:`.outbox`).
        self._held: list[bytes] | None = None
        self._held_bytes = 0

    def _tail(self, exchange: Exchange, extra: bytes = b"") -> bytes:
        """What completes every head before its blank line: ``Date`` and ``Server``, ``extra``,
        and the ``Connection`` the exchange needs (close, or keep-alive for HTTP/1.0). It reads
        the worker's ``date_line`` and the exchange's ``keep_alive`` and ``http11`` only: a whole
        answer (:meth:`send`) is made again when one of them changes."""
        tail = self._worker.date_line
        if extra:
            tail += extra
        if not exchange.keep_alive:
            return tail + CLOSE
        if not exchange.http11:
            return tail + KEEP_ALIVE
        return tail

    # -- at once --------------------------------------------------------------------------------

    def send(self, answer: Prepared, exchange: Exchange) -> bool:
        """Write ``answer`` now if it fits one write (:func:`~.answer.fits_one_write`; never
        while the socket is full), and close its files. True once done with it: written (or
        held to the turn's end), or the connection cut because a file could not be read as
        planned or the client went away (``exchange.keep_alive`` is then False). False, with
        nothing written and its files open, for anything else."""
        if self._flow.paused:
            return False
        whole = answer.whole
        if whole is not None:  # bytes sent again and again (held whatever their size): made whole once a tail
            date, keep_alive, http11 = self._worker.date_line, exchange.keep_alive, exchange.http11
            if whole[0] is not date or whole[1] is not keep_alive or whole[2] is not http11:  # what _tail reads
                data = b"".join((answer.head, self._tail(exchange), CRLF, *answer.body))
                whole = answer.whole = (date, keep_alive, http11, data)
            data = whole[3]
            self.hold([data], len(data))
            return True
        body = answer.body
        length = answer.length
        read = answer.read
        if length > self._chunk and not fits_one_write(length, to_read(body) if read is None else read, self._chunk):
            return False  # more to read than one chunk (sendfile, by chunks), or much to hold
        files = answer.files
        try:
            if read == 0 or not body or (len(body) == 1 and type(body[0]) is bytes):  # bytes only: nothing to walk
                tail = self._tail(exchange)  # the head completed and the body joined in one (hold)
                self.hold([answer.head, tail, CRLF, *body], len(answer.head) + len(tail) + 2 + length)
            else:
                head = b"".join((answer.head, self._tail(exchange), CRLF))
                out = [head]
                i, size = self._gather(out, len(head), body, 0, len(head) + length + 1)
                if i == len(body):  # every slice read into out: one answer to hold
                    self.hold(out, size)
                else:
                    self._write_now(out, body, i, length)
        except (ClientGone, BrokenPipeError, ConnectionError):  # sending found the client gone
            self._cut(files, exchange)
            return True
        except OSError as exc:  # FileChanged, or reading a file failed (EIO)
            log.warning("aborting a response: %s", exc)
            self._cut(files, exchange)
            return True
        except Exception:  # a bug of ours, or a body segment of a kind we do not send
            log.exception("a response could not be sent; aborting the connection")
            self._cut(files, exchange)
            return True
        for f in files:
            f.close()
        return True

    def respond_now(self, response: Response, exchange: Exchange) -> bool:
        """The App's ``response`` through :meth:`send`, if it is not a stream and its head can be
        encoded (else False: :meth:`respond` says why, and answers 500)."""
        if response.stream is not None:
            return False
        try:
            answer = prepare(response)
        except BadResponse:
            return False
        return self.send(answer, exchange)

    def hold(self, buffers: list[bytes], size: int) -> None:
        """Keep one whole answer (``buffers``, ``size`` bytes in all; joined when small) for the
        outbox to write when the loop's turn ends. Past ``MEMORY_BODY_MAX`` held (a large answer,
        or a client pipelining many requests in one read), what is held is handed over at once:
        a socket that does not take it pauses the connection (flow control), and its next
        requests wait for the client as any response does."""
        if len(buffers) > 1 and size <= JOIN_MAX:
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

    def _gather(self, out: list, size: int, body: list, i: int, budget: int) -> tuple[int, int]:
        """The one walk of a body: append ``body[i:]`` to ``out`` (``size`` bytes so far), bytes as
        they are and file slices read, until ``size`` reaches ``budget`` or a slice to send by
        ``sendfile`` comes; return where it stopped and the new size (short of ``budget`` before
        the end: it stopped at a slice for ``sendfile``). A slice longer than ``budget`` is read
        in part, its rest left in ``body`` (which must be a list of the caller's own then).
        FileChanged if a file is shorter than planned."""
        big = self._big
        for j in range(i, len(body)):
            seg = body[j]
            if type(seg) is bytes:
                out.append(seg)
                size += len(seg)  # type: ignore[arg-type]
            else:
                fd, offset, count = seg
                if 0 <= big <= count:
                    return j, size  # a slice for sendfile: the caller sends it
                if count > budget:
                    out.append(read_slice(fd, offset, budget))
                    body[j] = (fd, offset + budget, count - budget)
                    return j, size + budget
                out.append(read_slice(fd, offset, count))
                size += count
            if size >= budget:
                return j + 1, size
        return len(body), size

    def _write_now(self, out: list[bytes], body: list, i: int, length: int) -> None:
        """Write ``out`` (what :meth:`send` gathered) and then ``body[i:]``, which begins with a
        slice of at least ``sendfile_min`` (at most one chunk to read in all, see :meth:`send`),
        now, without waiting: such a slice by ``sendfile``, what precedes it with ``MSG_MORE``
        (a 64 KB file is not copied twice), the rest gathered into one ``writev``. What the
        socket does not take of such a slice is read and handed to the transport, which sends
        it, and all that follows, in order. ``length``, the body's, only chooses between joining
        what is gathered and ``writev``."""
        flow = self._flow
        transport = self.transport
        self.release()  # what this connection holds goes first
        end = len(body)
        while i < end:
            fd, offset, count = body[i]  # a slice for sendfile
            i += 1
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
            i = self._gather(out, 0, body, i, length + 1)[0]
        if out:
            _write(transport, out, length)

    # -- waiting for the client -----------------------------------------------------------------

    async def respond(self, response: Response, exchange: Exchange, tried: bool = False) -> bool:
        """Write ``response``, waiting for the client as needed, and close it; return whether the
        connection may carry another request. ``tried``: :meth:`respond_now` was tried already.
        A failure is dealt with here: the client gone ends the connection; a head that cannot be
        encoded is answered 500; a body that cannot be what it claimed cuts the connection."""
        if not tried and self.respond_now(response, exchange):
            return exchange.keep_alive
        self.release()  # what this connection holds goes first
        try:
            await self._write_later(response, exchange)
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
                await self._write_later(response, exchange)
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

    async def _write_later(self, response: Response, exchange: Exchange) -> None:
        """Write ``response``, waiting for the client as needed: a chunk at a time, slices of
        ``sendfile_min`` by ``sendfile``. A body that only the end of the connection can delimit
        sets ``exchange.keep_alive`` to False."""
        if response.stream is not None:
            await self._write_stream(response, exchange)
            return
        answer = prepare(response)
        head = b"".join((answer.head, self._tail(exchange), CRLF))
        transport = self.transport
        flow = self._flow
        if flow.paused:
            await flow.drain()
        body = answer.body
        if not body:
            transport.write(head)
            return
        if len(body) == 1 and type(body[0]) is bytes:
            transport.write(head + body[0])  # type: ignore[operator]
            return
        body = list(body)  # _gather leaves a slice's rest in it
        chunk = self._chunk
        pace = self._pace
        out: list = [head]
        size = len(head)
        i, end = 0, len(body)
        while True:
            if pace.must_wait():  # others wait, or this loop turn has done its share (axon.pace)
                await pace.wait()
            i, size = self._gather(out, size, body, i, chunk)
            if i == end:
                if out:
                    _write(transport, out, size)
                return
            if size < chunk:  # stopped at a slice for sendfile
                if out:
                    # The head and part headers wait for the file's data (MSG_MORE) rather than
                    # go out as a small packet of their own.
                    flow.send_more(out)
                    out, size = [], 0
                fd, offset, count = body[i]
                i += 1
                await self._sendfile(fd, offset, count)
                continue
            _write(transport, out, size)
            out, size = [], 0
            if flow.paused:
                await flow.drain()

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
        head = b"".join((prepare(response).head, self._tail(exchange, CHUNKED if chunked else b""), CRLF))
        flow = self._flow
        if flow.paused:
            await flow.drain()
        transport = self.transport
        transport.write(head)
        sent = 0
        stream = response.stream
        # A stream that can hand slices of files (an object body: objects the disk tier keeps or
        # fills) sends those as the files of any body are sent: by sendfile, not read and copied.
        with_file_slices = getattr(stream, "with_file_slices", None)
        if with_file_slices is not None and self._big >= 0:
            chunks = with_file_slices(self._big)
        else:
            chunks = aiter_stream(stream, self._app.executor)  # type: ignore[arg-type]
        async for data in chunks:
            from_file = type(data) is FileSlice
            if not from_file and type(data) is not bytes:
                data = _unchanging(data)
            size = data.count if from_file else len(data)
            if not size:  # (chunked, an empty chunk would end the body)
                continue
            if flow.gone():
                raise ClientGone()
            sent += size
            if declared is not None and sent > declared:
                raise BodyLengthMismatch(f"stream longer than its Content-Length {declared}")
            if from_file:
                if chunked:
                    transport.write(chunk_head(size))
                await self._sendfile(*data)
                if chunked:
                    transport.write(CRLF)
                continue
            if chunked:
                transport.writelines((chunk_head(size), data, CRLF))
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
