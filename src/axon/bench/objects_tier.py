"""The disk tier against the same files served from a local directory, and against the store
direct, over a long link: issue 38's goals, side by side in one run.

    python -m axon.bench.objects_tier                      # 20 ms round trip, 2 x 64 MiB
    python -m axon.bench.objects_tier --rounds 1 --large 1 --batches 50   # a quick look
    python -m axon.bench.objects_tier --listing-valid 60   # the tier trusts a listing for 60 s

It starts a SeaweedFS (:mod:`.seaweed`) on loopback and uploads three sets under one prefix: small
(4 KiB), mid (512 KiB) and large (64 MiB) objects; the same bytes are written to a local
directory. Two ``axon serve`` (one worker each) serve them: the local directory, and the bucket
with its disk tier (``--object-disk-cache``, ``--object-cache 0``, and ``--object-listing-valid``
as ``--listing-valid`` says: 0 by default, a listing per batch), filled beforehand by one
untimed pass. The client reaches each, and the store, through its own delay relay (:mod:`.relay`).
Rows, best of ``rounds`` (the local and tiered rows of a round run one after the other, so that
a busy machine weighs on both alike):

* ``warm``: ``batches`` batches of 32 random small objects (``POST``-free: one ``GET
  /api/stream-files``), ``concurrency`` at a time; every mid object as ``GET /files/KEY``,
  ``concurrency`` at a time; every large object as ``GET /files/KEY``, one at a time. The ratio
  is the tier's rate over the local directory's (the goal: at least 0.8 for the first two, 0.9
  for the large);
* ``cold``: each large object as the first request of a fresh tiered server on an empty
  directory, beside the store direct: one ``GET`` by the same client (obstore's, of the S3 API
  and of Axon's ``/files/``). The tier is node-local, as its name says: the client reaches it
  directly and it reaches the store over the link (a relay of its own), so that both ways
  cross the same link to the store once. The ratio is the store direct's time over Axon's (the
  goal: at least 1.0). The same first request with the client across a link from the tier too
  (and the tier beside the store: the topology of runs before 2026-11-29) is reported after it,
  without a goal. Then ``--together`` requests at once for one large object of a fresh
  node-local server. The store's GETs are counted (its own metrics): the ranged GETs of one
  fill, plus each request's opening GET;
* ``restart``: the first batch of 32 small objects of a fresh server on the filled directory:
  the store's GETs beside the listing (the goal: 0).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import random
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from . import relay as relay_module
from . import seaweed
from .objects import PREFIX, WARMUP, WARMUP_BYTES, payload, start_axon, upload

KiB, MiB = 1024, 1 << 20
TIER_FLAGS = ["--object-cache", "0", "--object-disk-cache"]


async def fetch_all(port: int, targets: list[str], concurrency: int) -> int:
    """Each target fetched (``concurrency`` at a time), its length checked; the bytes read."""
    import aiohttp

    gate = asyncio.Semaphore(concurrency)
    total = 0
    async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=concurrency),
                                     timeout=aiohttp.ClientTimeout(total=300)) as session:

        async def one(target: str) -> None:
            nonlocal total
            async with gate, session.get(f"http://127.0.0.1:{port}{target}") as response:
                assert response.status == 200, (target, response.status)
                seen = 0
                async for chunk in response.content.iter_chunked(1 << 20):
                    seen += len(chunk)
                assert seen == int(response.headers["Content-Length"]), (target, seen)
                total += seen

        await asyncio.gather(*map(one, targets))
    return total


def timed(port: int, targets: list[str], concurrency: int) -> float:
    started = time.perf_counter()
    asyncio.run(fetch_all(port, targets, concurrency))
    return time.perf_counter() - started


async def store_get(client, key: str) -> float:
    """One object by one GET of ``client`` (obstore's: the store's S3 API, or Axon's /files/ by
    HTTP), read as it streams; the seconds it took."""
    import obstore

    started = time.perf_counter()
    result = await obstore.get_async(client, key)
    seen = 0
    async for chunk in result.stream(min_chunk_size=1 << 20):
        seen += len(chunk)
    assert seen == result.meta["size"]
    return time.perf_counter() - started


def tier_flags(args: argparse.Namespace, directory: Path) -> list[str]:
    """The tiered server's flags: the disk tier in ``directory``, and the listing's validity."""
    return [*TIER_FLAGS, str(directory), "--object-listing-valid", str(args.listing_valid)]


def run(args: argparse.Namespace) -> list[dict]:
    rng = random.Random(38)
    sets = {
        "s": (args.small, 4 * KiB), "m": (args.mid, 512 * KiB), "l": (args.large, args.large_mib * MiB),
    }
    keys = {kind: [f"{kind}/{i:05d}.bin" for i in range(count)] for kind, (count, _) in sets.items()}
    rows: list[dict] = []
    with tempfile.TemporaryDirectory(prefix="axon-tier-bench-") as tmp_name, \
            seaweed.running(Path(tmp_name) / "weed") as store:
        tmp = Path(tmp_name)
        local = tmp / "local"
        for kind, (count, size) in sets.items():
            data = {k: payload(kind, i, size) for i, k in enumerate(keys[kind])}
            asyncio.run(upload(store, data))
            for key, body in data.items():
                (local / key).parent.mkdir(parents=True, exist_ok=True)
                (local / key).write_bytes(body)
        asyncio.run(upload(store, {WARMUP: WARMUP_BYTES}))
        (local / WARMUP).write_bytes(WARMUP_BYTES)
        tier_dir = tmp / "tier"
        servers = [start_axon(store, tmp / "local.log", [], root=str(local)),
                   start_axon(store, tmp / "tier.log", tier_flags(args, tier_dir))]
        store_port = store.port
        relays = [relay_module.start("127.0.0.1:0", ("127.0.0.1", port), args.delay_ms) for _, port in servers]
        relays.append(relay_module.start("127.0.0.1:0", ("127.0.0.1", store_port), args.delay_ms))
        try:
            to_local, to_tier, to_store = (r.port for r in relays)
            batches = [[rng.choice(keys["s"]) for _ in range(32)] for _ in range(args.batches)]
            first_batch = ["/api/stream-files?" + "&".join(f"f={k}" for k in batches[0])]
            shapes = {
                "32 x 4 KiB batches": (["/api/stream-files?" + "&".join(f"f={k}" for k in b) for b in batches],
                                       args.concurrency, 0.8),
                "512 KiB, /files/": ([f"/files/{k}" for k in keys["m"]], args.concurrency, 0.8),
                f"{args.large_mib} MiB, /files/": ([f"/files/{k}" for k in keys["l"]], 1, 0.9),
            }
            if "warm" not in args.rows:
                shapes = {}
            for targets, concurrency, _ in shapes.values():  # fills the tier; warms both page caches
                for port in (to_local, to_tier):
                    asyncio.run(fetch_all(port, targets, concurrency))
            for shape, (targets, concurrency, goal) in shapes.items():
                best = {"local": float("inf"), "tier": float("inf")}
                for _ in range(args.rounds):
                    best["local"] = min(best["local"], timed(to_local, targets, concurrency))
                    best["tier"] = min(best["tier"], timed(to_tier, targets, concurrency))
                valid = f" (listing valid {args.listing_valid:g} s)" if args.listing_valid else ""
                rows.append({"row": f"warm: {shape}{valid}", "local s": round(best["local"], 3),
                             "tier s": round(best["tier"], 3), "ratio": round(best["local"] / best["tier"], 2),
                             "goal": goal})
            client = store.client(f"http://127.0.0.1:{to_store}")
            if "cold" in args.rows:
                rows += cold_rows(args, store, tmp, keys["l"], client)
            if "restart" in args.rows:
                asyncio.run(fetch_all(to_tier, [first_batch[0]], 1))  # the batch kept, should warm be left out
                rows.append(restart_row(args, store, tmp, tier_dir, batches[0]))
        finally:
            for r in relays:
                r.stop()
            for proc, _ in servers:
                proc.terminate()
                proc.wait(10)
    return rows


def via_files(port: int):
    """obstore's HTTP client of Axon's ``/files/``: the same client as the store direct's."""
    from obstore.store import HTTPStore

    return HTTPStore.from_url(f"http://127.0.0.1:{port}/files/", client_options={"allow_http": True})


def on_fresh_tier(args: argparse.Namespace, store: seaweed.Seaweed, tmp: Path, directory: Path, work,
                  near: bool = False) -> tuple[Any, dict]:
    """``work(port)`` on a fresh tiered server on ``directory``, its store connection made
    first; with the store's requests it caused, by kind. ``near``: the client beside the tier
    (``port`` is the server's own) and the store across the link (the server reaches it through
    a relay); else the client across the link (``port`` is a relay's) and the store beside it."""
    store_port = store.port
    link = relay_module.start("127.0.0.1:0", ("127.0.0.1", store_port), args.delay_ms) if near else None
    proc, port = start_axon(store, tmp / "cold.log", tier_flags(args, directory),
                            endpoint=None if link is None else f"http://127.0.0.1:{link.port}")
    relay = None if near else relay_module.start("127.0.0.1:0", ("127.0.0.1", port), args.delay_ms)
    try:
        port = port if relay is None else relay.port
        asyncio.run(fetch_all(port, [f"/files/{WARMUP}"], 1))
        time.sleep(0.3)  # the store counts a request once its answer is written
        before = store.requests()
        result = work(port)
        time.sleep(0.3)
        after = store.requests()
    finally:
        for r in (relay, link):
            if r is not None:
                r.stop()
        proc.terminate()
        proc.wait(10)
    return result, {kind: after.get(kind, 0) - before.get(kind, 0) for kind in ("LIST", "GET")}


def cold_rows(args: argparse.Namespace, store: seaweed.Seaweed, tmp: Path, large: list[str], client) -> list[dict]:
    best = {"near": float("inf"), "far": float("inf"), "store": float("inf")}
    asked: dict = {}
    for r in range(args.rounds):
        for key in large:
            best["store"] = min(best["store"], asyncio.run(store_get(client, f"{PREFIX}/{key}")))
            for where in ("near", "far"):
                seconds, got = on_fresh_tier(args, store, tmp, tmp / f"cold-{where}-{r}-{key.replace('/', '-')}",
                                             lambda port: asyncio.run(store_get(via_files(port), key)),
                                             near=where == "near")
                best[where] = min(best[where], seconds)
                asked[where] = got
    mib = args.large_mib
    rows = [{"row": f"cold: {mib} MiB, /files/, first request (client beside the tier, store across the link)",
             "store direct s": round(best["store"], 3), "tier s": round(best["near"], 3),
             "ratio": round(best["store"] / best["near"], 2), "goal": 1.0, "store GETs": asked["near"]["GET"]},
            {"row": f"cold: {mib} MiB, /files/, first request (client across the link, store beside the tier)",
             "store direct s": round(best["store"], 3), "tier s": round(best["far"], 3),
             "ratio": round(best["store"] / best["far"], 2), "store GETs": asked["far"]["GET"]}]
    best_together = float("inf")
    for r in range(args.rounds):
        targets = [f"/files/{large[0]}"] * args.together
        seconds, together = on_fresh_tier(args, store, tmp, tmp / f"together-{r}",
                                          lambda port: timed(port, targets, args.together), near=True)
        best_together = min(best_together, seconds)
    rows.append({"row": f"cold: {mib} MiB, {args.together} requests at once for one object (client beside the tier)",
                 "tier s": round(best_together, 3), "store GETs": together["GET"]})
    return rows


def restart_row(args: argparse.Namespace, store: seaweed.Seaweed, tmp: Path, tier_dir: Path, names: list[str]) -> dict:
    target = "/api/stream-files?" + "&".join(f"f={k}" for k in names)
    seconds, asked = on_fresh_tier(args, store, tmp, tier_dir, lambda port: timed(port, [target], 1))
    return {"row": "restart: first batch of 32 x 4 KiB", "tier s": round(seconds, 3), "store LISTs": asked["LIST"],
            "store GETs": asked["GET"], "goal GETs": 0}


def table(rows: list[dict]) -> str:
    lines = ["| row | seconds (reference) | seconds (tier) | ratio | goal | store requests |", "|---|---:|---:|---:|---:|---|"]
    for r in rows:
        ref = r.get("local s", r.get("store direct s", ""))
        requests = ", ".join(f"{r[k]} {k.split()[-1]}" for k in ("store LISTs", "store GETs") if k in r)
        goal = r.get("goal", r.get("goal GETs", ""))
        lines.append(f"| {r['row']} | {ref} | {r['tier s']} | {r.get('ratio', '')} | {goal} | {requests} |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m axon.bench.objects_tier", description=__doc__.split("\n\n")[0])
    parser.add_argument("--small", type=int, default=1000, help="4 KiB objects (default 1000)")
    parser.add_argument("--batches", type=int, default=200, help="batches of 32 random small objects (default 200)")
    parser.add_argument("--mid", type=int, default=64, help="512 KiB objects (default 64)")
    parser.add_argument("--large", type=int, default=2, help="large objects (default 2)")
    parser.add_argument("--large-mib", type=int, default=64, help="MiB each (default 64)")
    parser.add_argument("--together", type=int, default=20, help="requests at once for one cold object (20)")
    parser.add_argument("--delay-ms", type=float, default=10.0, help="each way (default 10: a 20 ms round trip)")
    parser.add_argument("--concurrency", type=int, default=16, help="requests at once for the warm rows (16)")
    parser.add_argument("--listing-valid", type=float, default=0.0, metavar="SECONDS",
                        help="the tiered server's --object-listing-valid (default 0: a listing per batch)")
    parser.add_argument("--rounds", type=int, default=3, help="each row is timed this many times; best kept")
    parser.add_argument("--rows", default="warm,cold,restart", help="which rows (default warm,cold,restart)")
    parser.add_argument("--json", action="store_true", help="print the rows as JSON instead of a table")
    args = parser.parse_args(argv)
    rows = run(args)
    print(json.dumps(rows) if args.json else table(rows))
    return 0


if __name__ == "__main__":
    sys.exit(main())
