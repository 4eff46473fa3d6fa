"""Fetch a batch of files into a directory: ``fetch`` (blocking) and ``afetch`` (asyncio).

Both send the same request (:mod:`.protocol`) and hand the response body to the same
:class:`~.download.BatchDownload`, which parses it and writes the files; they differ only in how
bytes cross the network: ``http.client`` for one, ``asyncio.open_connection`` for the other.
``timeout`` bounds each network operation (connect, each read), not the whole transfer.
``fetch`` takes a :class:`~.cancel.Cancel` to be stopped from another thread at once (Ctrl-C in
``axon fetch``); ``afetch`` is stopped by cancelling its task. Either way a resumable batch saves
where it stood.
"""

from __future__ import annotations

import asyncio
import http.client
import io
import os
import socket
import ssl
import string
from collections.abc import AsyncGenerator, Iterable, Iterator, Mapping
from contextlib import AbstractContextManager, aclosing, contextmanager, nullcontext, suppress
from email.message import Message

from .cancel import Cancel
from .download import FetchResult, Progress, open_download, plan_resume, prepare_destination
from .errors import FetchError
from .journal import Journal, SavedBatch
from .protocol import MAX_ERROR_BODY, BatchRequest, build_request, error_from_response

__all__ = ["afetch", "fetch"]

DEFAULT_CHUNK_SIZE = 256 * 1024
DEFAULT_TIMEOUT = 60.0
MAX_RESPONSE_HEAD = 64 * 1024


def fetch(
    base_url: str,
    files: Iterable[str],
    dest: str | os.PathLike[str],
    *,
    chunk_size: int = DEFAULT_CHUNK_SIZE,
    timeout: float | None = DEFAULT_TIMEOUT,
    headers: Mapping[str, str] | None = None,
    method: str | None = None,
    progress: Progress | None = None,
    resume: bool = False,
    secret: str | bytes | None = None,
    cancel: Cancel | None = None,
) -> FetchResult:
    """Download ``files`` from the Axon server at ``base_url`` into directory ``dest``.

    Each file lands at ``dest/<path as requested>``, complete and size-checked, or not at all.
    Raises :class:`FetchError` if the server refuses (with its JSON error), the connection fails,
    or the response is malformed, unsafe or incomplete.

    With ``resume``, a download that fails on the way (the network, an interruption) saves
    where it stood in ``dest/.axon-partial/``, and the next ``resume`` fetch of the same files
    from the same server continues from there; if a file changed meanwhile, the server sends
    the whole new batch instead. With ``secret``, each request is signed (:mod:`axon.signing`).

    ``cancel.set()`` (from another thread) stops it within moments, raising
    :class:`~.cancel.Cancelled`; with ``resume``, where it stood is saved as on a network failure.
    """
    files = list(files)
    journal, saved, headers = plan_resume(dest, base_url, files, headers, resume)
    request = build_request(base_url, files, method=method, headers=headers, secret=secret)
    connection = _connection(request, timeout)
    try:
        with _network_errors(request, "connecting", cancel):
            connection.connect()  # now, not inside request(): a Cancel must know the socket first
        with _watched(cancel, connection.sock):
            return _exchange(connection, request, dest, files, journal, saved, progress, chunk_size, cancel)
    finally:
        connection.close()


def _exchange(
    connection: http.client.HTTPConnection,
    request: BatchRequest,
    dest: str | os.PathLike[str],
    files: list[str],
    journal: Journal | None,
    saved: SavedBatch | None,
    progress: Progress | None,
    chunk_size: int,
    cancel: Cancel | None,
) -> FetchResult:
    """:func:`fetch`'s request and answer, on a connection already open."""
    with _network_errors(request, "sending the request", cancel):
        connection.request(request.method, request.target, request.body or None, dict(request.headers))
        response = connection.getresponse()
    if not 200 <= response.status < 300:
        with _network_errors(request, "reading the error response", cancel):
            body = response.read(MAX_ERROR_BODY)
        _refused(response.status, journal, saved)
        raise error_from_response(response.status, response.reason, body)
    with open_download(
        prepare_destination(dest),  # only now: a refused request leaves no empty directory
        files,
        response.status,
        response.headers,
        _content_length(response.headers),
        journal=journal,
        saved=saved,
        progress=progress,
    ) as download:
        while True:
            with _network_errors(request, "receiving the response", cancel):
                chunk = response.read1(chunk_size)
            if cancel is not None:
                cancel.check()  # between chunks, where the download's state is whole to save
            if not chunk:
                return download.finish()
            download.feed(chunk)


async def afetch(
    base_url: str,
    files: Iterable[str],
    dest: str | os.PathLike[str],
    *,
    chunk_size: int = DEFAULT_CHUNK_SIZE,
    timeout: float | None = DEFAULT_TIMEOUT,
    headers: Mapping[str, str] | None = None,
    method: str | None = None,
    progress: Progress | None = None,
    resume: bool = False,
    secret: str | bytes | None = None,
) -> FetchResult:
    """The asyncio twin of :func:`fetch`: same arguments, same result, same errors.

    Files are written with ordinary blocking writes between reads; a local disk keeps up.
    """
    files = list(files)
    journal, saved, headers = plan_resume(dest, base_url, files, headers, resume)
    request = build_request(base_url, files, method=method, headers=headers, secret=secret)
    with _network_errors(request, "connecting"):
        reader, writer = await asyncio.wait_for(_open(request), timeout)
    try:
        with _network_errors(request, "sending the request"):
            writer.write(request.head_bytes() + request.body)
            await asyncio.wait_for(writer.drain(), timeout)
            status, reason, response_headers = await _read_head(reader, timeout)
        async with aclosing(_body_chunks(reader, response_headers, chunk_size, timeout, request)) as body:
            if not 200 <= status < 300:
                error_body = b""
                async for chunk in body:
                    error_body += chunk
                    if len(error_body) >= MAX_ERROR_BODY:
                        break
                _refused(status, journal, saved)
                raise error_from_response(status, reason, error_body)
            with open_download(
                prepare_destination(dest),
                files,
                status,
                response_headers,
                _content_length(response_headers),
                journal=journal,
                saved=saved,
                progress=progress,
            ) as download:
                async for chunk in body:
                    download.feed(chunk)
                return download.finish()
    finally:
        writer.close()
        with suppress(OSError, ssl.SSLError):  # the connection is going away either way
            await writer.wait_closed()


def _refused(status: int, journal: Journal | None, saved: SavedBatch | None) -> None:
    # 416: the saved offset does not fit the batch any more; nothing saved can be used. Other
    # refusals (a file now missing...) keep it: If-Range decides once the batch is servable.
    if status == 416 and journal is not None:
        journal.discard(saved)


# -- blocking transport


def _connection(request: BatchRequest, timeout: float | None) -> http.client.HTTPConnection:
    if request.scheme == "https":
        return http.client.HTTPSConnection(
            request.host, request.port, timeout=timeout, context=ssl.create_default_context()
        )
    return http.client.HTTPConnection(request.host, request.port, timeout=timeout)


@contextmanager
def _network_errors(request: BatchRequest, doing: str, cancel: Cancel | None = None) -> Iterator[None]:
    """Turns a socket or HTTP failure inside the block into a :class:`FetchError` saying when
    (a :class:`~.cancel.Cancelled` if ``cancel`` was set: the failure is its shutting the socket)."""
    try:
        yield
    except (OSError, http.client.HTTPException, asyncio.TimeoutError, asyncio.IncompleteReadError) as exc:
        if cancel is not None:
            cancel.check()
        detail = str(exc) or type(exc).__name__
        raise FetchError(f"{request.origin}: failed while {doing}: {detail}") from exc


def _watched(cancel: Cancel | None, sock: socket.socket | None) -> AbstractContextManager[None]:
    return nullcontext() if cancel is None or sock is None else cancel.watching(sock)


def _content_length(headers: Message) -> int | None:
    values = set(headers.get_all("Content-Length") or [])
    if len(values) != 1:
        return None if not values else _bad_length(values)
    (value,) = values
    if not (value.isascii() and value.strip().isdigit()):
        _bad_length(values)
    return int(value)


def _bad_length(values: set[str]) -> int:
    raise FetchError(f"the response has an invalid Content-Length: {sorted(values)}")


# -- asyncio transport


async def _open(request: BatchRequest) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
    if request.scheme == "https":
        return await asyncio.open_connection(
            request.host, request.port, ssl=ssl.create_default_context(), limit=MAX_RESPONSE_HEAD
        )
    return await asyncio.open_connection(request.host, request.port, limit=MAX_RESPONSE_HEAD)


async def _read_head(reader: asyncio.StreamReader, timeout: float | None) -> tuple[int, str, Message]:
    """Status and headers, skipping any interim 1xx answers; headers parsed as http.client does."""
    while True:
        try:
            head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), timeout)
        except asyncio.LimitOverrunError:
            raise FetchError(f"the response headers exceed {MAX_RESPONSE_HEAD} bytes") from None
        status_line, _, header_block = head.partition(b"\r\n")
        version, _, rest = status_line.decode("latin-1").partition(" ")
        code, _, reason = rest.partition(" ")
        if not version.startswith("HTTP/1.") or not (code.isascii() and code.isdigit() and len(code) == 3):
            raise FetchError(f"not an HTTP/1.x response: {status_line[:100]!r}")
        if not 100 <= int(code) < 200:
            headers = http.client.parse_headers(io.BytesIO(header_block))
            return int(code), reason.strip(), headers


async def _body_chunks(
    reader: asyncio.StreamReader,
    headers: Message,
    chunk_size: int,
    timeout: float | None,
    request: BatchRequest,
) -> AsyncGenerator[bytes, None]:
    """The response body's bytes, undoing chunked transfer coding if the server used it.

    A body that stops short simply ends here; the caller notices what is missing.
    """
    if "chunked" in (headers.get("Transfer-Encoding") or "").lower():
        async for chunk in _dechunk(reader, chunk_size, timeout, request):
            yield chunk
        return
    remaining = _content_length(headers)
    while remaining is None or remaining > 0:
        size = chunk_size if remaining is None else min(chunk_size, remaining)
        with _network_errors(request, "receiving the response"):
            chunk = await asyncio.wait_for(reader.read(size), timeout)
        if not chunk:
            return
        if remaining is not None:
            remaining -= len(chunk)
        yield chunk


async def _dechunk(
    reader: asyncio.StreamReader, chunk_size: int, timeout: float | None, request: BatchRequest
) -> AsyncGenerator[bytes, None]:
    while True:
        with _network_errors(request, "receiving the response"):
            size_line = await asyncio.wait_for(reader.readuntil(b"\r\n"), timeout)
        size_text = size_line.split(b";", 1)[0].strip().decode("latin-1")
        if not size_text or not all(c in string.hexdigits for c in size_text):
            raise FetchError(f"invalid chunk size in the response: {size_line[:40]!r}")
        size = int(size_text, 16)
        if size == 0:
            return  # trailers, if any, are not needed
        while size > 0:
            with _network_errors(request, "receiving the response"):
                chunk = await asyncio.wait_for(reader.read(min(size, chunk_size)), timeout)
            if not chunk:
                return
            size -= len(chunk)
            yield chunk
        with _network_errors(request, "receiving the response"):
            crlf = await asyncio.wait_for(reader.readexactly(2), timeout)
        if crlf != b"\r\n":
            raise FetchError("malformed chunked response: missing CRLF after a chunk")
