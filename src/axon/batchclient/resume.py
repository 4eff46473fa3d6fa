"""What the answer to a resumed batch means, decided from its status and headers alone.

A download cut short saved where it stood (``axon.client.journal`` keeps it on disk); resuming
asks for the rest, ``Range: bytes=<offset>-`` with ``If-Range: <etag>``. The batch's ETag is
strong and names its files' versions, so the answer is either the rest of the same bytes (206,
which must be exactly the range asked) or the whole batch as it is now (200: a file changed, or
the server ignores ``Range``). A 416 says the saved offset fits no version of the batch.
"""

from __future__ import annotations

import enum
from email.message import Message
from typing import NamedTuple

from ..http.multipart_parser import MultipartError, boundary_from_content_type

__all__ = ["Saved", "Verdict", "judge", "keeps_saved_after", "resume_headers"]


class Saved(NamedTuple):
    """The facts of a saved download that its continuation must match."""

    etag: str
    content_type: str
    length: int  # of the whole body
    offset: int  # body bytes received


class Verdict(enum.Enum):
    FRESH = "a whole batch, nothing saved"
    CONTINUE = "the rest of the saved download"
    START_OVER = "the whole batch again: what was saved is of no use"
    UNUSABLE = "a 206 that does not continue what was saved"


def resume_headers(saved: Saved) -> dict[str, str]:
    return {"Range": f"bytes={saved.offset}-", "If-Range": saved.etag}


def keeps_saved_after(status: int) -> bool:
    """Whether a refusal leaves what was saved worth keeping: not after a 416 (the offset fits no
    version of the batch); after others (a file now missing...) ``If-Range`` decides later."""
    return status != 416


def judge(
    status: int, headers: Message, content_length: int | None, saved: Saved | None
) -> tuple[Verdict, str | None]:
    """What a 2xx answer (``status``, ``headers``, the body's ``content_length``) means to a
    request made with ``saved`` (None: not resumed), and for :attr:`Verdict.UNUSABLE` why."""
    if saved is None:
        if status == 206:
            return Verdict.UNUSABLE, "the server answered 206 Partial Content to a request for whole files"
        return Verdict.FRESH, None
    if status != 206:
        return Verdict.START_OVER, None
    problem = _continuation_problem(saved, headers, content_length)
    return (Verdict.CONTINUE, None) if problem is None else (Verdict.UNUSABLE, problem)


def _continuation_problem(saved: Saved, headers: Message, content_length: int | None) -> str | None:
    expected = f"bytes {saved.offset}-{saved.length - 1}/{saved.length}"
    got = (headers.get("Content-Range") or "").strip()
    if got != expected:
        return f"Content-Range is {got!r}, not {expected!r}"
    etag = headers.get("ETag")
    if etag is not None and etag.strip() != saved.etag:
        return f"ETag is {etag!r}, not {saved.etag!r}"
    if content_length is not None and content_length != saved.length - saved.offset:
        return f"Content-Length is {content_length}, not {saved.length - saved.offset}"
    content_type = headers.get("Content-Type")
    if content_type is not None:
        try:
            same = boundary_from_content_type(content_type) == boundary_from_content_type(saved.content_type)
        except MultipartError:
            same = False
        if not same:
            return "the multipart boundary changed"
    return None
