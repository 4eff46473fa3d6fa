#!/usr/bin/env python3
"""Where an ``axon serve`` worker's loop turns go, under ``axon bench``: CPU time per turn, and
the cycle collector's part of it.

    scripts/turns.py --scenarios R1,R32,R256 --burst 0 --sustained 5    # axon bench's options
    scripts/turns.py --src /other/src --scenarios R32 --sustained 5     # another tree's axon

The worker is timed from inside, by a ``sitecustomize`` this script puts first on the server's
``PYTHONPATH``: a callback that queues itself again marks each pass over the loop's callbacks,
and the worker thread's CPU time between two marks is one turn's; ``gc.callbacks`` time each
collection in the same turn. CPU time of the thread, not wall time: a busy machine that takes the
CPU away does not lengthen a turn here, as it does the loop lag ``/metrics`` shows. (The marking
callback keeps the loop from sleeping in ``epoll_wait``: under load it never does anyway.) For
each worker it prints the turns, the longest, the 99th percentile, the longest collection, the
longest turns without their collections, and each generation's collections (how many, the
longest), with the requests the bench counted.
"""

from __future__ import annotations

import argparse
import glob
import json
import os
import subprocess
import sys
import tempfile

HOOK = '''
import os
if os.environ.get("AXON_TURNS_OUT"):
    import gc, json, time
    import axon.metrics.loop_lag as _lag

    _start = _lag.LoopLag.start
    _turns = []  # (cpu ms, collector ms) a turn
    _gc = {"ms": 0.0, "t0": 0.0, "max": 0.0}
    _by_generation = [[0, 0.0], [0, 0.0], [0, 0.0]]  # collections and the longest (ms), a generation

    def _collected(phase, info):
        if phase == "start":
            _gc["t0"] = time.thread_time()
        else:
            ms = (time.thread_time() - _gc["t0"]) * 1e3
            _gc["ms"] += ms
            _gc["max"] = max(_gc["max"], ms)
            seen = _by_generation[info["generation"]]
            seen[0] += 1
            seen[1] = max(seen[1], ms)

    def _dump():
        cpus = sorted(t[0] for t in _turns)
        with open(f"{os.environ['AXON_TURNS_OUT']}.{os.getpid()}.json", "w") as f:
            json.dump({"turns": len(cpus), "cpu_ms": sum(cpus), "max": cpus[-1] if cpus else 0.0,
                       "p99": cpus[int(len(cpus) * 0.99)] if cpus else 0.0, "gc_max": _gc["max"],
                       "by_generation": _by_generation,
                       "without_gc": sorted(c - g for c, g in _turns)[-3:]}, f)

    def start(self):
        loop = self.loop
        gc.callbacks.append(_collected)
        last = [time.thread_time(), time.perf_counter()]

        def mark():
            now = time.thread_time()
            _turns.append(((now - last[0]) * 1e3, _gc["ms"]))
            _gc["ms"] = 0.0
            if time.perf_counter() - last[1] > 2:  # what is measured so far, every 2 s
                _dump()
                last[1] = time.perf_counter()
                now = time.thread_time()  # the dump is not a turn's
            last[0] = now
            loop.call_soon(mark)

        loop.call_soon(mark)
        return _start(self)

    _lag.LoopLag.start = start
'''


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--src", help="the src directory of the axon to measure (default: the one importable here)")
    args, bench = parser.parse_known_args()
    src = args.src or os.path.dirname(os.path.dirname(__import__("axon").__file__))
    with tempfile.TemporaryDirectory() as tmp:
        with open(os.path.join(tmp, "sitecustomize.py"), "w") as f:
            f.write(HOOK)
        out = os.path.join(tmp, "turns")
        env = {**os.environ, "PYTHONPATH": os.pathsep.join([tmp, src]), "AXON_TURNS_OUT": out}
        results = os.path.join(tmp, "bench")
        subprocess.run([sys.executable, "-m", "axon.cli", "bench", "--compare", "--targets", "axon", "--no-chart",
                        "--out", results, *bench], env=env, check=True, stdout=subprocess.DEVNULL)
        with open(os.path.join(results, "results.json")) as f:
            for r in json.load(f)["results"]:
                print(f"{r['scenario']} {r['phase']}: {r['wrk']['requests']} requests")
        for path in sorted(glob.glob(out + ".*.json"), key=os.path.getmtime):
            with open(path) as f:
                d = json.load(f)
            print(f"worker: {d['turns']} turns, {d['cpu_ms']:.0f} ms CPU; longest {d['max']:.1f} ms, p99 "
                  f"{d['p99']:.2f} ms; longest collection {d['gc_max']:.1f} ms; longest without it: "
                  + ", ".join(f"{t:.1f}" for t in d["without_gc"]) + " ms; collections by generation (count, "
                  "longest ms): " + ", ".join(f"{g}: {n}, {ms:.1f}" for g, (n, ms) in enumerate(d["by_generation"])))
    return 0


if __name__ == "__main__":
    sys.exit(main())
