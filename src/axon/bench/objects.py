"""Objects from an S3-compatible store across a long link: one Axon batch against the store's own
API (issue 16's benchmark).

    python -m axon.bench.objects                          # 1,000 x 4 KiB, 64 x 512 KiB, 20 ms RTT
    python -m axon.bench.objects --small 50 --large 4 --delay-ms 1 --rounds 1   # a quick look

It starts a SeaweedFS (:mod:`.seaweed`) on loopback, uploads the objects, and an ``axon serve
s3://bucket/prefix`` (one worker) next to the store; the client reaches both through the delay
relay (:mod:`.relay`: ``delay`` each way, a ``2 x delay`` round trip), as a client across a WAN
reaches a node next to its bucket. For each set of objects it times, best of ``rounds``:

* ``axon batch, cold``: one ``POST /api/stream-files`` naming every object, sent and read by
  the axon:// filesystem (``fs.cat(paths)``: a ``bytes`` per object, as obstore gives the direct
  way), as the first batch of a fresh ``axon serve`` (started for each round; one unrelated
  object fetched first, so its store connection and loop, and the client's connection, are up):
  nothing of the objects is known, so the store is listed and each small object fetched;
* ``axon batch, warm``: the same batch repeated on one server: the listing finds the small
  objects' bytes kept for their ETags (``--object-cache``), so the store answers one listing
  page per thousand keys and no GET;
* ``axon batch, tier cold`` / ``tier warm`` / ``tier restart``: the same with the objects kept
  on disk (``--object-disk-cache``, ``--object-cache 0``, so that only the disk tier keeps them):
  a first batch on an empty directory (each round a fresh one), a repeated batch, and the first
  batch of a fresh server on the directory the repeated batches filled;
* ``axon files``: every object as ``GET /files/KEY``, ``concurrency`` at a time (aiohttp);
* ``store direct``: every object as a ``GET`` of the S3 API, ``concurrency`` at a time (obstore,
  signed as any S3 client signs);
* ``store, no link``: the same straight to the store, without the relay, 64 at a time: what the
  store itself can give, the bound of anything that fetches from it one GET each;
* ``store listing, no link``: the set's keys listed (ListObjectsV2, every page), without the
  relay: what a warm batch asks of the store.

Each row also gives the requests the store answered per fetch (its own metrics: GET, which
counts HEAD, and LIST).

Every byte is checked against what was uploaded. The table it prints (and ``--json``) gives the
seconds, objects/s and MB/s of each, and the ratio of the batch to the store's own API.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import subprocess
import sys
import tempfile
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from . import relay as relay_module
from . import seaweed
from ..limits import Limits

KiB = 1024
PREFIX = "bench"
START_TIMEOUT = 30.0
#: GETs at once for the "store, no link" reference (as many as Axon's source opens at once).
LOCAL_CONCURRENCY = 64
#: An object outside the sets, fetched by each fresh server before its cold batch.
WARMUP, WARMUP_BYTES = "warmup.bin", b"warm"
WAYS = ("store direct", "store, no link", "store listing, no link", "axon batch, cold", "axon batch, warm",
        "axon batch, tier cold", "axon batch, tier warm", "axon batch, tier restart", "axon files")
#: What serves from the disk tier alone (the directory follows).
TIER_FLAGS = ["--object-cache", "0", "--object-disk-cache"]


@dataclass
class Row:
    objects: str  # "1000 x 4 KiB"
    way: str  # "axon batch" | "axon files" | "store direct"
    seconds: float
    objects_per_second: float
    mb_per_second: float
    vs_store: float  # how many times faster than "store direct" (its own row: 1.0)
    store_requests: str = ""  # per fetch, as the store counted them: "1 LIST + 0 GET"


def payload(kind: str, i: int, size: int) -> bytes:
    """Distinct, checkable bytes for object ``i`` of a set."""
    head = f"{kind}-{i:06d}-".encode()
    return (head * (size // len(head) + 1))[:size]


async def upload(store: seaweed.Seaweed, keys: dict[str, bytes], concurrency: int = 16) -> None:
    import obstore

    gate = asyncio.Semaphore(concurrency)

    async def one(key: str, data: bytes) -> None:
        async with gate:
            await obstore.put_async(store.store, f"{PREFIX}/{key}", data)

    await asyncio.gather(*(one(k, d) for k, d in keys.items()))


def batch_client() -> tuple[Any, list[int]]:
    """The client a Python program reads objects into memory with through Axon: the axon://
    filesystem (:mod:`axon.fsspec`), whose ``cat(paths)`` is one ``POST /api/stream-files`` for up
    to the server's ``max_files`` paths, its parts read as they arrive, one ``bytes`` per path, as
    the direct way's obstore gives. With it, a one-item list counting the batch requests it sent
    (reset by :func:`via_batch`)."""
    import aiohttp

    from ..fsspec import AxonFileSystem

    sent = [0]

    async def count(session, context, params) -> None:
        sent[0] += params.method == "POST"  # not the one GET /api/limits of a first call

    trace = aiohttp.TraceConfig()
    trace.on_request_start.append(count)
    # One batch at a time: a long list is otherwise spread over several batches side by side.
    fs = AxonFileSystem(skip_instance_cache=True, batch_concurrency=1, client_kwargs={"trace_configs": [trace]})
    return fs, sent


def via_batch(client: tuple[Any, list[int]], port: int, keys: dict[str, bytes]) -> None:
    """Every object of ``keys`` in one batch request, each one's bytes checked."""
    fs, sent = client
    urls = [f"127.0.0.1:{port}/{k}" for k in keys]
    sent[0] = 0
    got = fs.cat(urls)
    assert sent[0] == 1, f"{sent[0]} batch requests for one batch"
    for url, data in zip(urls, keys.values()):
        assert got[fs._strip_protocol(url)] == data, f"{url}: other bytes than uploaded"


async def via_files(port: int, keys: dict[str, bytes], concurrency: int) -> None:
    import aiohttp

    gate = asyncio.Semaphore(concurrency)
    connector = aiohttp.TCPConnector(limit=concurrency)
    async with aiohttp.ClientSession(connector=connector) as session:

        async def one(key: str, data: bytes) -> None:
            async with gate, session.get(f"http://127.0.0.1:{port}/files/{key}") as response:
                got = await response.read()
                assert response.status == 200 and got == data, (key, response.status)

        await asyncio.gather(*(one(k, d) for k, d in keys.items()))


async def via_store(client, keys: dict[str, bytes], concurrency: int) -> None:
    import obstore

    gate = asyncio.Semaphore(concurrency)

    async def one(key: str, data: bytes) -> None:
        async with gate:
            result = await obstore.get_async(client, f"{PREFIX}/{key}")
            got = await result.bytes_async()
            assert bytes(got) == data, key

    await asyncio.gather(*(one(k, d) for k, d in keys.items()))


async def via_listing(client, keys: dict[str, bytes]) -> None:
    import obstore

    directory = f"{PREFIX}/{next(iter(keys)).rsplit('/', 1)[0]}"
    named = {m["path"] for chunk in obstore.list(client, directory, chunk_size=1000) for m in chunk}
    assert named >= {f"{PREFIX}/{k}" for k in keys}, "the listing does not name every object"


class Counter:
    """The store's requests (its own metrics) over the timed runs of one way."""

    def __init__(self, store: seaweed.Seaweed) -> None:
        self.store = store
        self.counts: dict[str, int] = {}
        self.runs = 0

    def __enter__(self) -> Counter:
        self._before = self.store.requests()
        return self

    def __exit__(self, *exc: object) -> None:
        time.sleep(0.2)  # the store counts a request once its answer is written
        after = self.store.requests()
        for kind in ("LIST", "GET"):
            self.counts[kind] = self.counts.get(kind, 0) + after.get(kind, 0) - self._before.get(kind, 0)
        self.runs += 1

    def per_run(self) -> str:
        return " + ".join(f"{self.counts.get(kind, 0) / max(self.runs, 1):g} {kind}" for kind in ("LIST", "GET"))


def best_of(rounds: int, run, counter: Counter, warmup: int = 0) -> float:
    """The shortest of ``rounds`` runs, after ``warmup`` untimed ones."""
    for _ in range(warmup):
        run()
    times = []
    for _ in range(rounds):
        with counter:
            started = time.perf_counter()
            run()
            times.append(time.perf_counter() - started)
    return min(times)


def cold_batches(rounds: int, store: seaweed.Seaweed, log: Path, delay_ms: float, keys: dict[str, bytes],
                 counter: Counter, flags: list[str], fresh_tier: Path | None = None) -> float:
    """The best of ``rounds`` first batches, each on a fresh server behind a fresh relay; the
    server fetches :data:`WARMUP` first (untimed) so that what is timed is the batch, not the
    server's first connection to the store. With ``fresh_tier``, each server keeps objects on
    disk in a new, empty directory under it."""
    times = []
    for i in range(rounds):
        tier = [*TIER_FLAGS, str(fresh_tier / f"round-{time.monotonic_ns()}-{i}")] if fresh_tier else []
        axon, port = start_axon(store, log, [*flags, *tier])
        try:
            with relay_module.start("127.0.0.1:0", ("127.0.0.1", port), delay_ms) as to_axon:
                client = batch_client()
                via_batch(client, to_axon.port, {WARMUP: WARMUP_BYTES})
                with counter:
                    started = time.perf_counter()
                    via_batch(client, to_axon.port, keys)
                    times.append(time.perf_counter() - started)
        finally:
            axon.terminate()
            axon.wait(10)
    return min(times)


def start_axon(store: seaweed.Seaweed, log: Path, flags: list[str], root: str | None = None,
               endpoint: str | None = None) -> tuple[subprocess.Popen, int]:
    """``axon serve`` (one worker) of the store's objects under :data:`PREFIX`, or of ``root``;
    reaching the store at ``endpoint`` (a relay's) instead of its own."""
    import http.client

    port = seaweed.free_port()
    env = dict(os.environ, **store.env(**({"AWS_ENDPOINT_URL": endpoint} if endpoint else {})))
    argv = [sys.executable, "-m", "axon.cli", "serve", root or store.url(PREFIX), "--host", "127.0.0.1",
            "--port", str(port), "--workers", "1", *flags]
    with open(log, "wb") as out:
        proc = subprocess.Popen(argv, env=env, stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT)
    deadline = time.monotonic() + START_TIMEOUT
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"axon serve exited: {log.read_text()[-2000:]}")
        try:
            conn = http.client.HTTPConnection("127.0.0.1", port, timeout=2)
            conn.request("GET", "/api/health")
            if conn.getresponse().status == 200:
                return proc, port
        except OSError:
            time.sleep(0.1)
    proc.kill()
    raise RuntimeError("axon serve did not start")


def run(small: int, small_size: int, large: int, large_size: int, delay_ms: float, concurrency: int,
        rounds: int, flags: list[str] | None = None) -> list[Row]:
    flags = flags or []
    sets = [
        (f"{small} x {small_size // KiB} KiB", {f"s/{i:05d}.bin": payload("s", i, small_size) for i in range(small)}),
        (f"{large} x {large_size // KiB} KiB", {f"l/{i:05d}.bin": payload("l", i, large_size) for i in range(large)}),
    ]
    rows: list[Row] = []
    with tempfile.TemporaryDirectory(prefix="axon-objects-bench-") as tmp, \
            seaweed.running(Path(tmp) / "weed") as store:
        for _, keys in sets:
            asyncio.run(upload(store, keys))
        asyncio.run(upload(store, {WARMUP: WARMUP_BYTES}))
        axon, axon_port = start_axon(store, Path(tmp) / "axon.log", flags)
        tier_flags = [*flags, *TIER_FLAGS, str(Path(tmp) / "tier")]
        tiered, tiered_port = start_axon(store, Path(tmp) / "axon-tier.log", tier_flags)
        store_port = store.port
        try:
            with relay_module.start("127.0.0.1:0", ("127.0.0.1", axon_port), delay_ms) as to_axon, \
                    relay_module.start("127.0.0.1:0", ("127.0.0.1", tiered_port), delay_ms) as to_tiered, \
                    relay_module.start("127.0.0.1:0", ("127.0.0.1", store_port), delay_ms) as to_store:
                client = store.client(f"http://127.0.0.1:{to_store.port}", pool_max_idle_per_host=str(concurrency))
                batch = batch_client()
                for label, keys in sets:
                    if not keys:
                        continue
                    total = sum(len(d) for d in keys.values())
                    counters = {way: Counter(store) for way in WAYS}
                    timed = {
                        "store direct": best_of(rounds, lambda: asyncio.run(via_store(client, keys, concurrency)),
                                                counters["store direct"]),
                        "store, no link": best_of(rounds, lambda: asyncio.run(via_store(store.store, keys, LOCAL_CONCURRENCY)),
                                                  counters["store, no link"]),
                        "store listing, no link": best_of(rounds, lambda: asyncio.run(via_listing(store.store, keys)),
                                                          counters["store listing, no link"]),
                        "axon batch, cold": cold_batches(rounds, store, Path(tmp) / "axon-cold.log", delay_ms, keys,
                                                         counters["axon batch, cold"], flags),
                        "axon batch, warm": best_of(rounds, lambda: via_batch(batch, to_axon.port, keys),
                                                    counters["axon batch, warm"], warmup=1),
                        "axon batch, tier cold": cold_batches(rounds, store, Path(tmp) / "axon-cold.log", delay_ms,
                                                              keys, counters["axon batch, tier cold"], flags,
                                                              fresh_tier=Path(tmp) / "tiers"),
                        "axon batch, tier warm": best_of(rounds, lambda: via_batch(batch, to_tiered.port, keys),
                                                         counters["axon batch, tier warm"], warmup=1),
                        "axon batch, tier restart": cold_batches(rounds, store, Path(tmp) / "axon-cold.log",
                                                                 delay_ms, keys, counters["axon batch, tier restart"],
                                                                 tier_flags),
                        "axon files": best_of(rounds, lambda: asyncio.run(via_files(to_axon.port, keys, concurrency)),
                                              counters["axon files"]),
                    }
                    for way, seconds in timed.items():
                        rows.append(Row(label, way, round(seconds, 4), round(len(keys) / seconds, 1),
                                        round(total / seconds / 1e6, 2), round(timed["store direct"] / seconds, 2),
                                        counters[way].per_run()))
        finally:
            for server in (axon, tiered):
                server.terminate()
                server.wait(10)
    return rows


def table(rows: list[Row], delay_ms: float, concurrency: int) -> str:
    lines = [
        f"| objects | way (through the relay, {2 * delay_ms:g} ms round trip) | seconds | objects/s | MB/s "
        "| vs store direct | store requests each |",
        "|---|---|---:|---:|---:|---:|---|",
    ]
    for r in rows:
        at_once = LOCAL_CONCURRENCY if r.way == "store, no link" else concurrency
        if r.way.startswith("axon batch"):
            way = f"**{r.way}**"
        elif r.way.startswith("store listing"):
            way = r.way
        else:
            way = f"{r.way} ({at_once} at a time)"
        if r.way.startswith("store listing"):  # names the objects, moves none of their bytes
            lines.append(f"| {r.objects} | {way} | {r.seconds:.3f} | {r.objects_per_second:,.0f} | - | - | "
                         f"{r.store_requests} |")
            continue
        lines.append(f"| {r.objects} | {way} | {r.seconds:.3f} | {r.objects_per_second:,.0f} | "
                     f"{r.mb_per_second:.1f} | {r.vs_store:.2f}x | {r.store_requests} |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m axon.bench.objects", description=__doc__.split("\n\n")[0])
    parser.add_argument("--small", type=int, default=1000, help="small objects (default 1000)")
    parser.add_argument("--small-size", type=int, default=4 * KiB, help="bytes each (default 4 KiB)")
    parser.add_argument("--large", type=int, default=64, help="large objects (default 64)")
    parser.add_argument("--large-size", type=int, default=512 * KiB, help="bytes each (default 512 KiB: T7's file)")
    parser.add_argument("--delay-ms", type=float, default=10.0, help="each way (default 10: a 20 ms round trip)")
    parser.add_argument("--concurrency", type=int, default=16, help="GETs at once for the per-object ways (16)")
    parser.add_argument("--rounds", type=int, default=3, help="each way is timed this many times; best kept")
    parser.add_argument("--json", action="store_true", help="print the rows as JSON instead of a table")
    parser.add_argument("--serve-args", default="", metavar="FLAGS",
                        help="more flags for axon serve, after '=': --serve-args=--no-object-listing, --serve-args='--object-cache 0'")
    args = parser.parse_args(argv)
    if args.small * args.small_size + args.large * args.large_size > Limits().max_batch_bytes:
        parser.error("the objects exceed one batch's max_batch_bytes")
    if max(args.small, args.large) > Limits().max_files:
        parser.error(f"a set of more than max_files ({Limits().max_files}) objects is not one batch")
    rows = run(args.small, args.small_size, args.large, args.large_size, args.delay_ms, args.concurrency,
               args.rounds, args.serve_args.split())
    print(json.dumps([asdict(r) for r in rows]) if args.json else table(rows, args.delay_ms, args.concurrency))
    return 0


if __name__ == "__main__":
    sys.exit(main())
