"""What the server needs of the App it serves: :class:`ServedApp`, declared once.

:class:`axon.App` is one; so is anything else that has these members. The server uses nothing
of an App beyond them, and nothing private: a change of the App that keeps them keeps the server
working, and a change here is a change of what the server asks. The server changes nothing of
the App: it is built for the server (its open files shared, ``App(store=...)``) before serving.
"""

from __future__ import annotations

from collections.abc import Coroutine, Mapping
from concurrent.futures import Executor
from typing import TYPE_CHECKING, Any, Protocol, Union

if TYPE_CHECKING:
    from ..app import Request
    from ..limits import Limits
    from ..response import Response
    from ..storage import Source
    from ..storage.sources import SharingSource


class ServedApp(Protocol):
    #: Request limits and timeouts: the parser's bounds, the connections' clocks.
    limits: Limits
    #: Where files come from: a remembered head's files are opened through it again.
    store: Source
    #: ``store``'s open files, when requests share them; the server takes in their news before
    #: each request, prunes them each sweep, and sends a remembered head from the bytes they hold.
    shared_files: SharingSource | None
    #: Changes whenever a route is added: the server forgets the heads it remembered.
    routes_version: int

    @property
    def executor(self) -> Executor:
        """The thread pool where blocking work runs (a stream's plain generator is stepped here)."""
        ...

    def handle_on_loop(self, request: Request) -> Union[Response, Coroutine[Any, Any, Response]]:
        """Called on the event loop's thread: the response, made here, when the route's handler
        never blocks (or there is no route: the answer is an error); else a coroutine that makes
        it, which the server runs in a task (an async handler, a blocking one in the pool, a
        plain one whose work would have blocked after all)."""
        ...

    def remembers(self) -> bool:
        """Whether the server may send a repeatable response's head again past the App now."""
        ...

    def records_responses(self) -> bool:
        """Whether responses are recorded now: the server then asks each new connection for the
        client's address, for the records (``Request.client``, ``record_sent``'s ``peer``)."""
        ...

    def record_sent(
        self, path: str, query: str, nbytes: int, files: int, started: float, headers: Mapping[str, str],
        peer: str | None,
    ) -> None:
        """Count and record a response the server sent past the App (a remembered head), begun
        at ``started`` (``time.perf_counter()``), to a request with ``headers`` from ``peer``."""
        ...

    def fixed_answers(self) -> Mapping[str, Response]:
        """GET responses, by path, that the server may send as they are without calling the App,
        for now (nothing observes requests, no signature is needed). Asked again now and then."""
        ...

    def close(self) -> None:
        """The server stopped serving: hand over what was recorded, stop the thread pool, close
        the shared open files."""
        ...
