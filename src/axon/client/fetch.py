"""Fetch a batch of files into a directory: ``fetch`` (blocking) and ``afetch`` (asyncio).

Both build the same request and read the answer through the same sans-IO core
(:mod:`axon.batchclient`: the request, the refusal, the checks of each part, the resume
decision) into the same :class:`~.download.BatchDownload`, which writes the files; they differ
only in the transport that moves the bytes: ``http.client`` (:mod:`.transport`) for one,
aiohttp (:mod:`axon.batchclient.aio`, the ``fsspec`` extra) for the other. ``timeout`` bounds
each network operation (connect, each read), not the whole transfer. ``fetch`` takes a
:class:`~.cancel.Cancel` to be stopped from another thread at once (Ctrl-C in ``axon fetch``);
``afetch`` is stopped by cancelling its task. Either way a resumable batch saves where it stood.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Mapping

from ..batchclient.errors import FetchError
from ..batchclient.head import ResponseHead
from ..batchclient.refusal import error_from_response
from ..batchclient.request import build_request
from .cancel import Cancel
from .download import FetchResult, Progress, forget_if_refused, open_download, plan_resume, prepare_destination
from .journal import Journal, SavedBatch
from ..batchclient.transport import RoundTrip

__all__ = ["afetch", "fetch"]

DEFAULT_CHUNK_SIZE = 256 * 1024
DEFAULT_TIMEOUT = 60.0


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
    with RoundTrip(request, timeout, cancel) as trip:
        head = trip.start()
        if not head.ok:
            raise _refused(head, trip.error_body(), journal, saved)
        with open_download(
            prepare_destination(dest),  # only now: a refused request leaves no empty directory
            files, head.status, head.headers, head.content_length, journal=journal, saved=saved, progress=progress,
        ) as download:
            for chunk in trip.chunks(chunk_size):
                download.feed(chunk)
            return download.finish()


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
    """The asyncio twin of :func:`fetch`: same arguments, same result, same errors; on aiohttp
    (the ``fsspec`` extra brings it).

    Files are written with ordinary blocking writes between reads; a local disk keeps up.
    """
    # Here, not at the top: ``import axon.client`` (and ``axon fetch``) need nothing but the
    # standard library.
    try:
        from ..batchclient.aio import AsyncRoundTrip, session_for_one_fetch
    except ModuleNotFoundError as exc:  # pragma: no cover - without the extra
        raise ModuleNotFoundError(f"afetch runs on aiohttp: pip install 'axon-stream[fsspec]' ({exc})",
                                  name=exc.name) from exc

    files = list(files)
    journal, saved, headers = plan_resume(dest, base_url, files, headers, resume)
    request = build_request(base_url, files, method=method, headers=headers, secret=secret)
    async with session_for_one_fetch(timeout) as session, AsyncRoundTrip(session, request) as trip:
        head = await trip.start()
        if not head.ok:
            raise _refused(head, await trip.error_body(), journal, saved)
        with open_download(
            prepare_destination(dest), files, head.status, head.headers, head.content_length,
            journal=journal, saved=saved, progress=progress,
        ) as download:
            async for chunk in trip.chunks(chunk_size):
                download.feed(chunk)
            return download.finish()


def _refused(head: ResponseHead, body: bytes, journal: Journal | None, saved: SavedBatch | None) -> FetchError:
    forget_if_refused(head.status, journal, saved)
    return error_from_response(head.status, head.reason, body)
