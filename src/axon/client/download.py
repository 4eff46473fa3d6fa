"""Turn one batch response body into files on disk, whatever moves the bytes.

:class:`BatchDownload` is the part of a fetch that the blocking and the asyncio clients share: it
is fed the body's bytes, runs them through the multipart parser, and writes each part to
``dest/<path>`` through a temporary file in the same directory, renamed into place only once the
part's length is verified. A failure at any point leaves no file under a final name that it did
not complete; files finished earlier in the batch stay (they are whole).
"""

from __future__ import annotations

import contextlib
import os
import secrets
import time
from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import BinaryIO, Protocol

from .errors import FetchError
from .multipart import (
    DEFAULT_MAX_HEADER_BYTES,
    DEFAULT_MAX_PARTS,
    Event,
    MultipartError,
    MultipartParser,
    PartData,
    PartEnd,
    PartStart,
    boundary_from_content_type,
)
from .paths import ensure_parent, resolve_destination

__all__ = ["BatchDownload", "FetchResult", "FetchedFile", "Progress", "prepare_destination"]


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
    """What a fetch reports as it goes; the CLI's progress bar implements it."""

    def response_started(self, content_length: int | None) -> None: ...

    def data_received(self, nbytes: int) -> None: ...

    def file_written(self, file: FetchedFile) -> None: ...


def prepare_destination(dest: str | os.PathLike[str]) -> Path:
    """Create ``dest`` if needed; its real path is the root nothing may be written outside of."""
    os.makedirs(dest, exist_ok=True)
    return Path(os.path.realpath(dest))


class _PartFile:
    """The temporary file of the part being received."""

    def __init__(self, path: str, target: Path, declared: int) -> None:
        self.path = path
        self.target = target
        self.declared = declared
        self.written = 0
        # Not tempfile.mkstemp: it makes 0600 files, and a download should get the umask's
        # permissions like any other new file. O_EXCL makes the random name ours alone.
        self.temp = target.with_name(f".{target.name}.{secrets.token_hex(6)}.part")
        flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_BINARY", 0)
        self.file: BinaryIO = os.fdopen(os.open(self.temp, flags, 0o666), "wb")

    def write(self, data: bytes) -> None:
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
    ) -> None:
        try:
            boundary = boundary_from_content_type(content_type or "")
        except MultipartError as exc:
            raise FetchError(f"the server did not answer with a multipart body: {exc}") from exc
        self._parser = MultipartParser(boundary, max_header_bytes=max_header_bytes, max_parts=max_parts)
        self._root = root
        self._due = Counter(requested)
        self._content_length = content_length
        self._progress = progress
        self._part: _PartFile | None = None
        self._started = time.monotonic()
        self.result = FetchResult()
        if progress is not None:
            progress.response_started(content_length)

    def __enter__(self) -> BatchDownload:
        return self

    def __exit__(self, exc_type: object, exc: object, traceback: object) -> None:
        if exc_type is not None:
            self.abort()

    def feed(self, chunk: bytes) -> None:
        self.result.body_bytes += len(chunk)
        if self._content_length is not None and self.result.body_bytes > self._content_length:
            raise FetchError(f"the response body is longer than its Content-Length {self._content_length}")
        for event in self._parse(chunk):
            if isinstance(event, PartData):
                assert self._part is not None
                self._part.write(event.data)
            elif isinstance(event, PartStart):
                self._start_part(event)
            elif isinstance(event, PartEnd):
                self._end_part()
        if self._progress is not None:
            self._progress.data_received(len(chunk))

    def finish(self) -> FetchResult:
        """The body ended: check the stream closed properly and every requested file came."""
        self._parse(b"")
        if self._content_length is not None and self.result.body_bytes != self._content_length:
            raise FetchError(
                f"the response body ended after {self.result.body_bytes} of its {self._content_length} bytes"
            )
        missing = sorted(self._due.elements())
        if missing:
            raise FetchError(f"the server did not send {len(missing)} requested file(s): {missing[:5]}")
        self.result.elapsed = time.monotonic() - self._started
        return self.result

    def abort(self) -> None:
        if self._part is not None:
            self._part.discard()
            self._part = None

    def _parse(self, chunk: bytes) -> list[Event]:
        try:
            return self._parser.feed(chunk)
        except MultipartError as exc:
            raise FetchError(f"invalid multipart response: {exc}") from exc

    def _start_part(self, start: PartStart) -> None:
        where = f"part {start.index}"
        path = start.path
        if path is None:
            raise FetchError(f"{where} has no Content-Location: cannot tell which file it is")
        length = start.content_length
        if length is None:
            raise FetchError(f"{where} ({path!r}) has no Content-Length: its size cannot be verified")
        target = resolve_destination(self._root, path)  # refuse hostile paths before the rest
        if self._due[path] <= 0:
            raise FetchError(f"{where} carries {path!r}, which was not requested (or came twice)")
        self._due[path] -= 1
        ensure_parent(self._root, target)
        self._part = _PartFile(path, target, length)

    def _end_part(self) -> None:
        part = self._part
        assert part is not None
        if part.written != part.declared:  # the parser checks this too; a file must never lie
            raise FetchError(f"{part.path!r}: received {part.written} bytes, expected {part.declared}")
        part.commit()  # on failure the part stays current, so abort() removes its temporary file
        self._part = None
        fetched = FetchedFile(part.path, part.target, part.written)
        self.result.files.append(fetched)
        if self._progress is not None:
            self._progress.file_written(fetched)
