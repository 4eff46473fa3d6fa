"""What a worker's connections may send without the App: :class:`Shortcuts`, owned by a worker.

It is the one place where the server takes a way past the App, and the connection asks it in one
place (``HTTPProtocol._complete``). Two tables, both forgotten whenever the App's routes, its fixed
answers or its observers change (the worker's sweep calls :meth:`Shortcuts.refresh` once a tick):

* **Fixed answers** (:func:`fixed_answer`): GET answers that never change (the health probe),
  which the App names (``App.fixed_answers``) while nothing observes requests. Prepared once
  (:mod:`.answer`), sent as nginx's ``return 200`` is.
* **Remembered heads** (:class:`Remembered`): the head of a GET answer of a ``repeatable`` route
  (Axon's file and batch endpoints), by the request's target and ``Accept``. A later GET of the
  same target and Accept, without ``Range`` or a precondition (whatever else its headers say:
  cookies, trace ids, ``X-Forwarded-For``), gets that head again, with the files opened anew
  through the store (the worker's shared files) and their bytes read as for any request, while every
  file is still the version the head was made from. A head holds no descriptor and no file's
  bytes: only its own bytes, the paths, their opaque version tokens and the framing between
  them, counted against a byte budget and a count. Each one sent is counted and recorded for
  the metrics and the access log through one call (``App.record_sent``); none is remembered
  while a handler of your own on ``axon.access`` wants each Request and Response
  (``App.remembers``).

Heads are remembered on the second sight of their key, so that targets asked once (a data
loader's distinct batches, a pool larger than the caches) cost a set entry, not a head. A head of
one file the shared files trust keeps its answer on that file's version from the start, so the
third request of a pool's file is the compiled answer's. What a remembered head replaced, and
why it is not a table of whole answers by the request's bytes, is in docs/design-notes.md.
"""

from __future__ import annotations

from collections import OrderedDict
from time import monotonic
from typing import TYPE_CHECKING

from ..errors import HTTPError
from ..http.segments import FileSlice
from ..untracked import untracked
from .answer import Prepared, fits_one_write
from .wire import UnsafeHeader, frame_head

if TYPE_CHECKING:
    from ..response import Response
    from ..storage import File
    from .exchange import Exchange
    from .served import ServedApp

#: Request headers that change a repeatable route's answer beyond its target and Accept: a
#: request with any of them is answered by the App.
VARIANT_HEADERS = frozenset(("range", "if-range", "if-match", "if-none-match", "if-modified-since", "if-unmodified-since"))
#: Remembered heads per worker, and the bytes they may hold in all (README, "axon serve").
HEADS = 16384
HEAD_BYTES = 16 * 1024 * 1024
#: The most files one remembered head may name: each is opened (a cache hit) when it is used.
HEAD_FILES = 64
#: Keys seen once, kept (as hashes) to tell a second sight; emptied when full.
SEEN = 16384
#: The longest target and Accept a head is remembered for: what clients send sizes the table.
KEY_MAX = 1024
#: A recalled head moves to the recent end of the LRU order only if its last move is this old:
#: the order is kept to a second, and a head recalled thousands of times a second is moved once.
REORDER_SECONDS = 1.0


def fixed_answer(response: Response) -> Prepared:
    """One fixed answer, prepared once: its head framed, its body bytes, made whole again only
    when its ``Date`` line changes (:attr:`~.answer.Prepared.whole`)."""
    body = b"".join(response.body)  # type: ignore[arg-type]
    return Prepared(frame_head(response.status, response.reason, response.headers), [body], len(body), reusable=True, read=0)


class Head:
    """A remembered head: ``head`` framed as a prepared answer's (:mod:`.answer`), the requested ``paths`` of its
    files with their ``versions``, and its body's ``template``: bytes as they are, and the index
    of a whole file in ``paths`` where that file's bytes go. Tuples, not lists: a tuple of texts,
    numbers and such tuples is one the cycle collector stops tracking, and a worker keeps
    thousands of heads, which each full collection would walk (docs/design-notes.md)."""

    __slots__ = ("head", "paths", "versions", "template", "length", "read", "cost", "path", "query", "moved")

    def __init__(
        self, head: bytes, paths: tuple[str, ...], versions: tuple, template: tuple, length: int, read: int,
    ) -> None:
        self.path = self.query = ""  # the request's, for its record (the same for every request of one key)
        self.moved = monotonic()  # when it last went to the recent end of the LRU order
        self.read = read  # bytes of its files to read when it is sent (the rest is in memory)
        self.head = head
        self.paths = paths
        self.versions = versions
        self.template = template
        self.length = length
        # What it holds, roughly in bytes: its texts and a pointer's worth per item (its key and
        # the request's path and query are added when it is remembered).
        self.cost = 200 + len(head) + 64 * len(template) + sum(map(len, paths)) + sum(
            len(t) for t in template if type(t) is bytes
        )


class Remembered:
    """Heads by ``(target, Accept)``: at most ``size`` of them and ``budget`` bytes in all, the
    least recently used (to a second, ``REORDER_SECONDS``) forgotten first."""

    def __init__(self, size: int = HEADS, budget: int = HEAD_BYTES, chunk: int | None = None) -> None:
        self.size = size
        self.budget = budget
        self.cost = 0
        self.heads: OrderedDict[tuple[bytes, str | None], Head] = OrderedDict()
        self._seen: set[int] = set()
        #: What the writer writes at once (:func:`~.answer.fits_one_write`): a head whose answer
        #: would not be is not worth remembering. None: any.
        self._chunk = chunk
        #: The last answer recalled of several files all trusted (their bytes in memory), with the
        #: head it answers and the trusted files it was made from: sent again while the shared
        #: files give the same objects (one per version), which were checked against the head's
        #: versions when it was made. One answer's bytes, which the shared files hold too. A
        #: head of one file keeps its answer on that file's version instead (``recall``).
        self._last: tuple[Head, list, Prepared] | None = None

    def __len__(self) -> int:
        return len(self.heads)

    def remember(self, key: tuple[bytes, str | None], response: Response, path: str, query: str) -> None:
        """Keep the head of ``response`` (planned, not yet sent: its files are open) to a GET of
        ``path`` and ``query`` (decoded, for its record) for ``key``, on the key's second sight;
        if it can be sent again so (see :func:`_head_of`)."""
        if key in self.heads or not self.size or len(key[0]) + len(key[1] or "") > KEY_MAX:
            return
        seen, sight = self._seen, hash(key)
        if sight not in seen:
            if len(seen) >= SEEN:
                seen.clear()
            seen.add(sight)
            return
        seen.discard(sight)
        head = _head_of(response)
        if head is None or (self._chunk is not None and not fits_one_write(head.length, head.read, self._chunk)):
            return
        head.path, head.query = path, query
        head.cost += 2 * (len(key[0]) + len(key[1] or "")) + len(path) + len(query)
        if head.cost > self.budget:
            return
        heads = self.heads
        self.cost += head.cost
        heads[key] = untracked(head)  # of texts, numbers and tuples: see axon.untracked
        while len(heads) > self.size or self.cost > self.budget:
            self.cost -= heads.popitem(last=False)[1].cost
        files = response.files
        trusted = files[0]
        if len(files) == 1 and head.read == 0 and hasattr(trusted, "answer") and key in heads:
            # A trusted file's version keeps the answer of its one-file head, the last made (as
            # recall keeps it): the next request is answered from there, by the compiled answer too.
            trusted.answer = _kept(head, _answer(head, [trusted.data], (), 0))

    def recall(self, key: tuple[bytes, str | None], open_file, cached_files) -> tuple[Head, Prepared] | None:
        """The head for ``key`` and its answer now: prepared, its files opened to send them;
        None, with nothing held, when there is none or a file is not the version it was made
        from (then it is forgotten, and the App answers). A file whose version and bytes the
        worker's shared files know current (``cached_files``) is sent from those bytes, holding
        nothing; any other is opened by ``open_file`` (the App's store). An answer of trusted
        files only is made once while they stay the same: for one file, kept by its trusted
        version (``answer``, which lives as long as that version: each file of a pool keeps
        its own), for several, the last one made (``_last``)."""
        head = self.heads.get(key)
        if head is None:
            return None
        now = monotonic()
        if now - head.moved >= REORDER_SECONDS:
            self.heads.move_to_end(key)
            head.moved = now
        known_files = cached_files(head.paths)
        single = len(known_files) == 1
        if single:  # one file: its trusted version keeps the answer made of it (below)
            known = known_files[0]
            made = None if known is None else known.answer
            if made is not None and made[0] is head:
                return head, made[1]
        else:
            last = self._last
            if last is not None and last[0] is head and last[1] == known_files:  # the same objects: compared by identity
                return head, last[2]
        files: list[File] = []
        bodies: list = []
        read = 0
        try:
            for path, version, known in zip(head.paths, head.versions, known_files):
                if known is not None:
                    if known.version != version:
                        raise _Changed()
                    bodies.append(known.data)
                    continue
                f = open_file(path)
                files.append(f)
                if f.version != version:
                    raise _Changed()
                bodies.append(f.segment(0, f.size))
                read += f.size
        except (HTTPError, OSError, _Changed):  # gone, refused, out of descriptors, changed
            for f in files:
                f.close()
            self.forget(key)
            return None
        answer = _answer(head, bodies, files, read)
        if not files:
            if single:
                known.answer = _kept(head, answer)
            else:
                self._last = (head, known_files, answer)
        return head, answer

    def forget(self, key: tuple[bytes, str | None]) -> None:
        head = self.heads.pop(key, None)
        if head is not None:
            self.cost -= head.cost
            if self._last is not None and self._last[0] is head:
                self._last = None

    def clear(self) -> None:
        self.heads.clear()
        self._seen.clear()
        self.cost = 0
        self._last = None


class _Changed(Exception):
    """A remembered head's file is another version now."""


def _kept(head: Head, answer: Prepared) -> tuple[Head, Prepared]:
    """``(head, answer)`` as a trusted version keeps it while it stands, out of the collector's
    walk with the answer's lists (of bytes, and of no files): see axon.untracked. (The collector
    lets a tuple go by itself only when what it holds are tuples or atomic.)"""
    untracked(answer.body)
    untracked(answer.files)
    return untracked((head, untracked(answer)))


def _answer(head: Head, bodies: list, files: list, read: int) -> Prepared:
    """``head``'s answer, its files' whole ``bodies`` (bytes or slices) in its template's places."""
    body = [bodies[t] if type(t) is int else t for t in head.template]
    return Prepared(head.head, body, head.length, files, False, read)


def _head_of(response: Response) -> Head | None:
    """``response`` as a head to send again: a 200 of whole files of versions a server can check
    (the local store's), at most ``HEAD_FILES`` of them, every file segment one of them whole;
    else None."""
    files = response.files
    if response.status != 200 or response.stream is not None or not files or len(files) > HEAD_FILES:
        return None
    versions = [f.version for f in files]
    if None in versions:  # a source that cannot promise a version without asking (an object store)
        return None
    # Each file's whole as the body holds it: its bytes (found by identity) or a slice of it.
    wholes = [f.segment(0, f.size) for f in files]
    by_segment = {id(w) if type(w) is bytes else w: i for i, w in enumerate(wholes)}
    template: list = []
    for seg in response.body:
        if type(seg) is bytes:
            i = by_segment.get(id(seg))
            template.append(seg if i is None else i)
            continue
        if type(seg) is not FileSlice:
            return None
        i = by_segment.get(seg)
        if i is None:
            return None  # a part of a file (a slice): not this simple a template
        template.append(i)
    try:
        head = frame_head(response.status, response.reason, response.headers)
    except (UnsafeHeader, UnicodeError, TypeError, ValueError):
        return None
    read = sum(files[t].size for t in template if type(t) is int and type(wholes[t]) is not bytes)
    # versions: a tuple of version tuples (numbers), out of the collector's walk (axon.untracked).
    return Head(head, tuple(f.path for f in files), untracked(tuple(versions)), tuple(template), response.length or 0, read)


class Shortcuts:
    """A worker's fixed answers (``fixed``: raw target -> their GET and HEAD answers, prepared)
    and remembered heads (``remembered``), as the App allows them now. ``chunk``: what the
    worker's writers write at once (:func:`~.answer.fits_one_write`)."""

    def __init__(
        self, app: ServedApp, heads: int = HEADS, head_bytes: int = HEAD_BYTES, chunk: int | None = None,
    ) -> None:
        self._app = app
        #: The fixed table the connections read (``get_fixed``): changed in place, never replaced.
        self.fixed: dict[bytes, tuple[Prepared, Prepared]] = {}
        self.get_fixed = self.fixed.get
        self.remembered = Remembered(heads, head_bytes, chunk)
        self._encoded: dict[str, tuple[Response, tuple[Prepared, Prepared]]] = {}
        self._routes_version = app.routes_version
        #: Whether heads may be remembered and sent now (``App.remembers``).
        self.remembering = False
        self.refresh()

    def refresh(self) -> None:
        """Ask the App what it allows now: encode each new fixed answer once; forget every
        remembered head if the routes, the fixed answers or the App's observers changed."""
        table: dict[bytes, tuple[Prepared, Prepared]] = {}
        for path, response in self._app.fixed_answers().items():
            encoded = self._encoded.get(path)
            if encoded is None or encoded[0] is not response:
                if response.stream is not None or not all(type(seg) is bytes for seg in response.body):
                    continue
                answer = fixed_answer(response)
                encoded = self._encoded[path] = (response, (answer, answer.without_body()))
            table[path.encode("utf-8")] = encoded[1]
        remembering = self._app.remembers()
        routes_version = self._app.routes_version
        if table != self.fixed or routes_version != self._routes_version or remembering != self.remembering:
            self.fixed.clear()
            self.fixed.update(table)
            self._routes_version = routes_version
            self.remembering = remembering
            self.remembered.clear()

    def key(self, ex: Exchange) -> tuple[bytes, str | None] | None:
        """The key a request's answer is remembered by, or None if it is not one to remember or
        to answer from memory: a GET (of HTTP/1.1, kept alive: the connection checks) without a
        body, ``Range`` or a precondition."""
        if ex.size or not VARIANT_HEADERS.isdisjoint(ex.headers):
            return None
        return (ex.url, ex.headers.get("accept"))

    def clear(self) -> None:
        self.remembered.clear()
