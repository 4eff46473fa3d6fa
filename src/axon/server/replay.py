"""Answering a repeated request again from what it was answered with: :class:`Replay`, and a
worker's table of them by the bytes of the read that asked, :class:`Replays`.

A client that asks for the same thing again sends the same bytes: a load balancer's health probe,
a page's assets, a data loader's next epoch, a benchmark. A read that held exactly one GET (no
body, HTTP/1.1, kept alive, no ``Expect``), that began and ended with the parser between requests,
and that was answered at once and whole, is remembered by its bytes with its answer. The same
bytes read again, with the parser between requests, are the same request, which passed every
check the parser and the App made: they get the same answer without being parsed, routed or
planned, for as long as what the answer was made of is unchanged:

* an answer of the App's fixed table (the health probe): until that table changes;
* a response the App marked ``repeatable`` (its file and batch endpoints): while every file it
  holds is the version it was planned from, by an ``fstat`` of each on every use (what the
  open-file cache does for any request), and while the open-file cache still trusts the path for
  it. A file changed, or its cache entry gone, and the request is answered anew (and remembered
  again). A file's own bytes are read again from its descriptor for each answer, unless the
  open-file cache held them in memory for that very version.

Only ``Date`` is new in each answer. A response of files is remembered on the second sight of
its bytes, so that requests seen once (a data loader's distinct batches) cost a set entry, not a
remembered answer. The worker forgets every answer whenever the App's routes or fixed answers
change (its sweep, once a tick), drops those whose files left the open-file cache, and forgets
all when it stops. The remembered answer holds a reference on each file's descriptor, so a
descriptor it may read stays open until it is forgotten.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Sequence
from typing import TYPE_CHECKING

from ..records import Record
from .wire import UnsafeHeader, encode_head

if TYPE_CHECKING:
    from ..http.segments import Segment
    from ..response import Response
    from ..storage.file_cache import CachedDescriptor

#: Remembered answers per worker (the oldest is forgotten first), and reads seen once.
REPLAYS = 256
#: The longest read remembered: a request of a few headers, as clients send them.
READ_MAX = 2048
#: The most files one remembered answer may hold: each is an ``fstat`` on every use.
REPLAY_FILES = 64

Pin = tuple["CachedDescriptor", tuple[int, int, int, int, int]]


class Replay:
    """One answer to send again: ``head`` (the status line and headers, without ``Date``,
    ``Server`` and the blank line), the body (bytes, or segments to read again), and the files
    it holds with the versions it was made from."""

    __slots__ = ("head", "body", "length", "pins", "record")

    def __init__(
        self, head: bytes, body: bytes | list[Segment], length: int, pins: Sequence[Pin] = (),
        record: Record | None = None,
    ) -> None:
        self.head = head
        self.body = body
        self.length = length  # of the body
        self.pins = pins
        self.record = record  # the request's record, for the observers (axon.records)

    @classmethod
    def fixed(cls, response: Response) -> Replay:
        """One of the App's fixed answers (a body of bytes, no files), to send as it is."""
        body = b"".join(response.body)  # type: ignore[arg-type]
        return cls(_head(response), body, len(body))

    @classmethod
    def of(cls, response: Response, record: Record) -> Replay | None:
        """``response`` (not yet sent, its files still held) as an answer to send again, holding
        its files' descriptors; None if it cannot be (a file of its own, not the open-file
        cache's; too many files; a head that cannot be encoded)."""
        files = response.files
        if not files or len(files) > REPLAY_FILES or response.stream is not None:
            return None
        try:
            head = _head(response)
        except (UnsafeHeader, UnicodeError, TypeError, ValueError):
            return None
        pins: list[Pin] = []
        for f in files:
            pin = f.pin()
            if pin is None:
                for entry, _ in pins:
                    entry.release()
                return None
            pins.append(pin)
        body = response.body
        whole = b"".join(body) if all(type(seg) is bytes for seg in body) else list(body)  # type: ignore[arg-type]
        return cls(head, whole, response.length or 0, tuple(pins), record)

    def current(self) -> bool:
        """Whether every file is still the version the answer was made from."""
        for entry, version in self.pins:
            if not entry.holds(version):
                return False
        return True

    def live(self) -> bool:
        """Whether the open-file cache still holds every file's entry (no ``fstat``): what the
        sweep asks, to let go of descriptors the cache let go of."""
        for entry, _ in self.pins:
            if not entry.valid():
                return False
        return True

    def release(self) -> None:
        """Give the descriptors back; only the first call does anything."""
        pins, self.pins = self.pins, ()
        for entry, _ in pins:
            entry.release()


def _head(response: Response) -> bytes:
    """The status line and headers, without the blank line (``Date`` and ``Server`` go before it)."""
    return encode_head(response.status, response.reason, response.headers, b"")[:-2]


class Replays:
    """A worker's remembered answers by the bytes of the read that asked; at most ``size``
    (0: none, nothing is remembered)."""

    def __init__(self, size: int = REPLAYS) -> None:
        self.size = size
        #: Read -> its answer, oldest first (``get`` is the hot path's lookup).
        self.answers: OrderedDict[bytes, Replay] = OrderedDict()
        self.get = self.answers.get
        # Reads of a repeatable response seen once; emptied when full (cheaper per read than a
        # FIFO: a read seen once costs a set entry, and a hot one is soon seen twice again).
        self._seen: set[bytes] = set()

    def __len__(self) -> int:
        return len(self.answers)

    def seen_before(self, read: bytes) -> bool:
        """Whether ``read`` was seen before (and now it has been)."""
        if not self.size:
            return False
        seen = self._seen
        if read in seen:
            seen.discard(read)
            return True
        if len(seen) >= self.size:
            seen.clear()
        seen.add(read)
        return False

    def remember(self, read: bytes, replay: Replay) -> None:
        if not self.size:
            replay.release()
            return
        answers = self.answers
        old = answers.pop(read, None)
        if old is not None:
            old.release()
        elif len(answers) >= self.size:  # bounded, whatever clients send: the oldest goes
            answers.popitem(last=False)[1].release()
        answers[read] = replay

    def forget(self, read: bytes) -> None:
        replay = self.answers.pop(read, None)
        if replay is not None:
            replay.release()

    def prune(self) -> None:
        """Forget the answers whose files the open-file cache no longer holds."""
        for read in [read for read, replay in self.answers.items() if not replay.live()]:
            self.forget(read)

    def clear(self) -> None:
        answers = list(self.answers.values())
        self.answers.clear()
        self._seen.clear()
        for replay in answers:
            replay.release()
