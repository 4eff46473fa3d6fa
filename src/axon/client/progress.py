"""Progress of a multi-batch fetch for the command line: bytes, files, rate and ETA.

One :class:`ProgressTracker` adds up every batch (batches may run in parallel threads) and draws
with ``tqdm`` when it is installed, or with a plain line at most once a second when it is not.
The total size is only learnt batch by batch, from each response's Content-Length, so until the
last batch has started the total is an estimate: the bytes per file seen so far, times the files
still to come.

What moved is counted apart from what was done: ``bytes_received`` are this run's bytes (the
rate is theirs alone); a batch resumed from a saved part adds what an earlier run received to
``bytes_resumed``, so that the run can say where it took over (:meth:`ProgressTracker.resumed`).
"""

from __future__ import annotations

import sys
import threading
import time
from typing import Any, Protocol, TextIO

from .download import FetchedFile

__all__ = ["ProgressTracker", "format_bytes", "resumed_at"]


def format_bytes(count: float) -> str:
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if abs(count) < 1024 or unit == "TiB":
            return f"{count:.0f} {unit}" if unit == "B" else f"{count:.1f} {unit}"
        count /= 1024
    raise AssertionError("unreachable")


def resumed_at(offset: int, length: int) -> str:
    """Where a resumed download took over: ``resumed at 37.7 MiB of 1.2 GiB``."""
    return f"resumed at {format_bytes(offset)} of {format_bytes(length)}"


class _Display(Protocol):
    def update(self, tracker: ProgressTracker, advanced: int) -> None: ...

    def close(self) -> None: ...


class ProgressTracker:
    """Thread-safe totals across batches; ``for_batch(n)`` gives one fetch's ``progress`` object."""

    def __init__(
        self,
        total_files: int,
        *,
        show: bool = True,
        stream: TextIO | None = None,
        use_tqdm: bool | None = None,
    ):
        self.total_files = total_files
        self.files_done = 0
        self.bytes_written = 0  # file contents, whole files only
        self.bytes_received = 0  # response bodies this run, multipart framing included
        self.bytes_resumed = 0  # of the bodies resumed, what earlier runs received
        self.resumed_length = 0  # the whole length of the bodies resumed
        self.started = time.monotonic()
        self._files_in_started_batches = 0
        self._known_bytes = 0
        self._lock = threading.Lock()
        self._display: _Display = _make_display(stream or sys.stderr, use_tqdm) if show else _NoDisplay()

    @property
    def estimated_total(self) -> int | None:
        """Bytes expected over all batches; exact once every batch has started."""
        if not self._files_in_started_batches:
            return None
        per_file = self._known_bytes / self._files_in_started_batches
        return round(self._known_bytes + per_file * (self.total_files - self._files_in_started_batches))

    def for_batch(self, file_count: int) -> _BatchProgress:
        return _BatchProgress(self, file_count)

    @property
    def bytes_moved(self) -> int:
        """Body bytes received in all, earlier runs' included (those kept in a saved part)."""
        return self.bytes_resumed + self.bytes_received

    def resumed(self) -> str | None:
        """``resumed at X of Y`` when a batch took over from an earlier run, else None."""
        return resumed_at(self.bytes_resumed, self.resumed_length) if self.resumed_length else None

    def rate(self, seconds: float) -> float:
        """This run's bytes a second: what an earlier run received does not count."""
        return self.bytes_received / max(seconds, 1e-9)

    def archive_written(self, size: int) -> None:
        """An archive of every file was saved whole (``--zip``/``--tar``): all its files are."""
        with self._lock:
            self.files_done = self.total_files
            self.bytes_written += size
            self._display.update(self, 0)

    def close(self) -> None:
        with self._lock:
            self._display.close()

    def _resumed(self, offset: int, length: int) -> None:
        with self._lock:
            self.bytes_resumed += offset
            self.resumed_length += length

    def _batch_started(self, file_count: int, content_length: int | None) -> None:
        with self._lock:
            self._files_in_started_batches += file_count
            self._known_bytes += content_length or 0
            self._display.update(self, 0)

    def _received(self, nbytes: int) -> None:
        with self._lock:
            self.bytes_received += nbytes
            self._display.update(self, nbytes)

    def _file_written(self, file: FetchedFile) -> None:
        with self._lock:
            self.files_done += 1
            self.bytes_written += file.size
            self._display.update(self, 0)


class _BatchProgress:
    """The :class:`~axon.client.download.Progress` of one batch, reporting into the tracker."""

    def __init__(self, tracker: ProgressTracker, file_count: int) -> None:
        self._tracker = tracker
        self._file_count = file_count

    def response_resumed(self, offset: int, length: int) -> None:
        self._tracker._resumed(offset, length)

    def response_started(self, content_length: int | None) -> None:
        self._tracker._batch_started(self._file_count, content_length)

    def data_received(self, nbytes: int) -> None:
        self._tracker._received(nbytes)

    def file_written(self, file: FetchedFile) -> None:
        self._tracker._file_written(file)


def _make_display(stream: TextIO, use_tqdm: bool | None) -> _Display:
    if use_tqdm is not False:
        try:
            from tqdm import tqdm  # optional (the ``tools`` extra); only the CLI draws bars
        except ImportError:
            if use_tqdm:
                raise
        else:
            return _TqdmDisplay(tqdm, stream)
    return _PlainDisplay(stream)


class _NoDisplay:
    def update(self, tracker: ProgressTracker, advanced: int) -> None:
        pass

    def close(self) -> None:
        pass


class _TqdmDisplay:
    def __init__(self, tqdm: Any, stream: TextIO) -> None:
        self._bar = tqdm(
            total=None, unit="B", unit_scale=True, unit_divisor=1024, file=stream, desc="fetch", leave=True
        )

    def update(self, tracker: ProgressTracker, advanced: int) -> None:
        total = tracker.estimated_total
        if total is not None and total != self._bar.total:
            self._bar.total = total
        self._bar.set_postfix_str(f"{tracker.files_done}/{tracker.total_files} files", refresh=False)
        self._bar.update(advanced)

    def close(self) -> None:
        self._bar.close()


class _PlainDisplay:
    """One line, redrawn at most once a second (or a new line each time if not a terminal)."""

    INTERVAL = 1.0

    def __init__(self, stream: TextIO) -> None:
        self._stream = stream
        self._last_drawn = 0.0
        self._terminal = stream.isatty()
        self._drawn_any = False

    def update(self, tracker: ProgressTracker, advanced: int) -> None:
        now = time.monotonic()
        if now - self._last_drawn < self.INTERVAL and tracker.files_done < tracker.total_files:
            return
        self._last_drawn = now
        elapsed = max(now - tracker.started, 1e-9)
        rate = tracker.bytes_received / elapsed
        line = (
            f"{tracker.files_done}/{tracker.total_files} files, "
            f"{format_bytes(tracker.bytes_received)}, {format_bytes(rate)}/s"
        )
        total = tracker.estimated_total
        if total and rate > 0 and total >= tracker.bytes_received:
            eta = round((total - tracker.bytes_received) / rate)
            line += f", ETA {eta // 3600}:{eta // 60 % 60:02d}:{eta % 60:02d}"
        end = "" if self._terminal else "\n"
        prefix = "\r\x1b[K" if self._terminal else ""
        self._stream.write(f"{prefix}{line}{end}")
        self._stream.flush()
        self._drawn_any = True

    def close(self) -> None:
        if self._terminal and self._drawn_any:
            self._stream.write("\n")
            self._stream.flush()
