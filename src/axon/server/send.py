"""Writing a :class:`~axon.response.Response` to a connection with as few system calls as we can.

The head, the part headers and small file slices are gathered into one buffer list and leave in
one ``writev`` (uvloop's ``writelines``) per ``write_chunk`` (64 KiB): a batch of 32 files of
4 KiB is 32 ``pread`` and 3 writes, not a hundred system calls. A slice of at least
``sendfile_min`` (64 KiB) leaves through ``os.sendfile`` on the socket itself, zero-copy, once
the transport's own buffer is empty so that bytes stay in order; around it the socket is corked
(``TCP_CORK``, nginx's ``tcp_nopush``) so that the head, the part headers and the closing
boundary ride in full segments with the file's data instead of going out as small packets, each
of which would wake the client for a few hundred bytes. Under TLS, or with
``AXON_NO_SENDFILE=1``, every slice is read in ``Limits.chunk_size`` chunks instead.

Flow control: plain TCP connections run with a write-buffer high-water mark of 0, so the
transport pauses the protocol whenever *anything* is left unsent and resumes it once the kernel
took everything. We write a chunk, and if the protocol was paused we wait before reading the next
one: what one slow reader holds in user space is one chunk, however slowly it reads (300 slow
readers: +7 MiB RSS with sendfile, +21 MiB copying; tests/server/test_server_workers.py). When
``sendfile`` meets a full socket (``EAGAIN``) the loop watches the socket for writability through
a duplicate descriptor (transports refuse ``add_writer`` on their own) and sendfile resumes at
once; should no descriptor be left to duplicate, one small chunk is handed to the transport
instead, which queues it and resumes us once it drained.

A slice shorter than it claimed (the file shrank under us) raises ``FileChanged``: the caller
aborts the connection rather than send a part shorter than its ``Content-Length``. A stream with
a declared ``Content-Length`` must deliver exactly that many bytes (h11's rule), or the
connection is aborted too.
"""

from __future__ import annotations

import asyncio
import os
import socket
from collections.abc import AsyncIterator
from typing import TYPE_CHECKING

from ..chunks import FileChanged, read_slice
from ..response import Response
from .wire import (
    CHUNKED,
    CLOSE,
    CRLF,
    KEEP_ALIVE,
    LAST_CHUNK,
    UnsafeHeader,
    chunk_head,
    encode_head,
)

if TYPE_CHECKING:
    from .protocol import HTTPProtocol

#: Bytes read from the file and handed to the transport when ``sendfile`` finds the socket full
#: and no descriptor is left to watch the socket with.
NUDGE = 16 * 1024
_TCP_CORK = getattr(socket, "TCP_CORK", 3)
#: Below this many bytes a buffer list is joined into one bytes object (cheaper than an iovec).
JOIN_MAX = 16 * 1024
#: A body already in memory (small files the open-file cache holds, a handler's bytes) of up to
#: this size leaves in one ``writev``; the transport keeps references to what the socket did not
#: take, so a slow reader of one costs little more than the cached bytes it shares.
MEMORY_BODY_MAX = 256 * 1024

__all__ = ["BadResponse", "BodyLengthMismatch", "ClientGone", "FileChanged", "send_response", "send_simple"]


class ClientGone(Exception):
    """The connection is closing or closed: nothing more can be written."""


class BadResponse(Exception):
    """A handler's response cannot be encoded (unsafe or non-latin-1 header); nothing was sent."""


class BodyLengthMismatch(Exception):
    """A stream with a declared ``Content-Length`` delivered more or fewer bytes (h11's rule)."""


def send_simple(conn: HTTPProtocol, response: Response, keep_alive: bool, http11: bool) -> bool:
    """Write a response that fits one write and return True: health, errors, JSON, a body
    already in memory (small files the open-file cache holds; up to ``MEMORY_BODY_MAX``), or up
    to ``write_chunk`` bytes with small file slices read here. False, with nothing written, for
    anything else (a slice for ``sendfile``, more to read than one chunk) or when the socket is
    not free. Raises ``FileChanged`` (nothing written) if a file turns out shorter than planned."""
    if response.stream is not None or conn.write_paused:
        return False
    body = response.body
    if body and response.length > conn.write_chunk and (  # type: ignore[operator]
        response.length > MEMORY_BODY_MAX or any(type(seg) is not bytes for seg in body)  # type: ignore[operator]
    ):
        return False  # file slices to read or sendfile, or much to hold: send_response, by chunks
    tail = conn.worker.date_line
    if not keep_alive:
        tail += CLOSE
    elif not http11:
        tail += KEEP_ALIVE
    try:
        head = encode_head(response.status, response.reason, response.headers, tail)
    except (UnsafeHeader, UnicodeError, TypeError, ValueError):
        return False  # the slow path says why, and answers 500
    if not body:
        conn.transport.write(head)
    elif len(body) == 1 and type(body[0]) is bytes:
        conn.transport.write(head + body[0])  # type: ignore[operator]
    else:
        out = [head]
        for seg in body:
            if type(seg) is bytes:
                out.append(seg)
            elif seg.count >= conn.sendfile_min and conn.sock_fd >= 0:
                return False  # zero-copy pays for itself at this size
            else:
                out.append(read_slice(*seg))
        _write(conn.transport, out, response.length)  # type: ignore[arg-type]
    return True


def _head(conn: HTTPProtocol, response: Response, keep_alive: bool, http11: bool, extra: bytes = b"") -> bytes:
    tail = conn.worker.date_line + extra
    if not keep_alive:
        tail += CLOSE
    elif not http11:
        tail += KEEP_ALIVE
    try:
        return encode_head(response.status, response.reason, response.headers, tail)
    except (UnsafeHeader, UnicodeError, TypeError, ValueError) as exc:
        raise BadResponse(str(exc)) from exc


async def send_response(conn: HTTPProtocol, response: Response, head_only: bool, keep_alive: bool, http11: bool) -> bool:
    """Write ``response``; return whether the connection may carry another request."""
    if response.stream is not None and not head_only:
        return await _send_stream(conn, response, keep_alive, http11)
    head = _head(conn, response, keep_alive, http11)
    if conn.write_paused:
        await conn.drain()
    body = response.body
    if head_only or not body:
        conn.transport.write(head)
    elif len(body) == 1 and type(body[0]) is bytes:
        conn.transport.write(head + body[0])  # type: ignore[operator]
    else:
        await _send_segments(conn, head, body)
    return keep_alive


def _write(transport: asyncio.Transport, out: list, size: int) -> None:
    if len(out) == 1:
        transport.write(out[0])
    elif size <= JOIN_MAX:
        transport.write(b"".join(out))
    else:
        transport.writelines(out)


async def _send_segments(conn: HTTPProtocol, head: bytes, body: list) -> None:
    transport = conn.transport
    chunk = conn.write_chunk
    big = conn.sendfile_min if conn.sock_fd >= 0 else -1
    pread = os.pread
    out: list = [head]
    size = len(head)
    corked = False
    try:
        for seg in body:
            if type(seg) is bytes:
                out.append(seg)
                size += len(seg)  # type: ignore[arg-type]
            else:
                fd, offset, count = seg
                if 0 <= big <= count:
                    if not corked:
                        # Hold partial segments (the head, part headers, the closing boundary)
                        # until the response is done, so they ride with the file's data instead
                        # of going out as small packets of their own (nginx's tcp_nopush).
                        corked = _cork(conn, True)
                    if out:
                        _write(transport, out, size)
                        out, size = [], 0
                    await _sendfile(conn, fd, offset, count)
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
                        if conn.write_paused:
                            await conn.drain()
                continue
            if size >= chunk:
                _write(transport, out, size)
                out, size = [], 0
                if conn.write_paused:
                    await conn.drain()
        if out:
            _write(transport, out, size)
    finally:
        if corked:
            _cork(conn, False)


def _cork(conn: HTTPProtocol, on: bool) -> bool:
    if conn.lost or conn.transport.is_closing():
        return False
    own = conn.own_socket()
    if own is None:
        return False
    try:
        own.setsockopt(socket.IPPROTO_TCP, _TCP_CORK, 1 if on else 0)
    except OSError:
        return False
    return True


async def _sendfile(conn: HTTPProtocol, fd: int, offset: int, count: int) -> None:
    transport = conn.transport
    sendfile = os.sendfile
    while count:
        if conn.write_paused:
            await conn.drain()
            continue
        if transport.get_write_buffer_size():
            # Not paused yet something queued (cannot happen with a high-water mark of 0);
            # let the loop flush it rather than send out of order.
            await asyncio.sleep(0.001)
            continue
        # Checked right before the call, with no await between: a closing transport may have
        # closed its descriptor already, and the number could now belong to another client.
        if conn.lost or transport.is_closing():
            raise ClientGone()
        try:
            sent = sendfile(conn.sock_fd, fd, offset, count)
        except BlockingIOError:
            if not await conn.writable():
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


async def _send_stream(conn: HTTPProtocol, response: Response, keep_alive: bool, http11: bool) -> bool:
    """A body of unknown length: chunked on HTTP/1.1, close-delimited on HTTP/1.0. A stream whose
    handler declared a ``Content-Length`` is sent as is and must deliver exactly that."""
    declared = None
    for name, value in response.headers:
        if name.lower() == "content-length":
            try:
                declared = int(value)
            except ValueError:
                raise BadResponse(f"bad Content-Length {value!r}") from None
    chunked = declared is None and http11
    if declared is None and not http11:
        keep_alive = False
    head = _head(conn, response, keep_alive, http11, CHUNKED if chunked else b"")
    if conn.write_paused:
        await conn.drain()
    transport = conn.transport
    transport.write(head)
    sent = 0
    async for data in _iterate(conn, response):
        if not data:
            continue
        if conn.lost or transport.is_closing():
            raise ClientGone()
        if type(data) is not bytes:
            data = bytes(data)
        sent += len(data)
        if declared is not None and sent > declared:
            raise BodyLengthMismatch(f"stream longer than its Content-Length {declared}")
        if chunked:
            transport.writelines((chunk_head(len(data)), data, CRLF))
        else:
            transport.write(data)
        if conn.write_paused:
            await conn.drain()
    if declared is not None and sent != declared:
        raise BodyLengthMismatch(f"stream sent {sent} bytes of its Content-Length {declared}")
    if chunked:
        transport.write(LAST_CHUNK)
    return keep_alive


_DONE = object()


async def _iterate(conn: HTTPProtocol, response: Response) -> AsyncIterator[bytes]:
    stream = response.stream
    if hasattr(stream, "__aiter__"):
        async for data in stream:  # type: ignore[union-attr]
            yield data
        return
    # A plain generator may block (disk, database): step it in the app's bounded thread pool.
    iterator = iter(stream)  # type: ignore[arg-type]
    loop = conn.loop
    executor = conn.app.executor
    while True:
        data = await loop.run_in_executor(executor, next, iterator, _DONE)
        if data is _DONE:
            return
        yield data  # type: ignore[misc]
