"""Plan a batch: open and check every file, then frame them all as one body, in a format
(:mod:`.formats`; ``multipart/mixed`` unless told otherwise).

Nothing is written before the plan is complete, so any failure (a missing file, a path outside
the root, too many files or bytes) is one JSON 4xx naming every offending path, never a 200 cut
short. A path named twice is opened once: slices read by offset, so parts can share a descriptor.

With a ``key``, the batch gets an identity (:mod:`axon.http.batch_identity`): a strong ``ETag``
and a boundary derived from its files, so the same batch of unchanged files is the same bytes.
It is then a resource like a file: its preconditions (``If-Match``, ``If-None-Match``) are
evaluated in RFC 9110's order (304, 412), and a single ``Range`` (guarded by ``If-Range``) is
served as the segment list sliced: a 206 that lets a client resume an interrupted batch. A batch
has no modification date, so the date conditions are ignored and ``If-Range`` needs its entity
tag. Several ranges get the whole batch (200), which RFC 9110
allows (a server may ignore ``Range``): a ``multipart/byteranges`` wrapped around a
``multipart/mixed`` would be legal but useless to any client we know. Range is honoured on
``POST /api/stream-files`` too: that POST is a query with its list in the body, not a change.

A POST may name slices of files (:mod:`.slices`): each is a segment of its file, framed as a
part with its ``Content-Range``; a slice that cannot be satisfied is a 416 like any other refusal,
before the first byte. Slices are served as ``multipart/mixed`` only: a zip or tar entry is a file.

A zip needs each file's CRC-32 before its bytes: the storage layer gives it, known or read now
(before any byte is sent, so errors and the length stay exact). A file that changes while it is
read is opened again with the whole batch, up to ``CHANGE_RETRIES`` times; a file that keeps
changing is a 503 (``file_changing``, ``Retry-After: 1``): the batch cannot name a version of it.
Planned ``on_loop`` (an event loop's thread, where other connections wait meanwhile), a batch
whose unknown CRCs would mean reading more than ``INLINE_READ_BYTES`` raises
:class:`~axon.errors.WouldBlock` before reading any, and the App plans it again in its thread
pool; a small read stays inline, as the native server reads small slices inline to send them.
A batch of more than ``INLINE_FILES`` files is not planned in one go there either: the plan is a
generator (:func:`plan_steps`) that stops after every ``SLICE_FILES`` files opened or framed,
handed to the App in a WouldBlock, which steps it between the loop's other work (axon.pace).
"""

from __future__ import annotations

from collections.abc import Generator
from itertools import repeat
from typing import Any

from ..errors import (
    BadRequest, FileChanged, HTTPError, PayloadTooLarge, PreconditionFailed, ServiceUnavailable, WouldBlock,
)
from ..storage import File, Source
from ..limits import Limits
from ..response import Response
from ..http.batch_identity import Signature, plain_signature
from ..http.conditional import evaluate, if_range_allows
from ..http.ranges import Span, content_range, parse_range
from ..http.segments import Segment, slice_segments
from .formats import NEEDS_CRC, Format, Layout, multipart_mixed, prepare_steps
from .slices import Slice, resolve_all

#: How many times a batch is opened again when a file changes while its CRC-32 is read.
CHANGE_RETRIES = 3
#: The most bytes read for CRC-32s on an event loop's thread; more goes to the thread pool. The
#: native server's one-write path reads as much inline (``server/writer.py``).
INLINE_READ_BYTES = 64 * 1024
#: The most files a batch planned on an event loop's thread is planned of in one go; a larger
#: one is planned ``SLICE_FILES`` at a time, the loop's other work between two slices.
INLINE_FILES = 32
SLICE_FILES = 16

#: A plan in steps: each ``next()`` does a slice of the work; its value is the Response.
Steps = Generator[None, None, Response]


def check_count(paths: list[str], limits: Limits) -> None:
    """Refuse an empty or over-long batch before a single file is opened."""
    if not paths:
        raise BadRequest("name at least one file, e.g. ?file1=examples/a.bin", code="no_files")
    if len(paths) > limits.max_files:
        raise PayloadTooLarge(
            f"a batch may name at most {limits.max_files} files, not {len(paths)}", code="too_many_files"
        )


def open_all(store: Source, paths: list[str]) -> dict[str, File]:
    """Every distinct path opened, or one error that names each path that failed."""
    return finish(open_steps(store, paths, len(paths)))


def open_steps(store: Source, paths: list[str], every: int) -> Generator[None, None, dict[str, File]]:
    """:func:`open_all`, stopping after every ``every`` paths."""
    opened: dict[str, File] = {}
    failures: list[HTTPError] = []
    # A source that keeps files ready to send (the server's, sharing its open files) gives a
    # slice's in one call: each is what opening it would give, and None is opened here.
    ready = store.ready_files
    try:
        for start in range(0, len(paths), every):
            if start:
                yield
            part = paths[start:start + every]
            found = ready(part) if ready is not None else repeat(None)
            for path, f in zip(part, found):
                if path in opened:
                    continue
                if f is not None:
                    opened[path] = f
                    continue
                try:
                    opened[path] = store.open(path)
                except HTTPError as exc:
                    failures.append(exc)
        if failures:
            raise combine(failures, len(paths))
    except BaseException:
        for f in opened.values():
            f.close()
        raise
    return opened


def combine(failures: list[HTTPError], total: int) -> HTTPError:
    if len(failures) == 1:
        return failures[0]
    # The most fundamental failure sets the status: a malformed path before a forbidden one
    # before a missing one; running out of descriptors (503) outranks them all.
    status = 503 if any(f.status == 503 for f in failures) else min(f.status for f in failures)
    paths = [p for f in failures for p in f.paths]
    details = [{"path": p, "status": f.status, "code": f.code, "message": f.message} for f in failures for p in f.paths]
    # What the failures of that status say beside it (a 503's Retry-After): each header once.
    headers: dict[str, str] = {}
    for f in failures:
        if f.status == status:
            for name, value in f.headers:
                headers.setdefault(name, value)
    return HTTPError(
        f"{len(failures)} of the {total} requested files cannot be served",
        status=status,
        code="batch_refused",
        paths=paths,
        details=details,
        headers=list(headers.items()),
    )


def plan_batch(store: Source, paths: list[str], limits: Limits, *, on_loop: bool = False, **options: Any) -> Response:
    """The batch of ``paths``, as :func:`plan_steps` plans it with ``options``, planned now.
    ``on_loop``: called where nothing may block; :class:`~axon.errors.WouldBlock` rather than a
    long read, and rather than planning more than ``INLINE_FILES`` files in one go (its
    ``steps`` plan them a slice at a time)."""
    sliced = on_loop and len(paths) > INLINE_FILES
    steps = plan_steps(store, paths, limits, on_loop=on_loop, every=SLICE_FILES if sliced else len(paths) or 1, **options)
    if sliced:
        raise WouldBlock(f"{len(paths)} files to plan", steps=steps, of=paths)
    return finish(steps)  # type: ignore[return-value]


def finish(steps: Generator[None, None, object]) -> object:
    """What ``steps`` come to, stepped to the end at once."""
    try:
        while True:
            next(steps)
    except StopIteration as done:
        return done.value


def plan_steps(
    store: Source,
    paths: list[str],
    limits: Limits,
    *,
    boundary: str | None = None,
    key: bytes | None = None,
    headers: dict[str, str] | None = None,
    method: str = "GET",
    fmt: Format = multipart_mixed,
    slices: list[Slice | None] | None = None,
    on_loop: bool = False,
    every: int,
    _retries: int = CHANGE_RETRIES,
) -> Steps:
    """The batch of ``paths`` in the format ``fmt``; with ``key``, with its identity and honouring
    ``headers``' preconditions, ``Range`` and ``If-Range`` (lower-case names, as
    :class:`~axon.app.Request` has them) for the request ``method``. ``slices`` (one per path,
    None for a whole file) serves parts of files. A generator that stops after every ``every``
    files opened, and framed; its value is the Response. ``on_loop``: see :func:`plan_batch`."""
    check_count(paths, limits)
    if slices is not None and fmt is not multipart_mixed and any(slices):
        raise BadRequest("slices of files are served as multipart/mixed only", code="slices_need_multipart")
    opened = yield from open_steps(store, paths, every)
    files = list(opened.values())
    try:
        chosen = [opened[p] for p in paths]
        spans = resolve_all(paths, [f.size for f in chosen], slices) if slices is not None else None
        total = sum([f.size for f in chosen])
        if spans is not None:  # the bytes sent, not the files' sizes
            total = sum(f.size if s is None else s[1] - s[0] for f, s in zip(chosen, spans))
        if total > limits.max_batch_bytes:
            raise PayloadTooLarge(
                f"the batch holds {total} bytes; at most {limits.max_batch_bytes} may be sent",
                code="batch_too_large",
            )
        signatures = tuple(map(file_signature, chosen))
        if spans is not None:
            # A slice's is a plain one (a kept signature names the whole file's version).
            signatures = tuple([sig if s is None else plain_signature(sig)._replace(span=s) for sig, s in zip(signatures, spans)])
        crcs: tuple[int, ...] = ()
        if fmt in NEEDS_CRC:
            # The CRCs change a zip's bytes, never its length or ETag: HEAD reads no file.
            try:
                if method == "HEAD":
                    crcs = (0,) * len(chosen)
                else:
                    crcs = checksums(store, chosen, INLINE_READ_BYTES if on_loop else None)
            except FileChanged as exc:
                for f in files:
                    f.close()
                if _retries <= 1:
                    raise ServiceUnavailable(
                        "a file changed each time its CRC-32 was read; try again once it is written",
                        code="file_changing", paths=[str(exc)], headers=[("Retry-After", "1")],
                    ) from None
                # Opened again, the batch is planned from the file as it is now.
                return (yield from plan_steps(store, paths, limits, boundary=boundary, key=key, headers=headers,
                                              method=method, fmt=fmt, slices=slices, on_loop=on_loop,
                                              every=every, _retries=_retries - 1))
        if every < len(signatures):
            yield from prepare_steps(fmt, signatures, every)
        etag, content_type, filename, blocks = fmt(key, boundary, signatures, crcs)
        # The body is the format's blocks with the files (or their spans) between them: its length
        # without a pass over its segments, whose objects are cold in a batch of random files.
        length = total + sum(map(len, blocks))
        # A browser that opens a batch URL saves it under this name, not the URL's last segment.
        out = [("Content-Type", content_type), ("Content-Disposition", f'attachment; filename="{filename}"')]
        if etag is None:
            return Response(200, out, _body(chosen, blocks, spans), files=files, length=length)
        verdict = evaluate(method, headers, etag, None) if headers else None
        if verdict == 304:
            for f in files:
                f.close()
            return Response(304, [("ETag", etag)])
        if verdict == 412:
            raise PreconditionFailed("the batch does not match the request's preconditions")
        return _ranged(etag, out, _body(chosen, blocks, spans), headers or {}, limits, files, length)
    except BaseException:
        for f in files:
            f.close()
        raise


def _body(chosen: list[File], blocks: tuple[bytes, ...], spans: list[Span | None] | None = None) -> list[Segment]:
    """The format's blocks with each file's bytes (or the span of them asked for) between them."""
    body: list[Segment] = [blocks[0]]
    if spans is None:  # whole files, the common case: no test per file on the hot path
        for f, block in zip(chosen, blocks[1:]):
            body.append(f.segment(0, f.size))
            body.append(block)
        return body
    for f, block, span in zip(chosen, blocks[1:], spans):
        body.append(f.segment(0, f.size) if span is None else f.segment(*span))
        body.append(block)
    return body


def checksums(store: Source, chosen: list[File], read_limit: int | None = None) -> tuple[int, ...]:
    """Each file's CRC-32 (a path named twice is one file, read once); FileChanged names the
    path of a file that is no longer the version opened. With ``read_limit``, WouldBlock before
    reading when the CRCs not yet known need more bytes read than that."""
    crcs = store.crc32s(chosen, False)  # known, or computed from bytes in memory: nothing read
    if None not in crcs:
        return tuple(crcs)  # type: ignore[arg-type]
    missing = {id(f): f for f, crc in zip(chosen, crcs) if crc is None}
    if read_limit is not None:
        cold = sum(f.size for f in missing.values())
        if cold > read_limit:
            raise WouldBlock(f"{cold} bytes to read for CRC-32s")
    read = dict(zip(missing, store.crc32s(list(missing.values()))))
    return tuple([read[id(f)] if crc is None else crc for f, crc in zip(chosen, crcs)])  # type: ignore[misc]


_new_signature = tuple.__new__


def file_signature(f: File) -> Signature:
    """An open file's facts, as the identity and the framing of a batch take them: the one its
    storage keeps for the version (a trusted file's), else made now."""
    kept = f.signature
    if kept is not None:
        return kept
    # Built as a tuple is, every field given in Signature's order (its own __new__ is a Python
    # call): one per file. tests/plan/test_batch.py ties this to the fields' names.
    return _new_signature(Signature, (f.path, f.content_type, f.device, f.inode, f.size, f.mtime_ns, f.ctime_ns, f.name, None))


def _ranged(
    etag: str, out: list[tuple[str, str]], body: list[Segment], headers: dict[str, str], limits: Limits,
    files: list[File], length: int,
) -> Response:
    """200 with the whole batch, or 206 with the one byte range asked for (416 if none fits)."""
    out += [("ETag", etag), ("Accept-Ranges", "bytes")]
    range_header = headers.get("range")
    if range_header is not None and _if_range_matches(headers.get("if-range"), etag):
        spans = parse_range(range_header, length, limits.max_ranges)
        if spans is not None and len(spans) == 1:
            out.append(("Content-Range", content_range(spans[0], length)))
            return Response(206, out, slice_segments(body, *spans[0]), files=files)
    return Response(200, out, body, files=files, length=length)


def _if_range_matches(header: str | None, etag: str) -> bool:
    # A batch has no Last-Modified, so only its entity tag can validate a range.
    return if_range_allows(header, etag, None)
