"""Turn one batch response body into files on disk, whatever moves the bytes.

:class:`BatchDownload` is the part of a fetch that the blocking and the asyncio clients share: it
is fed the body's bytes, runs them through the multipart parser, and writes each part to
``dest/<path>`` through a temporary file in the same directory, renamed into place only once the
part's length is verified. A failure at any point leaves no file under a final name that it did
not complete; files finished earlier in the batch stay (they are whole).

Given a :class:`~.journal.Journal`, a download that stops on a recoverable error (the network,
an interruption) saves where it stood instead, keeping the part's temporary file, and
:func:`open_download` continues it from a 206 answer (see :mod:`.journal` for the design).
"""

from __future__ import annotations

import contextlib
import os
import secrets
import time
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from email.message import Message
from pathlib import Path
from typing import BinaryIO, Protocol

from ..batchclient.errors import FetchError
from ..batchclient.parts import AnyOrder
from ..batchclient.reader import BatchReader
from ..batchclient.resume import Saved, Verdict, judge, keeps_saved_after, resume_headers
from ..http.multipart_parser import (
    DEFAULT_MAX_HEADER_BYTES,
    DEFAULT_MAX_PARTS,
    MultipartError,
    PartData,
    PartEnd,
    PartStart,
    State,
)
from .journal import Journal, SavedBatch, SavedPart
from .paths import ensure_parent, resolve_destination

__all__ = [
    "BatchDownload", "FetchResult", "FetchedFile", "Progress", "forget_if_refused", "open_download", "plan_resume",
    "prepare_destination",
]

CHECKPOINT_INTERVAL = 1.0  # seconds between journal saves while a journaled download runs


@dataclass(frozen=True)
class FetchedFile:
    """One file written: ``path`` as requested, where it went, and its verified size."""

    path: str
    destination: Path
    size: int


@dataclass
class FetchResult:
    files: list[FetchedFile] = field(default_factory=list)
    body_bytes: int = 0  # the whole response body, multipart framing included
    elapsed: float = 0.0  # seconds from the response head to the end of its body

    @property
    def bytes_written(self) -> int:
        return sum(f.size for f in self.files)


class Progress(Protocol):
    """What a fetch reports as it goes; the CLI's progress bar implements it.

    ``response_started`` gets the length of this answer's body: when a download resumes, the
    bytes still to come, and then ``file_written`` once for each file finished before. A progress
    that also has ``response_resumed(offset, length)`` is told first where a resumed download
    starts again: ``offset`` bytes of its body of ``length`` were received by an earlier run.
    """

    def response_started(self, content_length: int | None) -> None: ...

    def data_received(self, nbytes: int) -> None: ...

    def file_written(self, file: FetchedFile) -> None: ...


def prepare_destination(dest: str | os.PathLike[str]) -> Path:
    """Create ``dest`` if needed; its real path is the root nothing may be written outside of."""
    os.makedirs(dest, exist_ok=True)
    return Path(os.path.realpath(dest))


class _PartFile:
    """The temporary file of the part being received.

    Its name is random, unless the download is journaled: then ``token`` names it after the
    batch and the part's place in it, so that a process killed before its journal mentions the
    part leaves a file the next run of the same batch writes over (resuming or starting again),
    instead of one that nothing ever removes.
    """

    def __init__(self, path: str, target: Path, declared: int, token: str | None = None) -> None:
        self.path = path
        self.target = target
        self.declared = declared
        self.written = 0
        # Not tempfile.mkstemp: it makes 0600 files, and a download should get the umask's
        # permissions like any other new file. O_EXCL makes a random name ours alone; a name
        # of the batch's is ours already, and O_NOFOLLOW keeps a symlink there from redirecting it.
        self.temp = target.with_name(f".{target.name}.{token or secrets.token_hex(6)}.part")
        flags = os.O_WRONLY | os.O_CREAT | getattr(os, "O_BINARY", 0)
        flags |= os.O_EXCL if token is None else os.O_TRUNC | getattr(os, "O_NOFOLLOW", 0)
        self.file: BinaryIO = os.fdopen(os.open(self.temp, flags, 0o666), "wb")

    @classmethod
    def reopen(cls, path: str, target: Path, declared: int, temp: Path, written: int) -> _PartFile:
        """The temporary file of a part a saved download had begun, cut back to ``written``
        bytes (it may hold more: written after the journal's last save)."""
        part = cls.__new__(cls)
        part.path, part.target, part.declared, part.written, part.temp = path, target, declared, written, temp
        fd = os.open(temp, os.O_WRONLY | os.O_NOFOLLOW | getattr(os, "O_BINARY", 0))
        try:
            os.ftruncate(fd, written)
            os.lseek(fd, written, os.SEEK_SET)
        except BaseException:
            os.close(fd)
            raise
        part.file = os.fdopen(fd, "wb")
        return part

    def write(self, data: bytes | memoryview) -> None:
        self.file.write(data)
        self.written += len(data)

    def commit(self) -> None:
        self.file.close()
        os.replace(self.temp, self.target)

    def discard(self) -> None:
        self.file.close()  # closing twice is harmless
        with contextlib.suppress(FileNotFoundError):
            os.unlink(self.temp)


class BatchDownload:
    """A sink for one batch response body: ``feed`` chunks, then ``finish`` (or ``abort``).

    Use it as a context manager: leaving the block by an exception aborts, removing the
    temporary file of the part in progress.
    """

    def __init__(
        self,
        root: Path,
        requested: Iterable[str],
        content_type: str | None,
        content_length: int | None = None,
        *,
        progress: Progress | None = None,
        max_header_bytes: int = DEFAULT_MAX_HEADER_BYTES,
        max_parts: int = DEFAULT_MAX_PARTS,
        journal: Journal | None = None,
        etag: str | None = None,
    ) -> None:
        self._check = AnyOrder(requested)
        # The parser, the check of each part against what was asked, the body's length: the core's.
        self._reader: BatchReader[str] = BatchReader(
            content_type, self._check, content_length=content_length,
            max_header_bytes=max_header_bytes, max_parts=max_parts, views=True,
        )
        self._root = root
        self._content_type = content_type or ""
        self._content_length = content_length
        self._progress = progress
        self._part: _PartFile | None = None
        self._started = time.monotonic()
        self.result = FetchResult()
        # Resumable only with somewhere to save, a strong validator and a known length.
        resumable = journal is not None and etag is not None and etag.startswith('"') and content_length is not None
        self._journal = journal if resumable else None
        self._etag = etag
        self._clean = True  # False while a chunk is half processed: no consistent state to save
        self._saved_at = time.monotonic()
        # The part the journal on disk names, and whether it has since been renamed into place:
        # then the journal must be saved again at once, or a resume would find its temporary
        # file gone and start the batch over (a process killed before the next save).
        self._journaled: SavedPart | None = None
        self._journal_stale = False
        self._before_close: SavedBatch | None = None
        if progress is not None:
            progress.response_started(content_length)

    @classmethod
    def resume(
        cls,
        root: Path,
        requested: Iterable[str],
        saved: SavedBatch,
        journal: Journal,
        *,
        progress: Progress | None = None,
        **limits: int,
    ) -> BatchDownload:
        """The download ``saved`` described, ready to be fed the rest of the body from
        ``saved.offset``. Raises ValueError or OSError if the saved state cannot be used."""
        download = cls(root, requested, saved.content_type, saved.length, journal=journal, etag=saved.etag, **limits)
        download._reader = BatchReader(
            saved.content_type, download._check, content_length=saved.length, parser=saved.parser,
            body_bytes=saved.offset, views=True, **limits,
        )
        download.result.body_bytes = saved.offset
        for path, size in saved.done:
            download._check.take(path)
            download.result.files.append(FetchedFile(path, resolve_destination(root, path), size))
        if saved.part is not None:
            path = saved.part.path
            download._check.take(path)
            target = resolve_destination(root, path)
            temp = journal.temp_path(saved.part)
            download._part = _PartFile.reopen(path, target, saved.part.declared, temp, saved.part.written)
            download._journaled = saved.part
        download._progress = progress
        if progress is not None:
            resumed = getattr(progress, "response_resumed", None)
            if resumed is not None:
                resumed(saved.offset, saved.length)
            progress.response_started(saved.length - saved.offset)
            for fetched in download.result.files:
                progress.file_written(fetched)
        return download

    def __enter__(self) -> BatchDownload:
        return self

    def __exit__(self, exc_type: object, exc: object, traceback: object) -> None:
        if exc_type is None:
            return
        saved = self._resumable_state()
        if saved is None:
            self.abort()
            return
        assert self._journal is not None
        if self._part is not None:
            self._part.file.close()  # kept: the resume appends to it
        try:
            self._journal.save(saved)
        except OSError:
            self.abort()  # nowhere to save: leave nothing behind that no journal explains

    def feed(self, chunk: bytes) -> None:
        self._clean = False
        try:
            for path, event in self._reader.feed(chunk):
                if isinstance(event, PartData):
                    assert self._part is not None
                    self._part.write(event.data)
                elif isinstance(event, PartStart):
                    assert path is not None
                    self._start_part(event, path)
                elif isinstance(event, PartEnd):
                    self._end_part()
        except MultipartError as exc:
            raise FetchError(f"invalid multipart response: {exc}") from exc
        finally:
            self.result.body_bytes = self._reader.body_bytes
        self._clean = True
        if self._journal is not None and (
            self._journal_stale or time.monotonic() - self._saved_at >= CHECKPOINT_INTERVAL
        ):
            saved = self._checkpoint()
            self._journal.save(saved)
            self._saved_at = time.monotonic()
            self._journaled, self._journal_stale = saved.part, False
        if self._progress is not None:
            self._progress.data_received(len(chunk))

    def finish(self) -> FetchResult:
        """The body ended: check the stream closed properly and every requested file came."""
        if (
            self._journal is not None
            and self.result.body_bytes < (self._content_length or 0)
            and self._reader.parser.state is not State.DONE
        ):
            # Cut short: saved now, while the parser still stands where the bytes stopped.
            self._before_close = self._checkpoint()
        try:
            self._reader.close()
        except MultipartError as exc:
            raise FetchError(f"invalid multipart response: {exc}") from exc
        self.result.elapsed = time.monotonic() - self._started
        if self._journal is not None:
            self._journal.remove()
        return self.result

    def abort(self) -> None:
        if self._part is not None:
            self._part.discard()
            self._part = None
        if self._journal is not None:
            self._journal.remove()  # whatever was saved, nothing of it is left to resume

    def _resumable_state(self) -> SavedBatch | None:
        """Where the download stands, if it stopped where it can go on from (not a bad stream)."""
        if self._journal is None:
            return None
        if self._before_close is not None:
            return self._before_close
        if self._clean and self._reader.parser.state not in (State.ERROR, State.DONE):
            return self._checkpoint()
        return None

    def _checkpoint(self) -> SavedBatch:
        part = None
        if self._part is not None:
            self._part.file.flush()  # the journal never counts bytes the file does not hold
            temp = str(self._part.temp.relative_to(self._root))
            part = SavedPart(self._part.path, temp, self._part.declared, self._part.written)
        return SavedBatch(
            self._etag or "",
            self._content_type,
            self._content_length or 0,
            self.result.body_bytes,
            self._reader.parser.snapshot(),
            [(f.path, f.size) for f in self.result.files],
            part,
        )

    def _start_part(self, start: PartStart, path: str) -> None:
        """Part ``start`` carries ``path``, which the core's check admitted (asked, safe in shape,
        with a length): now to a temporary file beside its final name, never outside the root."""
        length = start.content_length
        assert length is not None
        target = resolve_destination(self._root, path)
        ensure_parent(self._root, target)
        token = None if self._journal is None else self._journal.part_token(start.index)
        self._part = _PartFile(path, target, length, token)

    def _end_part(self) -> None:
        part = self._part
        assert part is not None
        if part.written != part.declared:  # the parser checks this too; a file must never lie
            raise FetchError(f"{part.path!r}: received {part.written} bytes, expected {part.declared}")
        part.commit()  # on failure the part stays current, so abort() removes its temporary file
        self._part = None
        if self._journaled is not None and self._root / self._journaled.temp == part.temp:
            self._journal_stale = True  # saved at the end of this chunk
        fetched = FetchedFile(part.path, part.target, part.written)
        self.result.files.append(fetched)
        if self._progress is not None:
            self._progress.file_written(fetched)


def plan_resume(
    dest: str | os.PathLike[str], base_url: str, files: list[str], headers: Mapping[str, str] | None, resume: bool
) -> tuple[Journal | None, SavedBatch | None, dict[str, str]]:
    """The journal of this batch (if ``resume``), what it saved, and the request headers: with
    ``Range`` and ``If-Range`` when there is a download to continue."""
    extra = dict(headers or {})
    if not resume:
        return None, None, extra
    journal = Journal(Path(os.path.realpath(dest)), base_url, files)
    saved = journal.load()
    if saved is not None:
        extra.update(resume_headers(_facts(saved)))
    return journal, saved, extra


def forget_if_refused(status: int, journal: Journal | None, saved: SavedBatch | None) -> None:
    """After a refusal, discard what was saved if the refusal makes it useless (a 416)."""
    if journal is not None and saved is not None and not keeps_saved_after(status):
        journal.discard(saved)


def open_download(
    root: Path,
    requested: list[str],
    status: int,
    headers: Message,
    content_length: int | None,
    *,
    journal: Journal | None = None,
    saved: SavedBatch | None = None,
    progress: Progress | None = None,
) -> BatchDownload:
    """The sink for a 2xx answer to a batch request, new or continuing ``saved``.

    A 206 continues the saved download from where it stopped. Any other success means the batch
    changed (``If-Range`` did not match) or the server ignores ``Range``: what was saved is
    discarded and the whole new batch is written, so the files end up as the server has them now
    (the core decides which: :func:`axon.batchclient.resume.judge`).
    """
    if journal is None:
        saved = None
    verdict, problem = judge(status, headers, content_length, None if saved is None else _facts(saved))
    if verdict is Verdict.CONTINUE:
        assert saved is not None and journal is not None
        try:
            return BatchDownload.resume(root, requested, saved, journal, progress=progress)
        except (OSError, ValueError) as exc:
            verdict, problem = Verdict.UNUSABLE, str(exc)
    if saved is not None and journal is not None:
        journal.discard(saved)
        if verdict is Verdict.UNUSABLE:
            raise FetchError(f"cannot continue the saved partial download ({problem}); it was discarded: fetch again")
    if verdict is Verdict.UNUSABLE:
        raise FetchError(problem or "the answer does not continue anything")
    return BatchDownload(
        root, requested, headers.get("Content-Type"), content_length,
        progress=progress, journal=journal, etag=headers.get("ETag"),
    )


def _facts(saved: SavedBatch) -> Saved:
    return Saved(saved.etag, saved.content_type, saved.length, saved.offset)
