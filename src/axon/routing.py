"""Routes: a path and a method to the handler that answers them.

:class:`Router` is the App's base class rather than an object the App holds: the App calls
``match`` once per request, and a method of the App's own class costs no hop through a second
object.

A pattern is a literal path (``/api/health``, looked up in a dict) or one with parameters
(``/files/<path:path>``: ``<name>`` is one segment, ``<path:name>`` spans slashes), tried in the
order added. GET routes answer HEAD too.
"""

from __future__ import annotations

import inspect
import re
from typing import Any, Callable, Iterable

from .errors import MethodNotAllowed, NotFound
from .request import Request
from .response import Response

__all__ = ["Handler", "Route", "Router"]

Handler = Callable[[Request], Any]

_PARAM = re.compile(r"<(?:(path):)?([A-Za-z_][A-Za-z0-9_]*)>")


class Route:
    __slots__ = ("handler", "is_async", "blocking", "repeatable")

    def __init__(self, handler: Handler, blocking: bool | None, repeatable: bool = False) -> None:
        self.handler = handler
        self.is_async = inspect.iscoroutinefunction(handler)
        # A plain function may block (disk, database): async runtimes run it in a thread pool,
        # unless its author says it never blocks, as Axon's own endpoints do.
        self.blocking = (not self.is_async) if blocking is None else blocking
        self.repeatable = repeatable


class Router:
    """The routing table: exact paths in a dict, patterns in order, and the fixed answers that a
    route added at their path replaces."""

    def __init__(self) -> None:
        # The asterisk-form target is for OPTIONS only (RFC 9110 7.1): the server's own methods.
        self._exact: dict[str, dict[str, Route]] = {"*": {"OPTIONS": Route(self._server_options, False)}}
        self._patterns: list[tuple[re.Pattern[str], dict[str, Route]]] = []
        #: Counts the routes added: a server that remembers answers forgets them when it moves.
        self.routes_version = 0
        #: GET responses that never change, by path (the health probe). Axon's own server answers
        #: them from bytes encoded once, without calling the App, while nothing observes requests
        #: (``records.observed()``). Registering any route at the same path removes the entry.
        self.fixed: dict[str, Response] = {}

    def route(
        self, pattern: str, methods: Iterable[str] = ("GET",), *, blocking: bool | None = None, repeatable: bool = False,
    ):
        """Decorator: ``@app.route("/items/<name>", methods=["GET"])``. ``<path:name>`` spans
        slashes. GET routes answer HEAD too. Set ``blocking=False`` on a plain function that
        never blocks so async runtimes call it inline instead of in a thread.

        ``repeatable=True`` promises that a GET's response is a function of the request's target,
        its ``Accept`` header and the versions of the files it holds (``Response.files``, opened
        from ``app.store``), and of nothing else: no other header, no clock, no counter, no
        database. Axon's own server may then send the head it answered with again, for a later
        GET of the same target and Accept without ``Range`` or a precondition, with those files
        opened anew, while each is the same version (server/shortcuts.py). Axon's own file and
        batch endpoints are repeatable."""

        def decorate(handler: Handler) -> Handler:
            self.add_route(pattern, handler, methods, blocking=blocking, repeatable=repeatable)
            return handler

        return decorate

    def add_route(
        self, pattern: str, handler: Handler, methods: Iterable[str] = ("GET",), *, blocking: bool | None = None,
        repeatable: bool = False,
    ) -> None:
        """What :meth:`route` does, for a handler at hand."""
        if not pattern.startswith("/"):
            raise ValueError(f"a route pattern starts with '/': {pattern!r}")
        route = Route(handler, blocking, repeatable)
        self.routes_version += 1
        self.fixed.pop(pattern, None)  # a route of your own answers here from now on
        if _PARAM.search(pattern) is None:
            table = self._exact.setdefault(pattern, {})
        else:
            regex = re.compile(_compile(pattern), re.DOTALL)  # a file name may hold a newline
            table = next((t for r, t in self._patterns if r.pattern == regex.pattern), None)
            if table is None:
                table = {}
                self._patterns.append((regex, table))
        for method in methods:
            table[method.upper()] = route

    def match(self, method: str, path: str) -> tuple[Route, dict[str, str]]:
        params: dict[str, str] = {}
        table = self._exact.get(path)
        if table is None:
            for regex, candidate in self._patterns:
                found = regex.fullmatch(path)
                if found:
                    table, params = candidate, found.groupdict()
                    break
            else:
                raise NotFound("no such endpoint", code="no_route")
        route = table.get(method)
        if route is None and method == "HEAD":
            route = table.get("GET")
        if route is None:
            allowed = set(table) | ({"HEAD"} if "GET" in table else set())
            raise MethodNotAllowed(allowed)
        return route, params

    def _server_options(self, request: Request) -> Response:
        methods = {m for table in self._exact.values() for m in table}
        methods.update(m for _, table in self._patterns for m in table)
        if "GET" in methods:
            methods.add("HEAD")
        return Response(200, [("Allow", ", ".join(sorted(methods)))], [])


def _compile(pattern: str) -> str:
    out, pos = [], 0
    for m in _PARAM.finditer(pattern):
        out.append(re.escape(pattern[pos : m.start()]))
        out.append(f"(?P<{m.group(2)}>.+)" if m.group(1) else f"(?P<{m.group(2)}>[^/]+)")
        pos = m.end()
    out.append(re.escape(pattern[pos:]))
    return "".join(out)
