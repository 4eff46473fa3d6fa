"""The App: routes, the Request, and Axon's built-in endpoints.

One App runs unchanged as a WSGI app, an ASGI app and on Axon's own server; each runtime builds
a :class:`Request`, calls :meth:`App.handle` (or :meth:`App.handle_async`) and sends the
:class:`~axon.response.Response` it gets back. Users add their own endpoints with
:meth:`App.route`, as the original allowed:

    app = App("/srv/files")            # or App("s3://bucket/prefix"): axon.storage.objects

    @app.route("/api/echo", methods=["POST"])
    def echo(request):
        return request.json()          # dict or list -> JSON, str -> text, or any Response
"""

from __future__ import annotations

import asyncio
import inspect
import json
import os
import re
import time
from concurrent.futures import ThreadPoolExecutor
from functools import lru_cache
from logging import INFO
from typing import Any, Callable, Iterable
from urllib.parse import parse_qsl

from . import __version__
from .config import environment
from .errors import (
    BadRequest, HTTPError, MethodNotAllowed, NotAcceptable, NotFound, PreconditionFailed, URITooLong, WouldBlock,
)
from .http.accept import negotiate
from .http.conditional import body_etag, evaluate
from .storage import Source
from .storage.local import FileStore
from .limits import DEFAULT_LIMITS, Limits
from . import log
from .log import logger
from .records import Records
from .response import NO_STORE, Response, error_response, json_response, redirect, stream_response, text_response
from .plan.batch import check_count, plan_batch
from .plan.slices import Slice, parse_items
from .plan.formats import FORMATS, MEDIA_TYPES
from .plan.listing import back_link, error_page, form_download, plan_listing, wants_page
from .storage.batch_key import derive_key
from .plan.single_file import plan_file
from .signing import Verifier

__all__ = [
    "App", "Request", "Response", "json_response", "text_response", "stream_response", "redirect",
]

Handler = Callable[["Request"], Any]


_PARAM = re.compile(r"<(?:(path):)?([A-Za-z_][A-Za-z0-9_]*)>")
_HEALTH = b'{"status":"available"}'
#: What ``/api/stream-files`` offers by ``Accept``, the default (no Accept, ``*/*``) first.
_BATCH_TYPES = ("multipart/mixed", "application/zip", "application/x-tar")
_VARY = ("Vary", "Accept")
#: Files and batches may change under the same URL: caches keep them but ask again each time,
#: which a strong ETag makes a cheap 304. Assets that never change under a URL can say
#: "public, max-age=31536000, immutable" instead (``App(cache_control=...)``).
DEFAULT_CACHE_CONTROL = "no-cache"
#: Methods whose request body the WSGI and ASGI adapters read (up to Limits.max_body_bytes).
BODY_METHODS = ("POST", "PUT", "PATCH")


class Request:
    """One HTTP request as the runtime received it. ``path`` is percent-decoded exactly once;
    ``query_string`` is raw (decoded once by :attr:`query`); header names are lower case.
    ``on_loop`` is true while its handler runs on an event loop's thread, where a long read would
    hold every other connection: work that would block raises :class:`~axon.errors.WouldBlock`
    there, and the App runs the handler again in its thread pool (``on_loop`` false)."""

    __slots__ = ("method", "path", "query_string", "headers", "body", "params", "on_loop", "_query")

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
        self.on_loop = False
        self._query: list[tuple[str, str]] | None = None

    @property
    def query(self) -> list[tuple[str, str]]:
        """The query's (name, value) pairs, in order, repeats kept, decoded once as UTF-8."""
        if self._query is None:
            raw = self.query_string
            # A list of its own for each request: a handler may change it.
            self._query = list(_parsed_query(raw) if len(raw) <= 2048 else _parse_query(raw))
        return self._query

    @query.setter
    def query(self, pairs: list[tuple[str, str]]) -> None:
        """Replace the pairs (the App does, once a signature is checked and its own pairs taken off)."""
        self._query = list(pairs)

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
    __slots__ = ("handler", "is_async", "blocking", "repeatable")

    def __init__(self, handler: Handler, blocking: bool | None, repeatable: bool = False) -> None:
        self.handler = handler
        self.is_async = inspect.iscoroutinefunction(handler)
        # A plain function may block (disk, database): async runtimes run it in a thread pool,
        # unless its author says it never blocks, as Axon's own endpoints do.
        self.blocking = (not self.is_async) if blocking is None else blocking
        self.repeatable = repeatable


class App:
    """Routes requests to handlers; owns the source of files (the root jail, or an object
    store's prefix) and the Limits."""

    def __init__(
        self,
        root: str | os.PathLike[str] | None = None,
        *,
        limits: Limits = DEFAULT_LIMITS,
        store: Source | None = None,
        allow_hidden: bool = False,
        builtins: bool = True,
        threads: int = 32,
        secret: str | bytes | None = None,
        cache_control: str | None = None,
        browse: bool | None = None,
        portable_identity: bool | None = None,
        identity_secret: str | bytes | None = None,
    ) -> None:
        # ``portable_identity`` (default: $AXON_PORTABLE_IDENTITY) is for nodes that serve copies
        # of the same files behind one balancer: ETags and batches then agree on every node
        # (FileStore(portable_identity=True)), keyed by ``identity_secret`` (default:
        # $AXON_IDENTITY_SECRET), else ``secret``, which every node must share.
        if portable_identity is None:
            portable_identity = environment().portable_identity
        if store is None:
            root = root if root is not None else environment().root
            if "://" in str(root):  # s3://bucket/prefix: the objects under a store's prefix
                from .storage.objects import ObjectSource  # needs the axon-stream[s3] extra

                # An object's facts (its ETag, its Last-Modified) are the same from every node.
                store = ObjectSource(str(root), allow_hidden=allow_hidden)
            else:
                store = FileStore(root, allow_hidden=allow_hidden, portable_identity=portable_identity)
        self.store = store
        # A source whose opening waits on the network (an object store) says so: the async
        # runtimes then run Axon's own endpoints in their thread pool, not on their loop; and
        # it sends its bodies as streams of its own (``body_stream``).
        remote = getattr(store, "blocking", False)
        self._body_stream = getattr(store, "body_stream", None)
        self._for_batch = getattr(store, "for_batch", None)  # opens a batch's paths together
        self.limits = limits
        self.threads = threads
        # ``secret`` (default: $AXON_SECRET; "" for none) turns signed requests on (axon.signing)
        # and keys batch identities (ETag and boundary, axon.http.batch_identity).
        if secret is None:
            secret = environment().secret
        self.verifier = Verifier(secret) if secret else None
        # Open even when signing is on: load balancers probe the health; a client sizes its
        # batches by the limits before it sends one; "*" only lists methods.
        self.public_paths = {"/api/health", "/api/limits", "*"}
        # ``cache_control`` (default: $AXON_CACHE_CONTROL, else DEFAULT_CACHE_CONTROL; "" for
        # none) is sent with every file and batch response, 304s included (RFC 9110 15.4.5).
        if cache_control is None:
            cache_control = environment().cache_control
        if cache_control is None:
            cache_control = DEFAULT_CACHE_CONTROL
        if any(c in cache_control for c in "\r\n\x00"):
            raise ValueError("cache_control must not contain CR, LF or NUL")
        self.cache_control = cache_control
        if portable_identity and isinstance(store, FileStore) and not store.portable_identity:
            raise ValueError("portable_identity needs a store built with FileStore(..., portable_identity=True)")
        if identity_secret is None:
            identity_secret = environment().identity_secret
        if portable_identity and not (identity_secret or secret):
            raise ValueError(
                "portable identities need a key every node shares: set AXON_IDENTITY_SECRET "
                "(or AXON_SECRET, which also turns signing on)"
            )
        own_key = getattr(store, "batch_key", None)  # a source with no root directory derives its own
        key_secret = identity_secret or secret or None
        self.batch_key = own_key(key_secret) if own_key is not None else derive_key(key_secret, store.root)
        # The asterisk-form target is for OPTIONS only (RFC 9110 7.1): the server's own methods.
        self._exact: dict[str, dict[str, Route]] = {"*": {"OPTIONS": Route(self._server_options, False)}}
        self._patterns: list[tuple[re.Pattern[str], dict[str, Route]]] = []
        #: Counts the routes added: a server that remembers answers forgets them when it moves.
        self.routes_version = 0
        self._executor: ThreadPoolExecutor | None = None
        #: GET responses that never change, by path (the health probe). Axon's own server answers
        #: them from bytes encoded once, without calling the App, while nothing observes requests
        #: (``records.observed()``). Registering any route at the same path removes the entry.
        self.fixed: dict[str, Response] = {}
        #: What each response leaves for those who observe them: a tuple for the readers
        #: attached (axon.metrics, the access log), made only while there is one; the
        #: ``axon.access`` logger for a handler of your own (axon.records, axon.log.connect).
        self.records = Records()
        log.connect(self.records)
        if builtins:
            self.add_route("/api/health", self._health, ["GET"], blocking=False)
            self.fixed["/api/health"] = self._health(Request("GET", "/api/health"))
            self.add_route("/api/limits", self._limits, ["GET"], blocking=False)
            # A file or a batch is its target, its Accept and its files' versions, nothing else (no
            # clock: a signed request is never remembered, see handle): repeatable.
            self.add_route("/api/stream-files", self._stream_files, ["GET", "POST"], blocking=remote, repeatable=True)
            # The same batch as an archive, at a URL a link or an HTML form can name.
            self.add_route("/api/stream-files.zip", self._stream_zip, ["GET", "POST"], blocking=remote, repeatable=True)
            self.add_route("/api/stream-files.tar", self._stream_tar, ["GET", "POST"], blocking=remote, repeatable=True)
            self.add_route("/files/<path:path>", self._file, ["GET"], blocking=remote, repeatable=True)
        # ``browse`` (default: $AXON_BROWSE) lists directories under /browse/ (axon.plan.listing);
        # off, as nginx's autoindex is: a listing shows what a URL alone would not.
        self.browse = builtins and bool(environment().browse if browse is None else browse)
        if self.browse:
            self.add_route("/browse", lambda request: redirect("/browse/", 308), ["GET"], blocking=False)
            self.add_route("/browse/", self._browse, ["GET"])
            self.add_route("/browse/<path:path>", self._browse, ["GET"])

    # -- routing -------------------------------------------------------------------------------

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

    # -- handling ------------------------------------------------------------------------------

    def handle(self, request: Request) -> Response:
        """For synchronous runtimes (WSGI): run the handler here, in the caller's thread.

        A server on an event loop may call it there for a handler that never blocks, with
        ``request.on_loop`` set: if the handler finds its work would block after all (a cold
        zip), the answer is instead a coroutine that finishes it in the thread pool."""
        started = time.perf_counter()
        next(self.records.begun)
        try:
            route = self._prepare(request)
            result = route.handler(request)
            if route.is_async:
                result = asyncio.run(result)
            response = _to_response(result)
            # A signed request is checked against the clock (its expiry): never the same answer.
            if route.repeatable and self.verifier is None:
                response.repeatable = True
        except WouldBlock as exc:
            if request.on_loop:
                return self._in_pool(request, route, started)  # type: ignore[return-value]
            response = _failure(exc, request)  # raised where it may block: a handler's bug
        except Exception as exc:  # noqa: BLE001 - every failure becomes a JSON response
            response = _failure(exc, request)
        return self._finish(request, response, started)

    async def handle_async(self, request: Request) -> Response:
        """For asynchronous runtimes (ASGI, native): blocking handlers go to a thread pool."""
        started = time.perf_counter()
        next(self.records.begun)
        try:
            route = self._prepare(request)
            if route.is_async:
                result = await route.handler(request)
            elif route.blocking:
                loop = asyncio.get_running_loop()
                result = await loop.run_in_executor(self.executor, route.handler, request)
            else:
                request.on_loop = True
                result = route.handler(request)
            response = _to_response(result)
        except WouldBlock as exc:
            if not request.on_loop:
                response = _failure(exc, request)  # raised where it may block: a handler's bug
            else:
                return await self._in_pool(request, route, started)
        except Exception as exc:  # noqa: BLE001 - every failure becomes a JSON response
            response = _failure(exc, request)
        return self._finish(request, response, started)

    async def _in_pool(self, request: Request, route: Route, started: float) -> Response:
        """The rest of a request whose handler, called on the loop, would have blocked: the
        handler again, in the thread pool, where it may."""
        request.on_loop = False
        try:
            loop = asyncio.get_running_loop()
            response = _to_response(await loop.run_in_executor(self.executor, route.handler, request))
        except Exception as exc:  # noqa: BLE001 - every failure becomes a JSON response
            response = _failure(exc, request)
        return self._finish(request, response, started)

    @property
    def executor(self) -> ThreadPoolExecutor:
        if self._executor is None:
            self._executor = ThreadPoolExecutor(self.threads, thread_name_prefix="axon-handler")
        return self._executor

    def close(self) -> None:
        """Hand over what the records still hold (the last access-log lines and counts) and
        stop the thread pool, if one was started (a later request starts a new one): a runtime
        calls this when it stops serving."""
        self.records.flush()
        executor, self._executor = self._executor, None
        if executor is not None:
            executor.shutdown(wait=False, cancel_futures=True)

    def fixed_answers(self) -> dict[str, Response]:
        """The :attr:`fixed` responses a server may send as they are, without calling the App:
        none while anything observes requests (an observer, a reader of the records, a handler
        on ``axon.access``: a response sent from bytes is neither counted nor logged), and only
        those open without a signature. What observes can change while serving: ask again."""
        if self.records.observed():
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
            request.query = self.verifier.verify(request, time.time())
        route, request.params = self.match(request.method, request.path)
        return route

    def _finish(self, request: Request, response: Response, started: float) -> Response:
        if request.method == "HEAD":
            response.without_body()
        ended = time.perf_counter()
        records = self.records
        if records.wanted:
            records.add(request, response, ended - started, ended)
        access = records.logger
        if access is not None and access.isEnabledFor(INFO):  # a handler of your own on "axon.access"
            log.log_response(access, request, response, ended - started)
            response.repeatable = False
        return response

    def remembers(self) -> bool:
        """Whether a server may send a repeatable response again past the App now (and then
        record it through :meth:`record_sent`): not while a handler of your own on ``axon.access``
        is told of each Request and Response."""
        return not self.records.logged()

    def record_sent(
        self, path: str, query: str, nbytes: int, files: int, seconds: float, ended: float, client: str | None,
    ) -> None:
        """Count, and record for the metrics and the access log, a 200 to a GET that a server sent
        past the App (a remembered head): the one call it makes for one, as :meth:`handle` would."""
        records = self.records
        next(records.begun)
        if records.wanted:
            records.add_sent("GET", path, query, 200, nbytes, files, seconds, ended, client)

    # -- responses users build from files --------------------------------------------------

    def send_file(self, request: Request, path: str) -> Response:
        """One file under the root, with ETag, Last-Modified, Range (206/416) and 304/412."""
        return self._cacheable(plan_file(self.store, path, request.method, request.headers, self.limits))

    def send_batch(
        self, request: Request, paths: list[str], fmt: str = "multipart", slices: list[Slice | None] | None = None,
    ) -> Response:
        """Files under the root as one body, a resource with its own ETag, preconditions
        (304/412) and Range; any bad path is one JSON 4xx. ``fmt`` is ``"multipart"``
        (``multipart/mixed``), ``"zip"`` or ``"tar"``. ``slices`` (one per path, None for the
        whole file; multipart only) serves byte ranges of files, each part with its
        ``Content-Range``."""
        store = self.store if self._for_batch is None else self._for_batch(paths)
        response = plan_batch(
            store, paths, self.limits, key=self.batch_key, headers=request.headers, method=request.method,
            fmt=FORMATS[fmt], slices=slices, on_loop=request.on_loop,
        )
        return self._cacheable(response)

    def _cacheable(self, response: Response) -> Response:
        if self._body_stream is not None and response.body:
            # Object slices are fetched as they are sent: the source's stream, length declared.
            stream = self._body_stream(response.body, self.limits.chunk_size)
            if stream is not None:
                response.stream, response.body = stream, []
        if self.cache_control:
            response.headers.append(("Cache-Control", self.cache_control))
        return response

    # -- built-in endpoints --------------------------------------------------------------------

    def _health(self, request: Request) -> Response:
        return Response(200, [("Content-Type", "application/json"), NO_STORE], [_HEALTH])

    def _limits(self, request: Request) -> Response:
        """What a client needs to size its batches: it sends at most ``max_files`` items in a JSON
        body of at most ``max_body_bytes``, and so needs no 413 to learn them."""
        limits = self.limits
        body = {
            "max_files": limits.max_files, "max_batch_bytes": limits.max_batch_bytes,
            "max_body_bytes": limits.max_body_bytes, "max_url_bytes": limits.max_url_bytes,
            "max_ranges": limits.max_ranges, "formats": list(_BATCH_TYPES),
            "browse": "/browse/" if self.browse else None, "version": __version__,
        }
        return _validated(request, json_response(body, headers=[("Cache-Control", "no-cache")]))

    def _server_options(self, request: Request) -> Response:
        methods = {m for table in self._exact.values() for m in table}
        methods.update(m for _, table in self._patterns for m in table)
        if "GET" in methods:
            methods.add("HEAD")
        return Response(200, [("Allow", ", ".join(sorted(methods)))], [])

    def _stream_files(self, request: Request) -> Response:
        # One URL, three representations: every answer (errors and 304 too) says it varies.
        try:
            accept = request.headers.get("accept")
            fmt = "multipart" if accept is None else _negotiated_format(accept)
            response = self._send_items(request, fmt)
        except HTTPError as exc:
            exc.headers.append(_VARY)
            raise
        response.headers.append(_VARY)
        return response

    def _stream_zip(self, request: Request) -> Response:
        return self._send_items(request, "zip")

    def _stream_tar(self, request: Request) -> Response:
        return self._send_items(request, "tar")

    def _send_items(self, request: Request, fmt: str) -> Response:
        if request.method == "POST" and _is_form(request.headers):
            return self._send_form(request, fmt)
        paths, slices = self._batch_items(request)
        return self.send_batch(request, paths, fmt, slices)

    def _send_form(self, request: Request, fmt: str) -> Response:
        """What an HTML form posts (the browse page: ``f=<path>`` fields; every value is a path,
        as in a query): the batch, saved under its directory's name; a refusal is a page when a
        browser asks (``Accept`` prefers HTML), else the usual JSON."""
        paths: list[str] = []
        try:
            self.limits.check_body(len(request.body))
            # As a query is read: bytes recovered from latin-1, decoded once as UTF-8.
            paths = [value for _, value in _parse_query(request.body.decode("latin-1"))]
            if not paths:
                raise BadRequest("nothing is ticked: tick the files to download, then press a button", code="no_files")
            response = self.send_batch(request, paths, fmt)
        except HTTPError as exc:
            if not wants_page(request.headers.get("accept", "")):
                raise
            return error_page(exc, back_link(paths, request.headers.get("referer", "")) if self.browse else None)
        return form_download(response, paths, "." + fmt)

    def _batch_items(self, request: Request) -> tuple[list[str], list[Slice | None] | None]:
        """The paths a batch request names: every query value (names are free), or the JSON
        list of a POST, whose items may be slices of files (:mod:`axon.plan.slices`); and
        the slices, one per path (None when there are none)."""
        if request.method != "POST":
            return [value for _, value in request.query], None
        self.limits.check_body(len(request.body))  # runtimes refuse earlier; a Request built by hand may not
        data = request.json()
        items = data.get("files") if isinstance(data, dict) else None
        if not isinstance(items, list):
            raise BadRequest('POST a JSON object {"files": ["path", ...]}', code="bad_json")
        if all(isinstance(p, str) for p in items):
            return items, None
        check_count(items, self.limits)  # before looking at each of too many items
        return parse_items(items)

    def _browse(self, request: Request) -> Response:
        # Blocking (the default for a plain function): reading a directory is unbounded disk work.
        path = request.params.get("path", "").lstrip("/")
        return self._cacheable(_validated(request, plan_listing(self.store, path, request.headers, self.limits)))

    def _file(self, request: Request) -> Response:
        # "/files//a.txt" is "a.txt", as "sub//a.txt" is "sub/a.txt" (and as nginx merges
        # slashes): the path is always taken below the root.
        return self.send_file(request, request.params["path"].lstrip("/"))


@lru_cache(maxsize=256)  # a client sends the same Accept on every request: negotiate it once
def _negotiated_format(accept: str) -> str:
    chosen = negotiate(accept, _BATCH_TYPES)
    if chosen is None:
        raise NotAcceptable(
            "a batch is served as " + ", ".join(_BATCH_TYPES) + "; or ask /api/stream-files.zip or /api/stream-files.tar"
        )
    return MEDIA_TYPES[chosen]


def _is_form(headers: dict[str, str]) -> bool:
    return headers.get("content-type", "").partition(";")[0].strip().lower() == "application/x-www-form-urlencoded"


#: What a 304 repeats of the 200 it stands for (RFC 9110 15.4.5).
_KEPT_BY_304 = frozenset({"Cache-Control", "Content-Location", "Expires", "Vary"})


def _validated(request: Request, response: Response) -> Response:
    """A 200 built whole in memory (a listing, the limits) with a strong ETag of its bytes, or
    the 304 (or 412) its request's preconditions earn: a cache that revalidates pays no body."""
    if response.status != 200 or response.stream is not None:
        return response
    etag = body_etag(b"".join(response.body))  # type: ignore[arg-type] # bytes segments only
    verdict = evaluate(request.method, request.headers, etag, None) if request.headers else None
    if verdict == 412:
        raise PreconditionFailed("the resource does not match the request's preconditions")
    if verdict == 304:
        return Response(304, [("ETag", etag), *[(k, v) for k, v in response.headers if k in _KEPT_BY_304]])
    response.headers.append(("ETag", etag))
    return response


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
