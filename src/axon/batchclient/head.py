"""An answer's status line and headers as plain values, whichever transport read them: headers in
an :class:`email.message.Message`, as ``http.client`` gives them (case-insensitive, repeats kept)."""

from __future__ import annotations

from collections.abc import Iterable
from email.message import Message
from typing import NamedTuple

from .errors import FetchError

__all__ = ["ResponseHead", "content_length", "headers_from_pairs"]


class ResponseHead(NamedTuple):
    status: int
    reason: str
    headers: Message

    @property
    def ok(self) -> bool:
        return 200 <= self.status < 300

    @property
    def content_length(self) -> int | None:
        return content_length(self.headers)


def headers_from_pairs(pairs: Iterable[tuple[str, str]]) -> Message:
    headers = Message()
    for name, value in pairs:
        headers[name] = value
    return headers


def content_length(headers: Message) -> int | None:
    """The body's announced length; None if there is none. Several that disagree, or one that is
    not a number, is a :class:`FetchError`: the body's end could not be trusted."""
    values = set(headers.get_all("Content-Length") or [])
    if not values:
        return None
    if len(values) != 1:
        raise _bad_length(values)
    (value,) = values
    if not (value.isascii() and value.strip().isdigit()):
        raise _bad_length(values)
    return int(value)


def _bad_length(values: set[str]) -> FetchError:
    return FetchError(f"the response has an invalid Content-Length: {sorted(values)}")
