"""What the runtimes do alike: a request from its parts (which methods carry a body, headers
folded, a body read within the limits), the ``Date`` a response carries, and the App built on
first use.

WSGI (:mod:`axon.wsgi`), ASGI (:mod:`axon.asgi`) and Axon's own server (:mod:`axon.server`)
each receive a request in their own shape (an environ, a scope and its messages, parser
callbacks) and turn it into the same :class:`~axon.request.Request`; the rules for doing so are
here, once. The native server applies them inside llhttp's callbacks, a header or a piece of
body at a time: :func:`fold_header` and :func:`check_head` for each header, on both of its head
paths (``server/reading.py``), and :func:`declared_length`; it keeps the counting of
:class:`BodyReader` inline (``on_body``). Its ``Date`` is part of the head it frames, rebuilt
on a timer (``server/wire.py``).

An App that cannot be built as configured (a root that is not a directory, a store whose extra is
not installed) is told the same way by every runtime, in the words of :func:`build_app`: ``axon
serve`` exits with them, an ASGI lifespan's startup fails with them, and where the App is built on
a first request (WSGI, ASGI without lifespan) each request gets them in a JSON 503.
"""

from __future__ import annotations

import functools
import logging
import os
import time
from collections.abc import Callable, Iterable
from typing import Generic, TypeVar

from .app import App
from .errors import BadRequest, HeadersTooLarge, ServiceUnavailable, URITooLong
from .http.conditional import http_date
from .limits import DEFAULT_LIMITS, Limits

__all__ = [
    "BODY_METHODS", "FIELD_BYTES", "BodyReader", "CannotServe", "DateHeader", "Lazy", "build_app", "check_head",
    "checked_from",
    "declared_length", "default_app", "fold_header", "fold_headers", "refusal_to_serve",
]

T = TypeVar("T")

#: Methods whose request body the WSGI and ASGI adapters read (up to Limits.max_body_bytes).
BODY_METHODS = ("POST", "PUT", "PATCH")


#: What a header field counts toward ``Limits.max_header_bytes`` beyond its name and value
#: (": " and CRLF).
FIELD_BYTES = 4


def fold_header(headers: dict[str, str], name: bytes, value: bytes) -> None:
    """Add one header field to ``headers`` as the App reads them: names lower case, values
    latin-1 text (one character per byte, as received), a repeated field's values joined by
    ", " in order (RFC 9110 5.3)."""
    key = name.decode("latin-1").lower()
    text = value.decode("latin-1")
    headers[key] = f"{headers[key]}, {text}" if key in headers else text


def fold_headers(fields: Iterable[tuple[bytes, bytes]]) -> dict[str, str]:
    """Header fields as the App reads them (:func:`fold_header`)."""
    headers: dict[str, str] = {}
    for name, value in fields:
        fold_header(headers, name, value)
    return headers


def check_head(target: int, count: int, field_bytes: int, limits: Limits) -> None:
    """Refuse a request head past the limits: a target of ``target`` bytes longer than
    ``max_url_bytes`` (414); ``count`` fields, more than ``max_headers``, or whose names and
    values (``field_bytes``), :data:`FIELD_BYTES` each and the target come to more than
    ``max_header_bytes`` (431). A parser calls it as the head arrives (with no fields yet for
    the target alone), or once for a whole head: the same head is refused alike."""
    if target > limits.max_url_bytes:
        raise URITooLong(f"URL longer than {limits.max_url_bytes} bytes")
    if count:
        if count > limits.max_headers:
            raise HeadersTooLarge(f"more than {limits.max_headers} request headers")
        if target + field_bytes + FIELD_BYTES * count > limits.max_header_bytes:
            raise HeadersTooLarge(f"request headers longer than {limits.max_header_bytes} bytes")


@functools.lru_cache(maxsize=16)
def checked_from(limits: Limits) -> tuple[int, int]:
    """``(fields, size)``: a request head of at most ``fields`` fields and ``size`` bytes in all
    (request line to blank line) is one that :func:`check_head` refuses never, found by asking
    it: such a head has a target of at most ``size`` bytes and fields whose names and values
    come to at most ``size`` bytes, and a limit that passes a head passes every smaller one. A
    reader that knows a head whole may skip the check within them: the rule is still
    :func:`check_head`'s, asked less often."""
    def largest(within: Callable[[int], bool], high: int) -> int:  # within(0) holds, within(high) not
        low = 0
        while high - low > 1:
            middle = (low + high) // 2
            if within(middle):
                low = middle
            else:
                high = middle
        return low

    def passes(target: int, count: int, field_bytes: int) -> bool:
        try:
            check_head(target, count, field_bytes, limits)
        except (URITooLong, HeadersTooLarge):
            return False
        return True

    fields = largest(lambda n: passes(0, n, 0), limits.max_headers + 1)
    return fields, largest(lambda n: passes(n, fields, n), limits.max_url_bytes + 1)


def declared_length(text: str | None, limits: Limits) -> int | None:
    """The body's ``Content-Length`` (None when there is none), refused before a byte of the body
    is read: 400 when it is not a number of bytes, 413 when it is more than the limits allow."""
    if text is None:
        return None
    if not (text.isascii() and text.isdigit()):  # "²".isdigit() is True; int() takes "-1", " 1", "1_0"
        raise BadRequest("bad Content-Length", code="bad_request")
    size = int(text)
    limits.check_body(size)
    return size


class BodyReader:
    """A request body as its pieces arrive, refused (413) as soon as they pass the limit; the
    runtime supplies the pieces from its own IO."""

    __slots__ = ("_limits", "_parts", "size")

    def __init__(self, limits: Limits) -> None:
        self._limits = limits
        self._parts: list[bytes] = []
        self.size = 0

    def add(self, piece: bytes) -> None:
        self.size += len(piece)
        self._limits.check_body(self.size)
        self._parts.append(piece)

    def body(self) -> bytes:
        parts = self._parts
        return parts[0] if len(parts) == 1 else b"".join(parts)


class DateHeader:
    """``Date``, which an origin server with a clock must send (RFC 9110 6.6.1), formatted once a
    second for a runtime that asks per response. Axon's own server instead rebuilds its
    ``Date`` and ``Server`` line on a timer (``server/wire.py``: ``date_line``)."""

    def __init__(self) -> None:
        self._second = -1
        self._header = ("Date", "")

    def __call__(self) -> tuple[str, str]:
        second = int(time.time())
        if second != self._second:
            self._second, self._header = second, ("Date", http_date(second))
        return self._header


def default_app(root: str | os.PathLike[str] | None = None, *, limits: Limits = DEFAULT_LIMITS,
                app: App | None = None) -> App:
    """``app`` if given, else an App serving ``root`` (default ``$AXON_ROOT``, else the current
    directory): what ``create_app`` of each runtime wraps."""
    return app if app is not None else App(root, limits=limits)


class CannotServe(Exception):
    """The App cannot be built as configured; ``str()`` says what is wrong, for the operator."""


def build_app(build: Callable[[], T]) -> T:
    """``build()``, or :class:`CannotServe` saying why it cannot serve: a root that is not a
    directory, a setting it cannot take, a store refusing (ValueError), a store's extra not
    installed (ImportError, its message naming the ``pip install``)."""
    try:
        return build()
    except (ValueError, ImportError) as exc:
        raise CannotServe(str(exc)) from exc


_told: set[str] = set()


def refusal_to_serve(failure: CannotServe) -> ServiceUnavailable:
    """The 503 a request gets while the App cannot be built (:func:`build_app`), its JSON saying
    why; logged on the ``axon`` logger the first time, where the runtime's log shows it."""
    message = str(failure)
    if message not in _told:
        _told.add(message)
        logging.getLogger("axon").error("cannot serve: %s", message)
    return ServiceUnavailable(f"cannot serve: {message}", code="cannot_serve")


class Lazy(Generic[T]):
    """``build()``'s result, built on the first call: ``axon.wsgi:application`` and
    ``axon.asgi:application`` open nothing when their module is imported. A call that raises
    keeps nothing: the next call builds again (a root mounted late is then served)."""

    def __init__(self, build: Callable[[], T]) -> None:
        self._build = build
        self._built: T | None = None

    def __call__(self) -> T:
        built = self._built
        if built is None:
            built = self._built = self._build()
        return built
