"""What the server needs of the App it serves: :class:`ServedApp`, declared once.

:class:`axon.App` is one; so is anything else that has these members. The server uses nothing
of an App beyond them, and nothing private: a change of the App that keeps them keeps the server
working, and a change here is a change of what the server asks.
"""

from __future__ import annotations

from collections.abc import Mapping
from concurrent.futures import Executor
from typing import TYPE_CHECKING, Protocol

if TYPE_CHECKING:
    from ..app import Request
    from ..storage import Source
    from ..limits import Limits
    from ..response import Response


class RouteKind(Protocol):
    """How a route's handler runs, which decides where the server calls it."""

    #: A coroutine function: run in a task, as asyncio code expects.
    is_async: bool
    #: A plain function that may block: run in :attr:`ServedApp.executor`.
    blocking: bool


class ServedApp(Protocol):
    #: Request limits and timeouts: the parser's bounds, the connections' clocks.
    limits: Limits
    #: Where files come from. The server reads files only by offset, so while it serves, it puts
    #: a source that lets requests share open files around this one in its place
    #: (:func:`axon.storage.sources.share_open_files`), prunes it, and puts the App's back.
    store: Source
    #: Changes whenever a route is added: the server forgets the heads it remembered.
    routes_version: int

    @property
    def executor(self) -> Executor:
        """The thread pool where blocking work runs (a stream's plain generator is stepped here)."""
        ...

    def match(self, method: str, path: str) -> tuple[RouteKind, dict[str, str]]:
        """The route that answers ``method path``; raises an ``HTTPError`` when none does."""
        ...

    def handle(self, request: Request) -> Response:
        """Answer ``request`` here, synchronously (the server calls it when the route's handler
        is neither async nor blocking, or when there is no route: the answer is an error). The
        server sets ``request.on_loop``: a handler whose work would block after all (a zip of
        files whose CRC-32s are not known) is then finished in the pool, and the answer is a
        coroutine to await for the response."""
        ...

    async def handle_async(self, request: Request) -> Response:
        """Answer ``request``; an async handler is awaited, a blocking one runs in the pool."""
        ...

    def remembers(self) -> bool:
        """Whether the server may send a repeatable response's head again past the App now."""
        ...

    def records_responses(self) -> bool:
        """Whether responses are recorded now: the server then asks each new connection for the
        client's address, for the records (``Request.client``, ``record_sent``'s ``client``)."""
        ...

    def record_sent(
        self, path: str, query: str, nbytes: int, files: int, seconds: float, ended: float, client: str | None,
    ) -> None:
        """Count and record a response the server sent past the App (a remembered head)."""
        ...

    def fixed_answers(self) -> Mapping[str, Response]:
        """GET responses, by path, that the server may send as they are without calling the App,
        for now (nothing observes requests, no signature is needed). Asked again now and then."""
        ...

    def close(self) -> None:
        """The server stopped serving: hand over what was recorded, stop the thread pool."""
        ...
