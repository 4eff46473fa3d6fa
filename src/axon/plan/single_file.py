"""Plan the response for one file: validators, preconditions (304/412), and ranges (206/416)."""

from __future__ import annotations

import time
from functools import lru_cache

from ..errors import PreconditionFailed
from ..storage import File, Source
from ..limits import Limits
from ..response import Response
from ..untracked import untracked
from ..http.conditional import date_is_strong, evaluate, http_date, if_range_allows
from ..http.multipart import PER_FILE_CACHE, frame, new_boundary
from ..http.ranges import content_range, parse_range


def etag(f: File) -> str:
    """Strong: a replaced file (new inode) or a changed one (size, mtime, or ctime: content
    rewritten with its mtime put back moves the ctime) gets a new tag."""
    return _version(f.inode, f.mtime_ns, f.ctime_ns, f.size, f.content_type)[0]


@lru_cache(maxsize=PER_FILE_CACHE)
def _version(inode: int, mtime_ns: int, ctime_ns: int, size: int, content_type: str) -> tuple[str, int, tuple, tuple]:
    """What the headers say of one version of a file, formatted once per version (a file is
    served many times as it is): its ETag, its Last-Modified in whole seconds, the validators
    (for a 304) and the headers of the whole file (for a 200)."""
    # The ctime only where it differs from the mtime (a write sets both alike): a file never
    # rewritten behind its mtime's back keeps the tag it always had.
    tag = f'"{inode:x}-{mtime_ns:x}-{size:x}"' if ctime_ns == mtime_ns else f'"{inode:x}-{mtime_ns:x}-{size:x}-{ctime_ns:x}"'
    mtime = mtime_ns // 1_000_000_000  # whole seconds, floored, no float rounding
    # Kept as long as the version is cached: its tuples of tuples out of the collector's walk
    # (axon.untracked; the pairs, of strings, the collector lets go itself).
    validators = untracked((("ETag", tag), ("Last-Modified", http_date(mtime))))
    whole = untracked((*validators, ("Accept-Ranges", "bytes"), ("Content-Type", content_type)))
    return untracked((tag, mtime, validators, whole))


def plan_file(store: Source, path: str, method: str, headers: dict[str, str], limits: Limits) -> Response:
    f = store.open(path)
    try:
        return _plan(f, method, headers, limits)
    except BaseException:
        f.close()
        raise


def _plan(f: File, method: str, headers: dict[str, str], limits: Limits) -> Response:
    tag, mtime, validators, whole = _version(f.inode, f.mtime_ns, f.ctime_ns, f.size, f.content_type)
    verdict = evaluate(method, headers, tag, mtime)
    if verdict == 304:
        f.close()
        return Response(304, validators)  # (Response copies the headers it is given)
    if verdict == 412:
        raise PreconditionFailed("the file does not match the request's preconditions", paths=[f.path])
    range_header = headers.get("range")
    spans = None
    if range_header is not None and _if_range_allows(headers.get("if-range"), tag, f):
        spans = parse_range(range_header, f.size, limits.max_ranges)
    if spans is None:
        return Response(200, whole, [f.segment(0, f.size)], files=[f])
    out = [*validators, ("Accept-Ranges", "bytes")]
    if len(spans) == 1:
        (start, stop) = spans[0]
        out += [("Content-Type", f.content_type), ("Content-Range", content_range(spans[0], f.size))]
        return Response(206, out, [f.segment(start, stop)], files=[f])
    boundary = new_boundary()
    parts = [
        (f"Content-Type: {f.content_type}\r\nContent-Range: {content_range(s, f.size)}\r\n", f.segment(*s))
        for s in spans
    ]
    out.append(("Content-Type", f"multipart/byteranges; boundary={boundary}"))
    return Response(206, out, frame(boundary, parts), files=[f])


def _if_range_allows(header: str | None, tag: str, f: File) -> bool:
    if header is None:
        return True
    # A change is an mtime or a ctime: content rewritten with its mtime put back moves the ctime.
    strong = date_is_strong(max(f.mtime_ns, f.ctime_ns), time.time_ns())
    return if_range_allows(header, tag, f.mtime_ns // 1_000_000_000, date_is_strong=strong)
