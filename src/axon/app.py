"""The App: routes, the Request, and Axon's built-in endpoints.

One App runs unchanged as a WSGI app, an ASGI app and on Axon's own server; each runtime builds
a :class:`Request`, calls :meth:`App.handle` (or :meth:`App.handle_async`) and sends the
:class:`~axon.response.Response` it gets back. Users add their own endpoints with
:meth:`App.route`, as the original allowed:

    app = App("/srv/files")

    @app.route("/api/echo", methods=["POST"])
    def echo(request):
        return request.json()          # dict or list -> JSON, str -> text, or any Response
"""

from __future__ import annotations

import asyncio
import inspect
import json
import logging
import os
import re
import time
from concurrent.futures import ThreadPoolExecutor
from functools import lru_cache
from typing import Any, Callable, Iterable, Protocol
from urllib.parse import parse_qsl

from .errors import BadRequest, HTTPError, MethodNotAllowed, NotFound, URITooLong
from .files import FileStore
from .limits import DEFAULT_LIMITS, Limits
from . import log
from .log import access_logger, logger
from .records import Records
from .response import Response, error_response, json_response, redirect, stream_response, text_response
from .sansio.batch import plan_batch
from .sansio.batch_identity import derive_key
from .sansio.single_file import plan_file
from .signing import Verifier

__all__ = [
    "App", "Request", "Response", "json_response", "text_response", "stream_response", "redirect",
]

Handler = Callable[["Request"], Any]


class Observer(Protocol):
    """Told of every request, one call each; must not raise. (A Metrics can be one, but
    :func:`axon.metrics.instrument` has it read the App's records in batches instead: cheaper.)"""

    def started(self, request: "Request") -> None: ...
    def finished(self, request: "Request", response: Response, seconds: float) -> None: ...


_PARAM = re.compile(r"<(?:(path):)?([A-Za-z_][A-Za-z0-9_]*)>")
_HEALTH = b'{"status":"available"}'
#: Methods whose request body the WSGI and ASGI adapters read (up to Limits.max_body_bytes).
BODY_METHODS = ("POST", "PUT", "PATCH")


class Request:
    """One HTTP request as the runtime received it. ``path`` is percent-decoded exactly once;
    ``query_string`` is raw (decoded once by :attr:`query`); header names are lower case."""

    __slots__ = ("method", "path", "query_string", "headers", "body", "params", "_query")

    def __init__(
        self,
        method: str,
        path: str,
        query_string: str = "",
        headers: dict[str, str] | None = None,
        body: bytes = b"",
    ) -> None:
        self.method = method
        self.path = path
        self.query_string = query_string
        self.headers = headers if headers is not None else {}
        self.body = body
        self.params: dict[str, str] = {}
        self._query: list[tuple[str, str]] | None = None

    @property
    def query(self) -> list[tuple[str, str]]:
        """The query's (name, value) pairs, in order, repeats kept, decoded once as UTF-8."""
        if self._query is None:
            raw = self.query_string
            # A list of its own for each request: a handler may change it.
            self._query = list(_parsed_query(raw) if len(raw) <= 2048 else _parse_query(raw))
        return self._query

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


class Route:
    __slots__ = ("handler", "is_async", "blocking")

    def __init__(self, handler: Handler, blocking: bool | None) -> None:
        self.handler = handler
        self.is_async = inspect.iscoroutinefunction(handler)
        # A plain function may block (disk, database): async runtimes run it in a thread pool,
        # unless its author says it never blocks, as Axon's own endpoints do.
        self.blocking = (not self.is_async) if blocking is None else blocking


class App:
    """Routes requests to handlers; owns the FileStore (the root jail) and the Limits."""

    def __init__(
        self,
        root: str | os.PathLike[str] | None = None,
        *,
        limits: Limits = DEFAULT_LIMITS,
        store: FileStore | None = None,
        allow_hidden: bool = False,
        builtins: bool = True,
        threads: int = 32,
        secret: str | bytes | None = None,
        observers: Iterable[Observer] = (),
    ) -> None:
        if store is None:
            store = FileStore(root if root is not None else os.environ.get("AXON_ROOT", "."), allow_hidden=allow_hidden)
        self.store = store
        self.limits = limits
        self.threads = threads
        # ``secret`` (default: $AXON_SECRET; "" for none) turns signed requests on (axon.signing)
        # and keys batch identities (ETag and boundary, axon.sansio.batch_identity).
        if secret is None:
            secret = os.environ.get("AXON_SECRET") or None
        self.verifier = Verifier(secret) if secret else None
        self.public_paths = {"/api/health"}  # open even when signing is on: load balancers probe it
        self.batch_key = derive_key(secret or None, store.root)
        self._exact: dict[str, dict[str, Route]] = {}
        self._patterns: list[tuple[re.Pattern[str], dict[str, Route]]] = []
        self._executor: ThreadPoolExecutor | None = None
        #: GET responses that never change, by path (the health probe). Axon's own server answers
        #: them from bytes encoded once, without calling the App, while nothing observes requests
        #: (no observer, no access log). Registering any route at the same path removes the entry.
        self.fixed: dict[str, Response] = {}
        #: Told of every request: ``started(request)`` before routing, ``finished(request,
        #: response, seconds)`` once it is planned.
        self.observers: list[Observer] = list(observers)
        #: A tuple per response for those who read them in batches: axon.metrics and the access
        #: log (axon.records). Made only while someone reads them.
        self.records = Records(access_log=True)
        if builtins:
            self.add_route("/api/health", self._health, ["GET"], blocking=False)
            self.fixed["/api/health"] = self._health(Request("GET", "/api/health"))
            self.add_route("/api/stream-files", self._stream_files, ["GET", "POST"], blocking=False)
            self.add_route("/files/<path:path>", self._file, ["GET"], blocking=False)

    # -- routing -------------------------------------------------------------------------------

    def route(self, pattern: str, methods: Iterable[str] = ("GET",), *, blocking: bool | None = None):
        """Decorator: ``@app.route("/items/<name>", methods=["GET"])``. ``<path:name>`` spans
        slashes. GET routes answer HEAD too. Set ``blocking=False`` on a plain function that
        never blocks so async runtimes call it inline instead of in a thread."""

        def decorate(handler: Handler) -> Handler:
            self.add_route(pattern, handler, methods, blocking=blocking)
            return handler

        return decorate

    def add_route(self, pattern: str, handler: Handler, methods: Iterable[str] = ("GET",), *, blocking: bool | None = None) -> None:
        if not pattern.startswith("/"):
            raise ValueError(f"a route pattern starts with '/': {pattern!r}")
        route = Route(handler, blocking)
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

    # -- handling ------------------------------------------------------------------------------

    def handle(self, request: Request) -> Response:
        """For synchronous runtimes (WSGI): run the handler here, in the caller's thread."""
        started = time.perf_counter()
        next(self.records.begun)
        for observer in self.observers:
            observer.started(request)
        try:
            route = self._prepare(request)
            result = route.handler(request)
            if route.is_async:
                result = asyncio.run(result)
            response = _to_response(result)
        except Exception as exc:  # noqa: BLE001 - every failure becomes a JSON response
            response = _failure(exc, request)
        return self._finish(request, response, started)

    async def handle_async(self, request: Request) -> Response:
        """For asynchronous runtimes (ASGI, native): blocking handlers go to a thread pool."""
        started = time.perf_counter()
        next(self.records.begun)
        for observer in self.observers:
            observer.started(request)
        try:
            route = self._prepare(request)
            if route.is_async:
                result = await route.handler(request)
            elif route.blocking:
                loop = asyncio.get_running_loop()
                result = await loop.run_in_executor(self.executor, route.handler, request)
            else:
                result = route.handler(request)
            response = _to_response(result)
        except Exception as exc:  # noqa: BLE001 - every failure becomes a JSON response
            response = _failure(exc, request)
        return self._finish(request, response, started)

    @property
    def executor(self) -> ThreadPoolExecutor:
        if self._executor is None:
            self._executor = ThreadPoolExecutor(self.threads, thread_name_prefix="axon-handler")
        return self._executor

    def close(self) -> None:
        """Stop the thread pool, if one was started (a later request starts a new one): a
        runtime calls this when it stops serving."""
        executor, self._executor = self._executor, None
        if executor is not None:
            executor.shutdown(wait=False, cancel_futures=True)

    def fixed_answers(self) -> dict[str, Response]:
        """The :attr:`fixed` responses a server may send as they are, without calling the App:
        none while anything observes requests (an observer, a reader of the records, a handler
        on ``axon.access``: a response sent from bytes is neither counted nor logged), and only
        those open without a signature. What observes can change while serving: ask again."""
        if self.observers or self.records.wanted or access_logger.isEnabledFor(logging.INFO):
            return {}
        verifier, public = self.verifier, self.public_paths
        return {path: r for path, r in self.fixed.items() if verifier is None or path in public}

    def _prepare(self, request: Request) -> Route:
        limits = self.limits
        if len(request.query_string) > limits.max_query_bytes:
            raise URITooLong(f"query string longer than {limits.max_query_bytes} bytes")
        if len(request.path) + len(request.query_string) > limits.max_url_bytes:
            raise URITooLong(f"URL longer than {limits.max_url_bytes} bytes")
        if self.verifier is not None and request.path not in self.public_paths:
            # Before routing: a refused request opens no file and learns no endpoint.
            request._query = self.verifier.verify(request, time.time())
        route, request.params = self.match(request.method, request.path)
        return route

    def _finish(self, request: Request, response: Response, started: float) -> Response:
        if request.method == "HEAD":
            response.without_body()
        ended = time.perf_counter()
        seconds = ended - started
        for observer in self.observers:
            observer.finished(request, response, seconds)
        records = self.records
        if records.readers or log.access is not None:  # records.wanted, without a property call
            records.add(request, response, seconds, ended)
        if log.access is None and access_logger.isEnabledFor(logging.INFO):  # your own handler on "axon.access"
            access_logger.info(
                '%s %s %d %s %.1fms', request.method, request.path, response.status,
                "-" if response.length is None else response.length, seconds * 1000,
                extra={"method": request.method, "path": request.path, "status": response.status,
                       "bytes": response.length, "ms": round(seconds * 1000, 3)},
            )
        return response

    # -- responses users build from files --------------------------------------------------

    def send_file(self, request: Request, path: str) -> Response:
        """One file under the root, with ETag, Last-Modified, Range (206/416) and 304/412."""
        return plan_file(self.store, path, request.method, request.headers, self.limits)

    def send_batch(self, request: Request, paths: list[str]) -> Response:
        """Files under the root as one ``multipart/mixed`` body; any bad path is one JSON 4xx."""
        return plan_batch(self.store, paths, self.limits, key=self.batch_key, headers=request.headers)

    # -- built-in endpoints --------------------------------------------------------------------

    def _health(self, request: Request) -> Response:
        return Response(200, [("Content-Type", "application/json")], [_HEALTH])

    def _stream_files(self, request: Request) -> Response:
        if request.method == "POST":
            if len(request.body) > self.limits.max_body_bytes:  # runtimes refuse earlier; be sure
                raise BadRequest("request body too large", code="body_too_large", status=413)
            data = request.json()
            paths = data.get("files") if isinstance(data, dict) else None
            if not isinstance(paths, list) or not all(isinstance(p, str) for p in paths):
                raise BadRequest('POST a JSON object {"files": ["path", ...]}', code="bad_json")
        else:
            paths = [value for _, value in request.query]
        return self.send_batch(request, paths)

    def _file(self, request: Request) -> Response:
        return self.send_file(request, request.params["path"])


def _parse_query(raw: str) -> tuple[tuple[str, str], ...]:
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
_parsed_query = lru_cache(maxsize=1024)(_parse_query)


def _compile(pattern: str) -> str:
    out, pos = [], 0
    for m in _PARAM.finditer(pattern):
        out.append(re.escape(pattern[pos : m.start()]))
        out.append(f"(?P<{m.group(2)}>.+)" if m.group(1) else f"(?P<{m.group(2)}>[^/]+)")
        pos = m.end()
    out.append(re.escape(pattern[pos:]))
    return "".join(out)


def _to_response(result: Any) -> Response:
    if isinstance(result, Response):
        return result
    if isinstance(result, (dict, list)):
        return json_response(result)
    if isinstance(result, str):
        return text_response(result)
    if isinstance(result, bytes):
        return Response(200, [("Content-Type", "application/octet-stream")], [result])
    raise TypeError(f"a handler returned {type(result).__name__}; return a Response, dict, list, str or bytes")


def _failure(exc: Exception, request: Request) -> Response:
    if isinstance(exc, HTTPError):
        return error_response(exc)
    # Unexpected: log it whole, tell the client nothing about the internals.
    logger.error("unhandled error in %s %s", request.method, request.path, exc_info=exc)
    return error_response(HTTPError("internal server error"))
