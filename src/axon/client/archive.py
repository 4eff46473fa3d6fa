"""A batch saved as one archive file (zip or tar), resumable, and unpacked safely.

``fetch_archive`` asks the server for the batch as ``application/zip`` or ``application/x-tar``
(its ``/api/stream-files.zip`` and ``.tar`` URLs) and writes the body to ``FILE``. The bytes go
to ``FILE.axon-partial`` first, renamed to ``FILE`` once the whole length is there, so ``FILE``
is complete or absent. With ``resume``, a download cut short keeps that partial file and, beside
it, ``FILE.axon-partial.json`` (the batch's server, paths, ``ETag`` and length); the same fetch
later asks for the rest (``Range: bytes=<size>-`` with ``If-Range: <etag>``) and appends it.
The batch's ETag is strong and names its files' versions, so the rest is from the same archive,
or the server sends the whole new archive (200) and the file starts over. Unlike a multipart
batch (:mod:`.journal`), an archive needs no parser state to resume: its offset is the partial
file's size, since every byte before it was written in order.

An archive is one request, so a list cannot be cut into batches as a multipart fetch's is: one
longer than the server takes (its ``/api/limits``: ``max_files``, ``max_body_bytes`` for a POST)
is refused before it is sent (:class:`~.errors.BatchTooLarge`, naming the limit), rather than
answered with a 413 or silently split into several archives where one file was asked for.

``unpack`` extracts a saved archive into a directory with the standard library's ``zipfile``
and ``tarfile``, refusing the whole archive before writing anything if any entry's name would
land outside the directory (absolute, ``..``, a backslash, through a symlink already there: the
same rule as a multipart part's name, :func:`.paths.resolve_destination`), and anything in a tar
but regular files and directories (``tarfile``'s ``data`` filter for the rest).
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import tarfile
import zipfile
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from ..batchclient.errors import BatchTooLarge, FetchError, UnsafePathError
from ..batchclient.head import ResponseHead
from ..batchclient.refusal import error_from_response
from ..batchclient.request import BatchRequest, build_request
from .download import Progress, prepare_destination
from .fetch import DEFAULT_CHUNK_SIZE, DEFAULT_TIMEOUT
from .paths import ensure_parent, resolve_destination
from ..batchclient.transport import RoundTrip

__all__ = ["ARCHIVE_FORMATS", "ArchiveResult", "fetch_archive", "unpack"]

ARCHIVE_FORMATS = ("zip", "tar")
PARTIAL = ".axon-partial"
_CONTENT_RANGE = re.compile(r"bytes (\d+)-(\d+)/(\d+)")


@dataclass(frozen=True)
class ArchiveResult:
    path: Path  # the archive file, complete
    size: int
    received: int  # bytes this call received (less than size when it resumed)
    resumed_from: int  # the offset it resumed from, 0 when it did not


def fetch_archive(
    base_url: str,
    files: Iterable[str],
    path: str | os.PathLike[str],
    fmt: str = "zip",
    *,
    chunk_size: int = DEFAULT_CHUNK_SIZE,
    timeout: float | None = DEFAULT_TIMEOUT,
    headers: Mapping[str, str] | None = None,
    method: str | None = None,
    progress: Progress | None = None,
    resume: bool = True,
    secret: str | bytes | None = None,
) -> ArchiveResult:
    """Save the batch of ``files`` as one archive (``fmt`` "zip" or "tar") at ``path``.

    Raises :class:`FetchError` if the server refuses (its JSON error), the connection fails or
    the body is not the length announced; with ``resume``, what arrived is kept for the next call.
    """
    if fmt not in ARCHIVE_FORMATS:
        raise ValueError(f"an archive is zip or tar, not {fmt!r}")
    files = list(files)
    path = Path(path)
    partial = path.with_name(path.name + PARTIAL)
    note = path.with_name(path.name + PARTIAL + ".json")
    batch = {"base_url": base_url.rstrip("/"), "files": files, "format": fmt}
    offset, etag = (_saved(partial, note, batch) if resume else (0, None))
    extra = dict(headers or {})
    if offset:
        extra.update({"Range": f"bytes={offset}-", "If-Range": etag})  # type: ignore[dict-item]
    request = build_request(base_url, files, method=method, headers=extra, secret=secret, fmt=fmt)
    _check_fits(request, len(files), _server_limits(base_url, request, timeout, headers))
    with RoundTrip(request, timeout) as trip:
        head = trip.start()
        if not (head.status == 416 and offset):
            return _receive(trip, head, offset, path, batch, resume=resume, progress=progress, chunk_size=chunk_size)
    # The saved part no longer fits any version of the batch: start again, once.
    _forget(path.with_name(path.name + PARTIAL), path.with_name(path.name + PARTIAL + ".json"))
    return fetch_archive(base_url, files, path, fmt, chunk_size=chunk_size, timeout=timeout,
                         headers=headers, method=method, progress=progress, resume=resume, secret=secret)


def _receive(
    trip: RoundTrip, head: ResponseHead, offset: int, path: Path, batch: dict, *,
    resume: bool, progress: Progress | None, chunk_size: int,
) -> ArchiveResult:
    """The body of a 200 or 206 into ``path``'s partial file, renamed to ``path`` once whole."""
    partial = path.with_name(path.name + PARTIAL)
    note = path.with_name(path.name + PARTIAL + ".json")
    if head.status not in (200, 206):
        raise error_from_response(head.status, head.reason, trip.error_body())
    start, total = _extent(head, offset)
    prepare_destination(path.parent)
    if resume and head.headers.get("ETag"):
        note.write_text(json.dumps(dict(batch, etag=head.headers["ETag"], length=total)), encoding="utf-8")
    if progress is not None:
        resumed = getattr(progress, "response_resumed", None)
        if resumed is not None and start:
            resumed(start, total)
        progress.response_started(total - start)
    received = 0
    with open(partial, "r+b" if start else "wb") as out:
        out.truncate(start)
        out.seek(start)
        try:
            for chunk in trip.chunks(chunk_size):
                out.write(chunk)
                received += len(chunk)
                if progress is not None:
                    progress.data_received(len(chunk))
            if start + received != total:
                raise FetchError(f"the archive stopped after {start + received} of its {total} bytes")
        except BaseException:
            out.close()
            if not resume:
                _forget(partial, note)
            raise
    os.replace(partial, path)
    with contextlib.suppress(FileNotFoundError):
        os.unlink(note)
    return ArchiveResult(path, total, received, start)


def _server_limits(
    base_url: str, request: BatchRequest, timeout: float | None, headers: Mapping[str, str] | None
) -> dict[str, Any] | None:
    """The server's ``GET /api/limits`` (open without a signature), or None if it has none."""
    target = urlsplit(base_url).path.rstrip("/") + "/api/limits"
    limits_request = BatchRequest(request.scheme, request.host, request.port, "GET", target,
                                  tuple({**(headers or {}), "Accept": "application/json"}.items()), b"")
    with RoundTrip(limits_request, timeout) as trip:
        head = trip.start()
        body = trip.error_body()  # small either way: the limits, or why there are none
    if head.status != 200:
        return None  # a server from before /api/limits (404): the batch's own answer will say
    try:
        limits = json.loads(body)
    except ValueError:
        return None
    return limits if isinstance(limits, dict) else None


def _check_fits(request: BatchRequest, count: int, limits: dict[str, Any] | None) -> None:
    if limits is None:
        return
    max_files, max_body = limits.get("max_files"), limits.get("max_body_bytes")
    if type(max_files) is int and count > max_files:
        raise BatchTooLarge(
            f"{count} files do not fit in one archive: {request.origin} takes at most {max_files} files "
            "a request (max_files in its /api/limits)"
        )
    if request.method == "POST" and type(max_body) is int and len(request.body) > max_body:
        raise BatchTooLarge(
            f"the list of {count} files does not fit in one archive: as JSON it is {len(request.body)} bytes, "
            f"and {request.origin} takes at most {max_body} (max_body_bytes in its /api/limits)"
        )


def _saved(partial: Path, note: Path, batch: dict) -> tuple[int, str | None]:
    """Where a saved download of this batch stands: (bytes kept, its ETag), or (0, None)."""
    try:
        saved = json.loads(note.read_text(encoding="utf-8"))
        size = partial.stat().st_size
    except (OSError, ValueError):
        return 0, None
    if not isinstance(saved, dict) or {k: saved.get(k) for k in batch} != batch:
        return 0, None  # another batch's: it is overwritten
    etag, length = saved.get("etag"), saved.get("length")
    if not isinstance(etag, str) or not etag.startswith('"') or type(length) is not int or not 0 < size < length:
        return 0, None
    return size, etag


def _extent(head: ResponseHead, offset: int) -> tuple[int, int]:
    """(first byte this body carries, the archive's whole length) from the answer's head."""
    length = head.content_length
    if head.status == 200:
        if length is None:
            raise FetchError("the server sent an archive without a Content-Length")
        return 0, length
    found = _CONTENT_RANGE.fullmatch(head.headers.get("Content-Range") or "")
    if found is None or int(found[1]) != offset or int(found[2]) + 1 != int(found[3]):
        raise FetchError(f"the server answered a range this download did not ask for: {found and found[0]!r}")
    return offset, int(found[3])


def _forget(partial: Path, note: Path) -> None:
    for stale in (partial, note):
        with contextlib.suppress(FileNotFoundError):
            os.unlink(stale)


def unpack(archive: str | os.PathLike[str], dest: str | os.PathLike[str]) -> list[Path]:
    """Extract the zip or tar ``archive`` into ``dest``; the files written, in archive order.

    Every entry is checked before anything is written: one name that would land outside ``dest``
    refuses the whole archive (:class:`UnsafePathError`). A name given twice is written twice,
    the last one staying, as ``unzip`` and ``tar`` do.
    """
    root = prepare_destination(dest)
    if zipfile.is_zipfile(archive):
        with zipfile.ZipFile(archive) as z:
            entries = [(info, resolve_destination(root, info.filename.rstrip("/")))
                       for info in z.infolist() if not info.is_dir()]
            for info, target in entries:
                ensure_parent(root, target)
                with z.open(info) as src, open(target, "wb") as out:
                    while chunk := src.read(DEFAULT_CHUNK_SIZE):
                        out.write(chunk)
            return [target for _, target in entries]
    if not tarfile.is_tarfile(archive):
        raise ValueError(f"{os.fspath(archive)!r} is neither a zip nor a tar archive")
    with tarfile.open(archive) as t:
        members = t.getmembers()
        for member in members:
            if not (member.isfile() or member.isdir()):
                raise UnsafePathError(f"{member.name!r} is not a regular file or a directory")
            resolve_destination(root, member.name.rstrip("/"))
        # Checked above already; tarfile's own "data" filter too, where this Python has it.
        t.extractall(root, **({"filter": "data"} if hasattr(tarfile, "data_filter") else {}))
        return [root / m.name for m in members if m.isfile()]
