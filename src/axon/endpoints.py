"""Axon's built-in endpoints: the health probe, the limits, batches, single files, listings.

The App adds them (unless ``builtins=False``) through :meth:`BuiltinEndpoints.add_to`; each is a
bound method of one :class:`BuiltinEndpoints`, which keeps the App's bound methods it calls
(``send_file``, ``send_batch``): a request makes the calls it made when they were the App's.
"""

from __future__ import annotations

from functools import lru_cache
from typing import Protocol

from .errors import BadRequest, HTTPError, NotAcceptable, PreconditionFailed
from .http.accept import negotiate
from .http.conditional import body_etag, evaluate
from .limits import Limits
from .plan.batch import check_count
from .plan.formats import MEDIA_TYPES
from .plan.listing import back_link, error_page, form_download, plan_listing, wants_page
from .plan.slices import Slice, parse_items
from .request import Request, parse_query
from .response import NO_STORE, Response, json_response, redirect
from .routing import Router
from .storage import Source
from .version import __version__

_HEALTH = b'{"status":"available"}'
#: What ``/api/stream-files`` offers by ``Accept``, the default (no Accept, ``*/*``) first.
BATCH_TYPES = ("multipart/mixed", "application/zip", "application/x-tar")
_VARY = ("Vary", "Accept")
#: What a 304 repeats of the 200 it stands for (RFC 9110 15.4.5).
_KEPT_BY_304 = frozenset({"Cache-Control", "Content-Location", "Expires", "Vary"})


class EndpointHost(Protocol):
    """What the endpoints need of the App that serves them."""

    limits: Limits
    #: Read at each listing: a server may put a source of its own in the App's place.
    store: Source
    browse: bool

    def send_file(self, request: Request, path: str) -> Response: ...

    def send_batch(
        self, request: Request, paths: list[str], fmt: str = "multipart", slices: list[Slice | None] | None = None,
    ) -> Response: ...

    def cacheable(self, response: Response) -> Response: ...


class BuiltinEndpoints:
    """The endpoints of one App (its :class:`EndpointHost`)."""

    def __init__(self, app: EndpointHost) -> None:
        self.app = app
        self.limits = app.limits
        self.browse = app.browse
        self._send_file = app.send_file
        self._send_batch = app.send_batch
        self._cacheable = app.cacheable
        self._source_health = app.store.health

    def add_to(self, router: Router, remote: bool) -> None:
        """Route the endpoints on ``router``; ``remote``: opening a file waits on the network (an
        object store), so the async runtimes run the file endpoints in their thread pool."""
        if self._source_health is None:
            router.add_route("/api/health", self.health, ["GET"], blocking=False)
            router.fixed["/api/health"] = self.health(Request("GET", "/api/health"))
        else:  # a source that can fail as a whole: what it last saw, read at each probe
            router.add_route("/api/health", self.source_health, ["GET"], blocking=False)
        router.add_route("/api/limits", self.limits_of_batches, ["GET"], blocking=False)
        # A file or a batch is its target, its Accept and its files' versions, nothing else (no
        # clock: a signed request is never remembered, see App.handle): repeatable.
        router.add_route("/api/stream-files", self.stream_files, ["GET", "POST"], blocking=remote, repeatable=True)
        # The same batch as an archive, at a URL a link or an HTML form can name.
        router.add_route("/api/stream-files.zip", self.stream_zip, ["GET", "POST"], blocking=remote, repeatable=True)
        router.add_route("/api/stream-files.tar", self.stream_tar, ["GET", "POST"], blocking=remote, repeatable=True)
        router.add_route("/files/<path:path>", self.file, ["GET"], blocking=remote, repeatable=True)
        if self.browse:
            router.add_route("/browse", lambda request: redirect("/browse/", 308), ["GET"], blocking=False)
            router.add_route("/browse/", self.listing, ["GET"])
            router.add_route("/browse/<path:path>", self.listing, ["GET"])

    def health(self, request: Request) -> Response:
        return Response(200, [("Content-Type", "application/json"), NO_STORE], [_HEALTH])

    def source_health(self, request: Request) -> Response:
        """``health``, or a 503 naming what the source last failed at, for a load balancer to
        act on (an object store that stopped answering or refuses the server's credentials)."""
        failure = self._source_health()  # type: ignore[misc]
        if failure is None:
            return self.health(request)
        return json_response({"status": "unavailable", **failure.to_dict()}, 503, [NO_STORE, *failure.headers])

    def limits_of_batches(self, request: Request) -> Response:
        """What a client needs to size its batches: it sends at most ``max_files`` items in a JSON
        body of at most ``max_body_bytes``, and so needs no 413 to learn them."""
        limits = self.limits
        body = {
            "max_files": limits.max_files, "max_batch_bytes": limits.max_batch_bytes,
            "max_body_bytes": limits.max_body_bytes, "max_url_bytes": limits.max_url_bytes,
            "max_ranges": limits.max_ranges, "formats": list(BATCH_TYPES),
            "browse": "/browse/" if self.browse else None, "version": __version__,
        }
        return validated(request, json_response(body, headers=[("Cache-Control", "no-cache")]))

    def stream_files(self, request: Request) -> Response:
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

    def stream_zip(self, request: Request) -> Response:
        return self._send_items(request, "zip")

    def stream_tar(self, request: Request) -> Response:
        return self._send_items(request, "tar")

    def _send_items(self, request: Request, fmt: str) -> Response:
        if request.method == "POST" and _is_form(request.headers):
            return self._send_form(request, fmt)
        paths, slices = self._batch_items(request)
        return self._send_batch(request, paths, fmt, slices)

    def _send_form(self, request: Request, fmt: str) -> Response:
        """What an HTML form posts (the browse page: ``f=<path>`` fields; every value is a path,
        as in a query): the batch, saved under its directory's name; a refusal is a page when a
        browser asks (``Accept`` prefers HTML), else the usual JSON."""
        paths: list[str] = []
        try:
            self.limits.check_body(len(request.body))
            # As a query is read: bytes recovered from latin-1, decoded once as UTF-8.
            paths = [value for _, value in parse_query(request.body.decode("latin-1"))]
            if not paths:
                raise BadRequest("nothing is ticked: tick the files to download, then press a button", code="no_files")
            response = self._send_batch(request, paths, fmt)
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
            return request.query_values(), None
        self.limits.check_body(len(request.body))  # runtimes refuse earlier; a Request built by hand may not
        data = request.json()
        items = data.get("files") if isinstance(data, dict) else None
        if not isinstance(items, list):
            raise BadRequest('POST a JSON object {"files": ["path", ...]}', code="bad_json")
        if all(isinstance(p, str) for p in items):
            return items, None
        check_count(items, self.limits)  # before looking at each of too many items
        return parse_items(items)

    def listing(self, request: Request) -> Response:
        # Blocking (the default for a plain function): reading a directory is unbounded disk work.
        path = request.params.get("path", "").lstrip("/")
        return self._cacheable(validated(request, plan_listing(self.app.store, path, request.headers, self.limits)))

    def file(self, request: Request) -> Response:
        # "/files//a.txt" is "a.txt", as "sub//a.txt" is "sub/a.txt" (and as nginx merges
        # slashes): the path is always taken below the root.
        return self._send_file(request, request.params["path"].lstrip("/"))


@lru_cache(maxsize=256)  # a client sends the same Accept on every request: negotiate it once
def _negotiated_format(accept: str) -> str:
    chosen = negotiate(accept, BATCH_TYPES)
    if chosen is None:
        raise NotAcceptable(
            "a batch is served as " + ", ".join(BATCH_TYPES) + "; or ask /api/stream-files.zip or /api/stream-files.tar"
        )
    return MEDIA_TYPES[chosen]


def _is_form(headers: dict[str, str]) -> bool:
    return headers.get("content-type", "").partition(";")[0].strip().lower() == "application/x-www-form-urlencoded"


def validated(request: Request, response: Response) -> Response:
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
