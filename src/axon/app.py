"""The App: the composition root, and the one way a request is answered.

An App is built from :class:`~axon.settings.Settings`; it opens its source
(:func:`axon.storage.sources.open_source`), routes (:mod:`axon.routing`, its base class), adds
Axon's built-in endpoints (:mod:`axon.endpoints`), and runs each request's handler, recording
what it answered (:mod:`axon.records`). ``Request`` is :mod:`axon.request`'s, re-exported here.

One App runs unchanged as a WSGI app, an ASGI app and on Axon's own server; each runtime builds
a :class:`Request`, calls :meth:`App.handle` (WSGI), :meth:`App.handle_async` (ASGI) or
:meth:`App.handle_on_loop` (Axon's server) and sends the :class:`~axon.response.Response` it gets
back. An App that ``axon serve`` builds or imports is built inside :func:`built_for_offset_reads`:
its store's open files are then shared between requests (:mod:`axon.storage.shared_files`), as a
server that reads files only by offset may, and the App is that server's alone. Users add their own endpoints with
:meth:`App.route`, as the original allowed:

    app = App("/srv/files")            # or App("s3://bucket/prefix"): axon.storage.objects

    @app.route("/api/echo", methods=["POST"])
    def echo(request):
        return request.json()          # dict or list -> JSON, str -> text, or any Response
"""

from __future__ import annotations

import asyncio
import os
import time
from collections.abc import Callable, Coroutine, Iterator, Mapping
from contextlib import contextmanager
from contextvars import ContextVar
from concurrent.futures import ThreadPoolExecutor
from dataclasses import replace
from logging import INFO
from typing import Any, Union

from . import log
from .endpoints import BuiltinEndpoints
from .errors import HTTPError, URITooLong, WouldBlock
from .limits import Limits
from .log import logger
from .pace import pace_of
from .plan.batch import plan_batch
from .plan.formats import FORMATS
from .plan.single_file import plan_file
from .plan.slices import Slice
from .records import Records, client_of
from .request import Request
from .response import Response, error_response, json_response, redirect, stream_response, text_response
from .routing import Route, Router
from .settings import Settings
from .signing import Verifier
from .storage import Source
from .storage.local import FileStore
from .storage.sources import SharingSource, open_source
from .storage.shared_files import SharedFiles

#: What :meth:`App.handle_on_loop` gives: the response, or a coroutine that makes it.
OnLoop = Union[Response, Coroutine[Any, Any, Response]]

#: How an App built now shares its store's open files, inside :func:`built_for_offset_reads`; None
#: elsewhere (WSGI and ASGI hand descriptors to code that may move their file position).
_SHARE: ContextVar[Callable[[Source], Source] | None] = ContextVar("axon_share_open_files", default=None)


@contextmanager
def built_for_offset_reads(share: Callable[[Source], Source]) -> Iterator[None]:
    """Apps built inside the block (``App()`` in a module ``axon serve --app`` imports, or its
    own) are built for a server that reads files only by offset: their store is ``share(store)``,
    the store with its open files shared between requests
    (:meth:`axon.server.config.ServerConfig.serving_store`)."""
    token = _SHARE.set(share)
    try:
        yield
    finally:
        _SHARE.reset(token)


__all__ = [
    "App", "Request", "Response", "Settings", "json_response", "text_response", "stream_response", "redirect",
]


class App(Router):
    """Routes requests to handlers (:class:`~axon.routing.Router`); owns the source of files
    (the root jail, or an object store's prefix), the Limits, and the records of its responses.

    Built from :class:`~axon.settings.Settings` (default: ``Settings.from_env()``, the
    environment read once); each keyword argument is a field of it, and wins over it. ``store``
    serves files from a source of your own instead of opening ``root``; built inside
    :func:`built_for_offset_reads`, the App serves either with its open files shared."""

    def __init__(
        self,
        root: str | os.PathLike[str] | None = None,
        *,
        settings: Settings | None = None,
        store: Source | None = None,
        limits: Limits | None = None,
        allow_hidden: bool | None = None,
        builtins: bool | None = None,
        threads: int | None = None,
        secret: str | bytes | None = None,
        cache_control: str | None = None,
        browse: bool | None = None,
        portable_identity: bool | None = None,
        identity_secret: str | bytes | None = None,
    ) -> None:
        given = {
            name: value for name, value in (
                ("root", root), ("limits", limits), ("allow_hidden", allow_hidden), ("builtins", builtins),
                ("threads", threads), ("secret", secret), ("cache_control", cache_control), ("browse", browse),
                ("portable_identity", portable_identity), ("identity_secret", identity_secret),
            ) if value is not None
        }
        settings = Settings.from_env() if settings is None else settings
        if given:
            settings = replace(settings, **given)
        self.settings = settings
        super().__init__()
        if store is None:
            store = open_source(settings.root, allow_hidden=settings.allow_hidden,
                                portable_identity=settings.portable_identity)
        share = _SHARE.get()
        if share is not None:
            store = share(store)
        self.store = store
        #: The store's open files when requests share them (built for Axon's own server), which
        #: the server keeps: takes in the kernel's news before each request, prunes, closes; else None.
        self.shared_files: SharingSource | None = store if isinstance(store, SharedFiles) else None
        # Read once: a source whose bodies are streams of its own (an object store), or that
        # opens a batch's paths together, says so with these; a local one leaves them None.
        self._body_stream = store.body_stream
        self._for_batch = store.for_batch
        self.limits = settings.limits
        self.threads = settings.threads
        # A secret turns signed requests on (axon.signing) and keys batch identities.
        self.verifier = Verifier(settings.secret) if settings.secret else None
        # Open even when signing is on: load balancers probe the health; a client sizes its
        # batches by the limits before it sends one; "*" only lists methods.
        self.public_paths = {"/api/health", "/api/limits", "*"}
        self.cache_control = settings.cache_control
        if settings.portable_identity and isinstance(store, FileStore) and not store.portable_identity:
            raise ValueError("portable_identity needs a store built with FileStore(..., portable_identity=True)")
        if settings.portable_identity and not settings.key_secret:
            raise ValueError(
                "portable identities need a key every node shares: set AXON_IDENTITY_SECRET "
                "(or AXON_SECRET, which also turns signing on)"
            )
        self.batch_key = store.batch_key(settings.key_secret)
        self._executor: ThreadPoolExecutor | None = None
        #: What each response leaves for those who observe them: a tuple for the readers
        #: attached (axon.metrics, the access log), made only while there is one; the
        #: ``axon.access`` logger for a handler of your own (axon.records, axon.log.connect).
        self.records = Records()
        log.connect(self.records)
        self.browse = settings.builtins and settings.browse
        if settings.builtins:
            BuiltinEndpoints(self).add_to(self, remote=store.blocking)

    # -- handling ------------------------------------------------------------------------------

    def handle(self, request: Request) -> Response:
        """For synchronous runtimes (WSGI): run the handler here, in the caller's thread."""
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
        except Exception as exc:  # noqa: BLE001 - every failure becomes a JSON response
            response = _failure(exc, request)  # WouldBlock too: raised where it may block, a handler's bug
        return self._finish(request, response, started)

    def handle_on_loop(self, request: Request) -> OnLoop:
        """For a server on an event loop (Axon's own), called on the loop's thread: the response,
        made here, when the route's handler is a plain function that never blocks (Axon's own
        endpoints), or when there is none (the answer is an error); else a coroutine to run in a
        task for it: an async handler (as asyncio code expects: ``asyncio.timeout`` needs
        ``current_task()``), a blocking one (in the thread pool), or a plain one that found its
        work would block after all (a cold zip: finished in the pool). The one place that decides
        what runs inline."""
        started = time.perf_counter()
        next(self.records.begun)
        try:
            route = self._prepare(request)
            if route.is_async or route.blocking:
                return self._handle_later(request, route, started)
            request.on_loop = True  # work that would block raises WouldBlock instead
            response = _to_response(route.handler(request))
            if route.repeatable and self.verifier is None:  # as in handle
                response.repeatable = True
        except WouldBlock as exc:
            return self._elsewhere(request, route, started, exc)
        except Exception as exc:  # noqa: BLE001 - every failure becomes a JSON response
            response = _failure(exc, request)
        return self._finish(request, response, started)

    async def handle_async(self, request: Request) -> Response:
        """For asynchronous runtimes (ASGI): blocking handlers go to a thread pool."""
        started = time.perf_counter()
        next(self.records.begun)
        try:
            route = self._prepare(request)
        except Exception as exc:  # noqa: BLE001 - every failure becomes a JSON response
            return self._finish(request, _failure(exc, request), started)
        return await self._handle_later(request, route, started)

    async def _handle_later(self, request: Request, route: Route, started: float) -> Response:
        """The rest of :meth:`handle_async`, once routed."""
        try:
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
                return await self._elsewhere(request, route, started, exc)
        except Exception as exc:  # noqa: BLE001 - every failure becomes a JSON response
            response = _failure(exc, request)
        return self._finish(request, response, started)

    def _elsewhere(self, request: Request, route: Route, started: float, exc: WouldBlock) -> Coroutine[Any, Any, Response]:
        """The rest of a request whose handler, called on the loop, would have blocked (in the
        thread pool) or worked long (its ``steps``, between the loop's other work)."""
        _close_made(request)
        if exc.steps is not None:
            return self._in_steps(request, route, started, exc.steps, exc.of)
        return self._in_pool(request, route, started)

    async def _in_steps(self, request: Request, route: Route, started: float, steps: Any, of: Any) -> Response:
        """Step a long plan a slice at a time, each when the loop's turn has budget for it
        (axon.pace), then run the handler again with its outcome (``Request.planned``)."""
        pace = pace_of(asyncio.get_running_loop())
        try:
            while True:
                if pace.must_wait():
                    await pace.wait()
                next(steps)
        except StopIteration as done:
            request.planned = (of, done.value, None)
        except Exception as exc:  # noqa: BLE001 - raised again where the handler asks for the plan
            request.planned = (of, None, exc)
        finally:
            steps.close()  # cancelled midway: the files opened so far are closed
        try:
            response = _to_response(route.handler(request))
        except WouldBlock:
            # Another long plan (or a cold read) in the same handler: stepping again would run
            # the handler again without end (one plan is kept per request), so it runs once
            # more in the pool, where it plans everything at once.
            _close_made(request)
            _drop_unused(request)
            return await self._in_pool(request, route, started)
        except Exception as exc:  # noqa: BLE001 - every failure becomes a JSON response
            response = _failure(exc, request)
        finally:
            _drop_unused(request)
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
        """Hand over what the records still hold (the last access-log lines and counts), stop
        the thread pool, if one was started (a later request starts a new one), and close the
        open files requests shared: a runtime calls this when it stops serving."""
        self.records.flush()
        executor, self._executor = self._executor, None
        if executor is not None:
            executor.shutdown(wait=False, cancel_futures=True)
        if self.shared_files is not None:
            self.shared_files.close()

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

    def records_responses(self) -> bool:
        """Whether responses are recorded now (for the metrics, the access log): only then is a
        client's address worth a server's asking (:attr:`Request.client`)."""
        return self.records.wanted

    def remembers(self) -> bool:
        """Whether a server may send a repeatable response again past the App now (and then
        record it through :meth:`record_sent`): not while a handler of your own on ``axon.access``
        is told of each Request and Response."""
        return not self.records.logged()

    def record_sent(
        self, path: str, query: str, nbytes: int, files: int, started: float, headers: Mapping[str, str],
        peer: str | None,
    ) -> None:
        """Count, and record for the metrics and the access log, a 200 to a GET that a server sent
        past the App (a remembered head): the one call it makes for one, as :meth:`handle` would.
        ``started``: ``time.perf_counter()`` when the server began it; ``headers`` and ``peer``,
        the request's and its client's address (read only while the records are wanted)."""
        records = self.records
        next(records.begun)
        if records.wanted:
            ended = time.perf_counter()
            records.add_sent("GET", path, query, 200, nbytes, files, ended - started, ended, client_of(headers, peer))

    # -- responses users build from files --------------------------------------------------

    def send_file(self, request: Request, path: str) -> Response:
        """One file under the root, with ETag, Last-Modified, Range (206/416) and 304/412."""
        return _made(request, self.cacheable(plan_file(self.store, path, request.method, request.headers, self.limits)))

    def send_batch(
        self, request: Request, paths: list[str], fmt: str = "multipart", slices: list[Slice | None] | None = None,
    ) -> Response:
        """Files under the root as one body, a resource with its own ETag, preconditions
        (304/412) and Range; any bad path is one JSON 4xx. ``fmt`` is ``"multipart"``
        (``multipart/mixed``), ``"zip"`` or ``"tar"``. ``slices`` (one per path, None for the
        whole file; multipart only) serves byte ranges of files, each part with its
        ``Content-Range``."""
        asked = (paths, fmt, slices)
        planned = request.planned
        if planned is not None and planned[0] == asked:  # planned in steps (WouldBlock's), for this call
            request.planned = None
            if planned[2] is not None:
                raise planned[2]
            return _made(request, self.cacheable(planned[1]))
        store = self.store if self._for_batch is None else self._for_batch(paths)
        response = plan_batch(
            store, paths, self.limits, key=self.batch_key, headers=request.headers, method=request.method,
            fmt=FORMATS[fmt], slices=slices, on_loop=request.on_loop, asked=asked,
        )
        return _made(request, self.cacheable(response))

    def cacheable(self, response: Response) -> Response:
        """``response`` (planned from this App's files) with what every file response gets: the
        source's own stream for its body where it has one, and ``Cache-Control``."""
        if self._body_stream is not None and response.body:
            # Object slices are fetched as they are sent: the source's stream, length declared.
            stream = self._body_stream(response.body, self.limits.chunk_size)
            if stream is not None:
                response.stream, response.body = stream, []
        if self.cache_control:
            response.headers.append(("Cache-Control", self.cache_control))
        return response


def _made(request: Request, response: Response) -> Response:
    """``response``, noted as made by a handler on the loop, whose run WouldBlock may cut short."""
    if request.on_loop:
        if request.made is None:
            request.made = []
        request.made.append(response)
    return response


def _close_made(request: Request) -> None:
    """Close what the handler made from files in a run that WouldBlock cut short: it never returned
    them, so nothing else would (an open file has no finaliser)."""
    made, request.made = request.made, None
    for response in made or ():
        response.close()


def _drop_unused(request: Request) -> None:
    """Close a plan made in steps that the handler, run again, did not ask for."""
    planned, request.planned = request.planned, None
    if planned is not None and planned[1] is not None:
        planned[1].close()


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
