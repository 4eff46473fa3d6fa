"""The servers one ``axon://`` filesystem reads from: how a request to each is addressed and
authenticated, what each takes in a batch (its ``/api/limits``, asked once), and the ranged
``GET /files/`` that reads one slice. :mod:`.transfer`, :mod:`.file` and the filesystem are
handed this object; none of them reaches into another's private state.
"""

from __future__ import annotations

import asyncio
import errno
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import AsyncExitStack, asynccontextmanager
from dataclasses import dataclass
from urllib.parse import quote

import aiohttp
import yarl

from ..http.multipart_parser import parse_content_range
from ..limits import DEFAULT_LIMITS
from ..signing import mint_token
from ..batchclient.parts import check_slice, item_path
from ..batchclient.refusal import MAX_ERROR_BODY, error_object
from .errors import error_body, error_for, not_axon, reaching, status_error
from .slices import Slice

__all__ = ["ServerLimits", "Servers"]

TOKEN_LIFETIME = 3600  # seconds a bearer token minted from the secret is valid
TOKEN_MARGIN = 300  # mint a new one when less than this is left, so none expires in flight


@dataclass(frozen=True)
class ServerLimits:
    """What one server takes in a batch. ``slices``: it takes ``{"path", "offset", ...}`` items
    (it is a server with ``/api/limits``). ``browse``: whether it lists directories, None when
    it does not say (a server from before ``/api/limits`` said so)."""

    max_files: int
    max_body_bytes: int
    slices: bool
    browse: bool | None = None


class Servers:
    """``session`` gives the filesystem's aiohttp session (made on first use, by the filesystem,
    which closes it)."""

    def __init__(
        self,
        scheme: str,
        secret: str | bytes | None,
        token: str | None,
        session: Callable[[], Awaitable[aiohttp.ClientSession]],
    ) -> None:
        self.scheme = scheme
        self.secret = secret
        self.token = token
        self.session = session
        self._limits: dict[str, ServerLimits] = {}
        self._asking: dict[str, asyncio.Future] = {}  # a server's limits being asked now
        self._minted: tuple[str, float] | None = None

    def base_url(self, netloc: str) -> str:
        return f"{self.scheme}://{netloc}"

    def url(self, netloc: str, target: str) -> yarl.URL:
        # Encoded here, once: yarl must not re-encode (or decode) what quote() wrote.
        return yarl.URL(f"{self.scheme}://{netloc}{target}", encoded=True)

    @staticmethod
    def file_target(rel: str) -> str:
        return "/files/" + quote(rel, safe="/")

    @asynccontextmanager
    async def request(self, method: str, netloc: str, target: str, **kwargs) -> AsyncIterator[aiohttp.ClientResponse]:
        """``method`` on ``target`` of the server at ``netloc``, on the session, released on
        leaving; a server that cannot be reached is :class:`~.errors.ServerDown`, naming it."""
        session = await self.session()
        async with AsyncExitStack() as stack:
            with reaching(self.base_url(netloc)):  # opening it only: the caller's block may reach another server
                response = await stack.enter_async_context(session.request(method, self.url(netloc, target), **kwargs))
            yield response

    def headers(self, **extra: str) -> dict[str, str]:
        headers = {"Accept-Encoding": "identity", **extra}
        token = self._bearer()
        if token is not None:
            headers["Authorization"] = f"Bearer {token}"
        return headers

    def _bearer(self) -> str | None:
        if self.secret is None:
            return self.token
        now = time.time()
        if self._minted is None or self._minted[1] - now < TOKEN_MARGIN:
            expires = int(now) + TOKEN_LIFETIME
            self._minted = (mint_token(self.secret, expires), expires)
        return self._minted[0]

    async def limits(self, netloc: str) -> ServerLimits:
        """What ``netloc`` takes, asked once: reads that start together (reading ahead) wait
        for the one request in flight."""
        known = self._limits.get(netloc)
        if known is not None:
            return known
        asking = self._asking.get(netloc)
        if asking is None:
            asking = self._asking[netloc] = asyncio.ensure_future(self._ask_limits(netloc))
            asking.add_done_callback(lambda _: self._asking.pop(netloc, None))
        return await asyncio.shield(asking)

    def known_limits(self) -> dict[str, ServerLimits]:
        """The limits asked so far, by ``host:port``."""
        return dict(self._limits)

    def learn_limits(self, known: dict[str, ServerLimits]) -> None:
        """Take limits another process asked (a ``DataLoader`` worker's from its parent's): a
        server's limits do not depend on who asks, and each process asking costs a round trip."""
        self._limits.update(known)

    def forget_asking(self) -> None:
        """Drop the asks in flight (a forked child: they belong to its parent's loop)."""
        self._asking.clear()

    async def _ask_limits(self, netloc: str) -> ServerLimits:
        url = self.url(netloc, "/api/limits")
        async with self.request("GET", netloc, "/api/limits", headers=self.headers()) as response:
            if response.status == 404:
                # An Axon server from before /api/limits (and slices) says so in its JSON; any
                # other 404 (an HTML page) is another kind of server.
                if error_object(await response.content.read(MAX_ERROR_BODY)) is None:
                    raise not_axon(str(url), response)
                known = ServerLimits(DEFAULT_LIMITS.max_files, DEFAULT_LIMITS.max_body_bytes, slices=False)
            elif response.status == 200:
                try:
                    data = await response.json(content_type=None)
                    browse = data["browse"] is not None if "browse" in data else None
                    known = ServerLimits(int(data["max_files"]), int(data["max_body_bytes"]), slices=True,
                                         browse=browse)
                except (ValueError, KeyError, TypeError):
                    raise not_axon(str(url), response) from None
            else:
                raise await status_error(response, f"{netloc}/api/limits")
        self._limits[netloc] = known
        return known

    async def refusal(self, netloc: str, response: aiohttp.ClientResponse, path: str) -> Exception:
        """The exception for a request to ``netloc`` it refused. An answer that is not Axon's
        JSON error has the server's ``/api/limits`` asked first (once): another kind of server
        is :class:`~.errors.NotAxonServer`, never a missing file with its page as the reason."""
        error = await error_body(response)
        if "code" not in error:  # Axon's errors name their code
            await self.limits(netloc)
        return error_for(response.status, str(error.get("message") or response.reason or ""), path)

    async def read_range(self, netloc: str, rel: str, start: int, end: int, etag: str | None) -> bytes:
        """``file[start:end]`` for an open file, refused if the file is no longer ``etag``."""
        if end <= start:
            return b""
        extra = {} if etag is None else {"If-Match": etag}
        data, _ = await self.ranged_get(netloc, Slice({"path": rel, "offset": start, "length": end - start}), extra)
        return data

    async def ranged_get(self, netloc: str, chosen: Slice, extra: dict[str, str] | None = None) -> tuple[bytes, int]:
        """The bytes a GET on ``/files/`` answers for one slice, checked; and the first one's offset."""
        item = chosen.item
        headers = self.headers(**(extra or {}))
        if isinstance(item, dict):
            offset, length = item["offset"], item.get("length")
            last = "" if offset < 0 or length is None else str(offset + length - 1)
            headers["Range"] = f"bytes={offset}-{last}" if offset >= 0 else f"bytes={offset}"
        rel = item_path(item)
        async with self.request("GET", netloc, self.file_target(rel), headers=headers) as response:
            if response.status == 416:  # a range past the end holds nothing, as a Python slice
                return b"", 0
            if response.status == 412:
                raise OSError(errno.ESTALE, "the file changed while it was read", f"{netloc}/{rel}")
            if response.status not in (200, 206):
                raise await self.refusal(netloc, response, f"{netloc}/{rel}")
            data = await response.read()
            value = response.headers.get("Content-Range") if response.status == 206 else None
        try:
            content_range = None if value is None else parse_content_range(value)
        except ValueError as exc:
            raise OSError(f"{netloc}/{rel}: {exc}") from None
        why = check_slice(item, content_range)
        if why is not None:
            raise OSError(f"{netloc}/{rel}: {why}")
        return data, 0 if content_range is None else content_range.first
