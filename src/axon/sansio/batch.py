"""Plan a batch: open and check every file, then frame them all as one ``multipart/mixed`` body.

Nothing is written before the plan is complete, so any failure (a missing file, a path outside
the root, too many files or bytes) is one JSON 4xx naming every offending path, never a 200 cut
short. A path named twice is opened once: slices read by offset, so parts can share a descriptor.
"""

from __future__ import annotations

from ..errors import BadRequest, HTTPError, PayloadTooLarge
from ..files import FileStore, OpenFile
from ..limits import Limits
from ..response import Response
from .multipart import file_part_headers, frame, new_boundary
from .segments import FileSlice


def check_count(paths: list[str], limits: Limits) -> None:
    """Refuse an empty or over-long batch before a single file is opened."""
    if not paths:
        raise BadRequest("name at least one file, e.g. ?file1=examples/a.bin", code="no_files")
    if len(paths) > limits.max_files:
        raise PayloadTooLarge(
            f"a batch may name at most {limits.max_files} files, not {len(paths)}", code="too_many_files"
        )


def open_all(store: FileStore, paths: list[str]) -> dict[str, OpenFile]:
    """Every distinct path opened, or one error that names each path that failed."""
    opened: dict[str, OpenFile] = {}
    failures: list[HTTPError] = []
    try:
        for path in paths:
            if path in opened:
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
    return HTTPError(
        f"{len(failures)} of the {total} requested files cannot be served",
        status=status,
        code="batch_refused",
        paths=paths,
        details=details,
    )


def plan_batch(store: FileStore, paths: list[str], limits: Limits, *, boundary: str | None = None) -> Response:
    check_count(paths, limits)
    opened = open_all(store, paths)
    files = list(opened.values())
    try:
        total = sum(opened[p].size for p in paths)
        if total > limits.max_batch_bytes:
            raise PayloadTooLarge(
                f"the batch holds {total} bytes; at most {limits.max_batch_bytes} may be sent",
                code="batch_too_large",
            )
        boundary = boundary or new_boundary()
        parts = []
        for path in paths:
            f = opened[path]
            parts.append((file_part_headers(path, f.name, f.content_type), FileSlice(f.fd, 0, f.size)))
        headers = [("Content-Type", f"multipart/mixed; boundary={boundary}")]
        return Response(200, headers, frame(boundary, parts), files=files)
    except BaseException:
        for f in files:
            f.close()
        raise
