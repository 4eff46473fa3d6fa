"""The Request: one HTTP request as a runtime received it, and its query decoded once.

It sits below ``records``, ``log`` and ``metrics`` (they read requests) and above nothing of the
App's, so that its readers name it without importing the App. ``axon.app`` re-exports it, where
the README sends users for it.
"""

from __future__ import annotations

import json
from functools import lru_cache
from typing import Any
from urllib.parse import parse_qsl

from .errors import BadRequest

__all__ = ["Request", "parse_query"]


class Request:
    """One HTTP request as the runtime received it. ``path`` is percent-decoded exactly once;
    ``query_string`` is raw (decoded once by :attr:`query`); header names are lower case.
    ``on_loop`` is true while its handler runs on an event loop's thread, where a long read would
    hold every other connection: work that would block raises :class:`~axon.errors.WouldBlock`
    there, and the App runs the handler again in its thread pool (``on_loop`` false). ``client``
    is the address of the peer, as the runtime gives it (None where it gives none); for the logs.
    ``planned``: a batch planned over several turns of the loop (WouldBlock's ``steps``), for the
    handler run again: ``(what was asked, response or None, error or None)``. ``made``: the
    responses its handler made from files on the loop, closed by the App if that run is cut short
    (WouldBlock), since the handler never gets to close them."""

    __slots__ = ("method", "path", "query_string", "headers", "body", "client", "params", "on_loop", "planned", "made", "_query")

    def __init__(
        self,
        method: str,
        path: str,
        query_string: str = "",
        headers: dict[str, str] | None = None,
        body: bytes = b"",
        client: str | None = None,
    ) -> None:
        self.method = method
        self.path = path
        self.query_string = query_string
        self.headers = headers if headers is not None else {}
        self.body = body
        self.client = client
        self.params: dict[str, str] = {}
        self.on_loop = False
        self.planned: tuple | None = None
        self.made: list | None = None
        self._query: list[tuple[str, str]] | None = None

    @property
    def query(self) -> list[tuple[str, str]]:
        """The query's (name, value) pairs, in order, repeats kept, decoded once as UTF-8."""
        if self._query is None:
            # A list of its own for each request: a handler may change it.
            self._query = list(_pairs(self.query_string))
        return self._query

    @query.setter
    def query(self, pairs: list[tuple[str, str]]) -> None:
        """Replace the pairs (the App does, once a signature is checked and its own pairs taken off)."""
        self._query = list(pairs)

    def query_values(self) -> list[str]:
        """The query's values in order (a batch's paths, whose names are free). Unless the pairs
        were asked for or replaced, they are made from the query string and let go at once: a
        batch of hundreds of files would otherwise keep a pair per file alive for as long as it
        is sent, each one walked by the next young collection (docs/design-notes.md)."""
        pairs = self._query if self._query is not None else _pairs(self.query_string)
        return [value for _, value in pairs]

    def arg(self, name: str, default: str | None = None) -> str | None:
        for key, value in self.query:
            if key == name:
                return value
        return default

    def json(self) -> Any:
        try:
            return json.loads(self.body)
        except (UnicodeDecodeError, ValueError, RecursionError) as exc:
            raise BadRequest(f"request body is not valid JSON: {exc}", code="bad_json") from None


def parse_query(raw: str) -> tuple[tuple[str, str], ...]:
    """A query string (or a form-encoded body read as latin-1) as (name, value) pairs, decoded
    once as UTF-8; a 400 when it is not UTF-8 once percent-decoded."""
    try:
        # Runtimes pass the raw query as latin-1, one character per byte: recover the bytes,
        # so that raw UTF-8 and %-escapes are decoded alike, once, as UTF-8.
        try:
            text = raw.encode("latin-1").decode("utf-8")
        except UnicodeEncodeError:  # a Request built by hand with text beyond latin-1
            text = raw
        if "%" in text or "+" in text:
            return tuple(parse_qsl(text, keep_blank_values=True, errors="strict"))
        # Nothing to decode: what parse_qsl would give, four times faster.
        return tuple([(k, v) for k, _, v in (f.partition("=") for f in text.split("&") if f)])
    except UnicodeDecodeError:
        raise BadRequest("query string is not valid UTF-8 once percent-decoded", code="bad_query") from None


#: Clients repeat their queries (a data loader's shard list, an app's bundle): parse each once.
_parsed_query = lru_cache(maxsize=1024)(parse_query)


def _pairs(raw: str) -> tuple[tuple[str, str], ...]:
    """A query string's pairs, a short one's parsed once for all the requests that repeat it."""
    return _parsed_query(raw) if len(raw) <= 2048 else parse_query(raw)
