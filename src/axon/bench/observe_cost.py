"""What metrics and the JSON access log cost ``axon serve`` on T1, measured inside one server.

    python -m axon.bench.observe_cost --seconds 200                  # flat out
    python -m axon.bench.observe_cost --seconds 200 --rate 20000     # paced: CPU per request
    python -m axon.bench.observe_cost --scenario B32                 # any axon bench scenario

Two servers run one after the other on a shared machine differ by 5% from noise alone, so a cost
of a few percent cannot be read from two runs. Here one worker serves T1 (one 8 KiB file, the
article's smallest request) under ``wrk`` for the whole run, while a thread in it switches every
second between four states: nothing on, ``--metrics``, ``--access-log --json-logs``, both. It
counts the requests begun and the CPU time used in each second, the first cycle starting when the
load does; cycles not wholly inside wrk's run are left out. A state's cost is its rate as a
ratio to the rate with nothing on in the same 4-second cycle, the median over the cycles: the
noise falls on every state alike. With ``--rate`` the load is the same in every state, and the
cost is read from the CPU time per request instead (what a server below saturation pays). The server is pinned
to one CPU and wrk to another, as in ``axon bench``; the access log goes to a file.
"""

from __future__ import annotations

import argparse
import json
import os
import itertools
import statistics
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path

from ..app import App
from . import procs, wrk
from .scenarios import AXON, ensure_files, request_for, select

STATES = ("nothing", "metrics", "json-log", "both")
_OUT = "AXON_OBSERVE_OUT"  # where the worker writes a row per second
# The load has begun when this many requests begin within one look (wait_ready's health checks
# come one at a time): cycles are counted from there, not from the worker's start.
_LOAD_BEGUN, _LOOK = 10, 0.05
# A second counts if it served this share of wrk's overall rate: only one with next to no load is
# left out (wrk's start and stop are left out by time), never one a neighbour's burst slowed.
FLOOR = 0.1


def _wait_for_load(begun_count: Callable[[], int]) -> None:
    """Return once requests arrive as a load sends them, not as health checks do."""
    while True:
        before = begun_count()
        time.sleep(_LOOK)
        if begun_count() - before >= _LOAD_BEGUN:
            return


def app() -> App:
    """The App ``axon serve --app axon.bench.observe_cost:app`` runs: Axon's, with metrics and a
    JSON access log ready, switched on and off by a thread of the worker."""
    from .. import log
    from ..metrics import instrument

    served = App()
    metrics = instrument(served, directory=None)
    out = Path(os.environ[_OUT])
    access = log.AccessLog(open(out.with_suffix(".access.log"), "w"), json_format=True)  # noqa: SIM115 - the worker's life
    readers = {"nothing": (), "metrics": (metrics,), "json-log": (access,), "both": (metrics, access)}
    records = served.records

    def cycle() -> None:
        _wait_for_load(records.begun_count)
        with open(out, "a") as rows:
            for second in itertools.count():
                state = STATES[second % len(STATES)]
                for reader in records.readers:
                    records.detach(reader)
                for reader in readers[state]:
                    records.attach(reader)
                # As axon.log.connect leaves an App built with the access log on: no logger to ask.
                records.logger = None if access in readers[state] else log.access_logger
                begun, start, cpu = records.begun_count(), time.monotonic(), time.process_time()
                time.sleep(1.0)
                requests, end = records.begun_count() - begun, time.monotonic()
                rate = requests / (end - start)
                cpu_us = (time.process_time() - cpu) / max(requests, 1) * 1e6  # user + system, all threads
                # start and end on the system-wide monotonic clock: main() compares them with wrk's run.
                row = {"cycle": second // len(STATES), "state": state, "rps": rate, "cpu_us": cpu_us,
                       "start": start, "end": end}
                rows.write(json.dumps(row) + "\n")
                rows.flush()

    # In the worker, after the fork: the supervisor builds the App, then forks.
    os.register_at_fork(after_in_child=lambda: threading.Thread(target=cycle, daemon=True).start())
    return served


def summarize(rows: list[dict], floor: float,
              window: tuple[float, float] | None = None) -> dict[str, tuple[float, float, float, float, int]]:
    """State -> (median req/s, median ratio of req/s to nothing's in the same 4-second cycle, the
    same of CPU time per request, median CPU µs per request, cycles counted). Cycles with a second
    outside ``window`` (wrk's run, monotonic seconds: its start and stop) or under ``floor`` req/s
    (no load to speak of) are left out. A neighbour's burst on a shared machine slows a second or
    two: the medians shrug it off, and leaving out its cycle would leave a short run none."""
    cycles: dict[int, dict[str, dict]] = {}
    for row in rows:
        cycles.setdefault(row["cycle"], {})[row["state"]] = row

    def counted(c: dict[str, dict]) -> bool:
        inside = window is None or all(window[0] <= r["start"] and r["end"] <= window[1] for r in c.values())
        return len(c) == len(STATES) and inside and min(r["rps"] for r in c.values()) >= floor

    whole = [c for c in cycles.values() if counted(c)]
    if not whole:
        raise SystemExit("no whole cycle under load: is wrk installed, and did the server start?")
    return {
        state: (
            statistics.median(c[state]["rps"] for c in whole),
            statistics.median(c[state]["rps"] / c["nothing"]["rps"] for c in whole),
            statistics.median(c[state]["cpu_us"] / c["nothing"]["cpu_us"] for c in whole),
            statistics.median(c[state]["cpu_us"] for c in whole),
            len(whole),
        )
        for state in STATES
    }


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m axon.bench.observe_cost", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--seconds", type=float, default=100, help="seconds of load (default 100: 25 of each state)")
    parser.add_argument("--rate", type=float,
                        help="requests/s, paced (below what the server can do): then the cost is read from the "
                             "CPU time per request, the same load in every state; default: as fast as it answers")
    parser.add_argument("--scenario", default="T1", help="an axon bench scenario (default T1, the most sensitive)")
    parser.add_argument("--files-dir", default="~/.cache/axon-bench/files", help="the served root (sample files made there)")
    parser.add_argument("--server-cpus", default="0")
    parser.add_argument("--load-cpus", default="1")
    args = parser.parse_args(argv)
    (scenario,) = select(args.scenario)
    request = request_for(scenario, AXON)
    root = ensure_files(args.files_dir)
    port = procs.free_port()
    with tempfile.TemporaryDirectory(prefix="axon-observe-") as tmp:
        out = Path(tmp) / "rows.jsonl"
        command = procs.Command(
            [sys.executable, "-m", "axon.cli", "serve", str(root), "--port", str(port), "--workers", "1",
             "--app", "axon.bench.observe_cost:app", "--log-level", "warning"],
            "axon-serve", {_OUT: str(out)},
        )
        with procs.Group(Path(tmp), args.server_cpus) as group:
            group.start(command)
            procs.wait_ready(f"http://127.0.0.1:{port}/api/health", group)
            load = wrk.Load(args.seconds, connections=50, threads=1, rate=args.rate)
            began = time.monotonic()
            result = wrk.run(f"http://127.0.0.1:{port}", request, load, args.load_cpus)
            ended = time.monotonic()
        rows = [json.loads(line) for line in out.read_text().splitlines()] if out.exists() else []
    table = summarize(rows, floor=FLOOR * result.rps, window=(began, ended))
    paced = f"paced at {args.rate:,.0f} req/s" if args.rate else "as fast as it answers"
    print(f"{scenario.name} under wrk -t1 -c50, {paced}, for {args.seconds:g} s: {result.rps:,.0f} req/s overall")
    print(f"{'state':10} {'req/s':>9} {'ratio':>7} {'CPU/req':>8} {'CPU µs':>7}   (medians over {next(iter(table.values()))[4]} cycles)")
    for state, (rate, ratio, cpu, cpu_us, _) in table.items():
        print(f"{state:10} {rate:9,.0f} {ratio:7.3f} {cpu:8.3f} {cpu_us:7.2f}")


if __name__ == "__main__":
    main()
