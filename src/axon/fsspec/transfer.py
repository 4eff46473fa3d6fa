"""Many reads in one call: grouped by server, packed into batches, several in flight, refused
batches sent again, and each part handed to a sink (kept in memory for ``cat``, written to a
local file for ``get``).

A refused batch is sent again without what it names: the JSON ``details`` (or ``paths``, for a
single failure) say which paths; 404/403/400 become those paths' exceptions; a 416 gives the
file's size, with which the range is planned again (and often found empty without asking). A 413
halves the batch. A server without slices (one from before ``/api/limits``) gets each range as a
ranged GET.

A batch is built, sent and read by the clients' shared core (:mod:`axon.batchclient`: the request,
the aiohttp transport, the refusal's JSON, each part checked against its item); what this module
adds is fsspec's: many servers, batches in flight, refusals settled path by path. It is handed
what it needs (:class:`~.servers.Servers`, the concurrency, the batch size), never the filesystem.
"""

from __future__ import annotations

import asyncio
import os
from collections import defaultdict
from collections.abc import Callable, Coroutine, Iterable, Sequence
from dataclasses import dataclass
from typing import Any, NamedTuple

from ..batchclient.aio import AsyncRoundTrip
from ..batchclient.errors import FetchError
from ..batchclient.head import ResponseHead
from ..batchclient.parts import item_path
from ..batchclient.refusal import error_object, failures_by_path
from ..batchclient.request import build_post
from ..http.multipart_parser import MultipartError
from .batches import PartSink, pack, read_parts
from .errors import error_for
from .servers import Servers
from .slices import EMPTY, Slice, plan

__all__ = ["Collect", "FileSink", "SinkFactory", "Transfer", "Want", "raise_first"]

_TOO_LARGE = 413
#: A long list is spread over the batches in flight, but no batch is cut below this many items:
#: a batch of a few hundred small files is one request, whatever the concurrency.
SPREAD_FLOOR = 256


class Want(NamedTuple):
    """``path[start:end]`` (Python's slice semantics) on the server at ``netloc``. A tuple: a
    ``cat`` makes one per file, and a frozen dataclass takes three times as long to make."""

    netloc: str
    path: str  # relative to the server's root
    start: int | None = None
    end: int | None = None


@dataclass(frozen=True)
class Refusal:
    """A batch the server refused: the whole batch's error, and the paths it names one by one."""

    status: int
    code: str
    message: str
    per_path: dict[str, dict]  # path -> {"status", "code", "message", "size"?}


#: ``sink(index, slice, first)``: where the part answering want ``index`` goes.
SinkFactory = Callable[[int, Slice, int], PartSink]


class Transfer:
    """One call's reads. ``run()`` returns each want's exception, or None once its sink finished
    (or ``empty(index)`` was called: a range that holds no bytes whatever the file).

    A server's wants go in batches as large as its limits and ``files_per_batch`` allow; with
    ``spread``, a list of more than :data:`SPREAD_FLOOR` items is also cut into as many as
    ``concurrency`` batches (none below the floor), which travel side by side on as many
    connections: large files do not queue on one. The sizes are not known before the answers,
    so the list is spread by count. Without ``spread`` (a reader whose batch must stay one
    request), only the limits cut a list.
    """

    def __init__(
        self,
        servers: Servers,
        wants: list[Want],
        sink: SinkFactory,
        empty: Callable[[int], None],
        *,
        concurrency: int,
        files_per_batch: int | None = None,
        spread: bool = True,
    ) -> None:
        self.servers, self.wants, self.sink, self.empty = servers, wants, sink, empty
        self.files_per_batch = files_per_batch
        self.concurrency, self.spread = concurrency, spread
        self.errors: list[BaseException | None] = [None] * len(wants)
        self.slots = asyncio.Semaphore(concurrency)

    async def run(self) -> list[BaseException | None]:
        by_server: dict[str, list[int]] = defaultdict(list)
        for index, want in enumerate(self.wants):
            by_server[want.netloc].append(index)
        await run_all(self._from_server(netloc, indices) for netloc, indices in by_server.items())
        return self.errors

    async def _from_server(self, netloc: str, indices: list[int]) -> None:
        server = await self.servers.limits(netloc)
        batched: list[tuple[int, Slice]] = []
        ranged: list[tuple[int, Slice]] = []
        for index in indices:
            want = self.wants[index]
            chosen = plan(want.path, want.start, want.end)
            if chosen is EMPTY:
                self.empty(index)
            elif isinstance(chosen.item, dict) and not server.slices:
                ranged.append((index, chosen))
            else:
                batched.append((index, chosen))
        per_batch = min(server.max_files, self.files_per_batch or server.max_files)
        if self.spread:  # a long list of large files goes over several connections, not one
            per_batch = min(per_batch, max(SPREAD_FLOOR, -(-len(batched) // self.concurrency)))
        groups = pack([chosen.item for _, chosen in batched], per_batch, server.max_body_bytes)
        await run_all([
            *(self._batch(netloc, [batched[k] for k in group]) for group in groups),
            *(self._ranged(netloc, index, chosen) for index, chosen in ranged),
        ])

    async def _ranged(self, netloc: str, index: int, chosen: Slice) -> None:
        """One range from a server that takes no slices in a batch: a ranged GET."""
        async with self.slots:
            try:
                data, first = await self.servers.ranged_get(netloc, chosen)
            except (OSError, ValueError) as exc:  # ValueError: a 400, a path the server cannot take
                self.errors[index] = exc
                return
        part = self.sink(index, chosen, first)
        part.write(data)
        part.finish()

    async def _batch(self, netloc: str, entries: list[tuple[int, Slice]]) -> None:
        """One batch, sent again (smaller, or without the paths refused) until it is served."""
        queue = [entries]
        sized: set[str] = set()  # paths whose size a 416 told: a second 416 for one is an error
        while queue:
            entries = queue.pop()
            async with self.slots:
                refusal = await self._post(netloc, entries)
            if refusal is None:
                continue
            if refusal.status == _TOO_LARGE and len(entries) > 1:
                half = len(entries) // 2
                queue += [entries[half:], entries[:half]]
                continue
            if refusal.per_path:
                entries = self._settle(netloc, entries, refusal, sized)
                sized.update(p for p, f in refusal.per_path.items() if f["status"] == 416)
            else:
                for index, _ in entries:
                    self.errors[index] = error_for(refusal.status, f"{refusal.code}: {refusal.message}", netloc)
                entries = []
            if entries:
                queue.append(entries)

    def _settle(self, netloc: str, entries: list[tuple[int, Slice]], refusal: Refusal,
                sized: set[str]) -> list[tuple[int, Slice]]:
        """The entries of a refused batch worth sending again: those it did not name; and the
        ranges a 416 named, planned again with the file sizes it gave. The others get their error."""
        kept = []
        for index, chosen in entries:
            path = item_path(chosen.item)
            failure = refusal.per_path.get(path)
            if failure is None:
                kept.append((index, chosen))
                continue
            size = failure.get("size")
            if failure["status"] != 416 or not isinstance(size, int) or path in sized:
                self.errors[index] = error_for(failure["status"], str(failure.get("message", "")), f"{netloc}/{path}")
                continue
            want = self.wants[index]
            again = plan(want.path, want.start, want.end, size)
            if again is EMPTY:
                self.empty(index)
            else:
                kept.append((index, again))
        return kept

    async def _post(self, netloc: str, entries: list[tuple[int, Slice]]) -> Refusal | None:
        items = [chosen.item for _, chosen in entries]
        request = build_post(self.servers.base_url(netloc), items, self.servers.headers())

        def open_sink(k: int, first: int) -> PartSink:
            index, chosen = entries[k]
            return self.sink(index, chosen, first)

        try:
            async with AsyncRoundTrip(await self.servers.session(), request) as trip:
                head = await trip.start()
                if head.status != 200:
                    return refusal_of(head, await trip.error_body())
                await read_parts(trip.chunks(), head.headers.get("Content-Type", ""), items, open_sink)
        except MultipartError as exc:
            raise OSError(f"the batch from {netloc} does not answer what was asked: {exc}") from exc
        except FetchError as exc:  # the network, or a body cut short: fsspec's callers expect an OSError
            raise OSError(f"the batch from {netloc} failed: {exc}") from exc
        return None


class Collect:
    """A part kept in memory, cut to the range asked (``cat``): the chunks' views are held and
    joined once when the part is whole, into one ``bytes`` of its exact size (a part in one
    piece is copied out too, so that it does not keep the rest of its chunk alive)."""

    __slots__ = ("chosen", "first", "index", "out", "pieces")

    def __init__(self, out: list, index: int, chosen: Slice, first: int) -> None:
        self.out, self.index, self.chosen, self.first = out, index, chosen, first
        self.pieces: list[memoryview] = []

    def write(self, data: memoryview) -> None:
        self.pieces.append(data)

    def finish(self) -> None:
        data = b"".join(self.pieces)
        self.pieces = []
        self.out[self.index] = self.chosen.cut(data, self.first)

    def abort(self) -> None:
        self.pieces = []


class FileSink:
    """A part written to a local file as it arrives (``get``); removed if the part is cut short."""

    def __init__(self, lpath: str, callback: Any) -> None:
        self.lpath, self.callback = lpath, callback
        self.file = open(lpath, "wb")

    def write(self, data: memoryview) -> None:
        self.file.write(data)

    def finish(self) -> None:
        self.file.close()
        self.callback.relative_update(1)

    def abort(self) -> None:
        self.file.close()
        os.unlink(self.lpath)


async def run_all(coroutines: Iterable[Coroutine]) -> None:
    """Run them together; if one fails, the others are cancelled before its error is raised, so
    no batch goes on writing files or filling results for a call that has already failed."""
    tasks = [asyncio.ensure_future(c) for c in coroutines]
    try:
        await asyncio.gather(*tasks)
    except BaseException:
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        raise


def raise_first(results: Sequence[Any]) -> None:
    for result in results:
        if isinstance(result, BaseException):
            raise result


def refusal_of(head: ResponseHead, body: bytes) -> Refusal:
    """A refused batch, from its head and the start of its body (the core reads the JSON)."""
    error = error_object(body)
    if error is None:
        error = {"message": body[:200].decode("utf-8", "replace")}
    per_path = failures_by_path(head.status, error)
    return Refusal(head.status, str(error.get("code", "")), str(error.get("message", head.reason or "")), per_path)
