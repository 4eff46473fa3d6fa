#!/usr/bin/env python3
"""Where a cold large object's time goes through the disk tier: the CPU the whole machine spends
on one GET of it from the store direct and on one through a fresh tier, side by side.

    scripts/tier_cold_cpu.py                  # 4 objects of 64 MiB, 20 ms round trip
    scripts/tier_cold_cpu.py --objects 2 --mib 32

As :mod:`axon.bench.objects_tier`'s cold row (the tier node-local: the client beside it, the
store across a delay relay), with SeaweedFS on loopback. For each object: the store direct is read
by obstore through a relay of its own, then the same object through a fresh tiered ``axon serve``
(``on_fresh_tier``). Each line gives the seconds, the CPU the machine was busy for meanwhile (all
cores, from ``/proc/stat``: the store, the relays, the tier, the client) and the tier's own (its
worker's ``utime + stime``, read 0.3 s after the response so that its fill has ended). On a 2-core
machine the tier's row cannot be faster than the store direct once the busy CPU of its path nears
twice its seconds.
"""

from __future__ import annotations

import argparse
import asyncio
import subprocess
import sys
import tempfile
import time
from pathlib import Path

MiB = 1 << 20


def busy_ms() -> float:
    """CPU time all cores were busy since boot, in ms (user, nice, system, irq, softirq, steal)."""
    fields = [int(v) for v in open("/proc/stat").readline().split()[1:]]
    return 10.0 * (sum(fields) - fields[3] - fields[4])


def process_ms(pid: str) -> float:
    fields = open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()
    return 10.0 * (int(fields[11]) + int(fields[12]))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--objects", type=int, default=4, help="cold objects, each read both ways (default 4)")
    parser.add_argument("--mib", type=int, default=64, help="MiB an object (default 64)")
    parser.add_argument("--delay-ms", type=float, default=10.0, help="each way (default 10)")
    args = parser.parse_args(argv)

    from axon.bench import objects_tier, seaweed
    from axon.bench import relay as relay_module
    from axon.bench.objects import PREFIX, WARMUP, WARMUP_BYTES, payload, upload

    tier_args = argparse.Namespace(delay_ms=args.delay_ms, listing_valid=60)
    with tempfile.TemporaryDirectory(prefix="axon-tier-cpu-") as tmp_name, \
            seaweed.running(Path(tmp_name) / "weed") as store:
        tmp = Path(tmp_name)
        keys = {f"l/{i:05d}.bin": payload("l", i, args.mib * MiB) for i in range(args.objects)}
        asyncio.run(upload(store, {WARMUP: WARMUP_BYTES, **keys}))
        link = relay_module.start("127.0.0.1:0", ("127.0.0.1", store.port), args.delay_ms)
        direct = store.client(f"http://127.0.0.1:{link.port}")
        try:
            for n, key in enumerate(keys):
                busy = busy_ms()
                seconds = asyncio.run(objects_tier.store_get(direct, f"{PREFIX}/{key}"))
                print(f"{key} store direct: {seconds:.3f} s, machine busy {busy_ms() - busy:.0f} ms", flush=True)
                time.sleep(0.3)

                def through_tier(port: int, key: str = key) -> tuple[float, float, float]:
                    pid = subprocess.check_output(["pgrep", "-f", "--", f"--port {port}"]).split()[-1].decode()
                    busy, own = busy_ms(), process_ms(pid)
                    seconds = asyncio.run(objects_tier.store_get(objects_tier.via_files(port), key))
                    busy = busy_ms() - busy
                    time.sleep(0.3)
                    return seconds, busy, process_ms(pid) - own

                (seconds, busy, own), asked = objects_tier.on_fresh_tier(tier_args, store, tmp, tmp / f"tier-{n}",
                                                                         through_tier, near=True)
                print(f"{key} through the tier: {seconds:.3f} s, machine busy {busy:.0f} ms, the tier's own "
                      f"{own:.0f} ms, store GETs {asked['GET']}", flush=True)
        finally:
            link.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
