"""axon bench: the article's load tests against a server, or against every server in turn.

    axon bench http://127.0.0.1:8000 --files-dir /srv/files     # a server you started; its root
    axon bench --compare                                        # nginx, the original, Axon on five runtimes
    axon bench --compare --targets nginx,granian-static,axon --scenarios real,distinct
                                                                # real traffic: random files, no repeats
    axon bench --compare --article                              # the article's 1 + 10 minutes
    axon bench --compare --targets nginx,axon --rate-fraction 0.7   # then each at 70% of nginx's capacity
    axon bench --from-json bench-results/RUN/results.json       # redraw a saved run's report

Against a URL, --files-dir must be that server's root: the bench puts its files there, and a
scenario whose first request is refused (a 404: the files are not under the server's root)
fails the run (exit 1), naming the URL, the file and the directory.

Each run writes report.md (the article's tables), summary.md (the side-by-side tables),
results.json (every figure, with its ratios to nginx and to the original), chart.png, the
servers' logs and wrk's raw output to --out.
"""

from __future__ import annotations

import argparse
import shlex
import sys
import time
from pathlib import Path

from . import machine, procs, report, runner, scenarios, targets
from .results import ResultSet

DEFAULT_CACHE = Path("~/.cache/axon-bench")
ARTICLE = {"burst": 60.0, "sustained": 600.0, "connections": 50, "threads": 10}
DEFAULTS = {"burst": 3.0, "sustained": 10.0, "connections": 50, "threads": 2}
REFERENCE = "nginx"  # --rate-fraction is of its capacity


def add_parser(subparsers: argparse._SubParsersAction) -> argparse.ArgumentParser:
    parser = subparsers.add_parser(
        "bench", help="load-test a server with the article's scenarios (wrk)",
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    configure(parser)
    parser.set_defaults(func=run)
    return parser


def configure(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("url", nargs="?", help="a running server that speaks Axon's API, e.g. http://127.0.0.1:8000")
    parser.add_argument("--compare", action="store_true",
                        help="start each target in turn on this machine and compare them (no URL)")
    parser.add_argument("--targets", default="all",
                        help=f"with --compare: comma list of {', '.join(targets.TARGETS)} (default: all)")
    parser.add_argument("--scenarios", default="all",
                        help="comma list of R1, R32, R256 (random files of a pool of 10,000 per batch), F1 "
                             "(/files/ of a random one), T1..T8, B32, F8, F64, F512 (/files/), health, error, echo, "
                             "the archives B32.zip, B32.tar, T8.zip, T8.tar (CRCs known) and B32.zip.cold, "
                             "T8.zip.cold (CRCs read on every request), any of these with a trailing ~ (a header "
                             "that changes every request), or groups real (R1,R32,R256,F1), distinct "
                             "(T1~,T3~,B32~,health~), article, files, baselines, archive, all (all: real traffic, "
                             "the article's matrix, the /files/ scenarios and the baselines)")
    parser.add_argument("--distinct", action="store_true",
                        help="send every chosen scenario with a header that changes every request (X-Request-Id), "
                             "reported as its name with a trailing ~; random-file scenarios are distinct already")
    parser.add_argument("--files-dir", type=Path,
                        help="where the test files go (the served root); with a URL, the server's root. "
                             "Default with --compare: ~/.cache/axon-bench/files")
    load = parser.add_argument_group("load")
    load.add_argument("--burst", type=float, help=f"seconds of the burst phase, 0 to skip (default {DEFAULTS['burst']:g})")
    load.add_argument("--sustained", type=float, help=f"seconds of the sustained phase, 0 to skip (default {DEFAULTS['sustained']:g})")
    load.add_argument("--rate", type=float,
                      help="also run a constant-rate phase at this many requests/s, latency measured from each "
                           "request's intended send time (no coordinated omission)")
    load.add_argument("--rate-fraction", type=float, metavar="F",
                      help="also run a constant-rate phase, each scenario at F (e.g. 0.7) of nginx's batches/s "
                           "measured in its closed-loop phase of this run (nginx runs first; with a URL: of that "
                           "server's own); the report sets p50, p99, p99.9 and the event loop's lag side by side")
    load.add_argument("--rate-duration", type=float, default=10.0, help="seconds of the constant-rate phase (default 10)")
    load.add_argument("--connections", "-c", type=int, help=f"concurrent connections (default {DEFAULTS['connections']})")
    load.add_argument("--threads", "-t", type=int, help=f"wrk threads (default {DEFAULTS['threads']})")
    load.add_argument("--timeout", type=float, default=2.0, help="seconds after which a response is a timeout error (default 2)")
    load.add_argument("--article", action="store_true",
                      help="the article's settings: 60 s burst, 600 s sustained, 50 connections, 10 threads")
    place = parser.add_argument_group("placement")
    place.add_argument("--workers", type=int, default=1, metavar="N",
                       help="worker processes of nginx and of the event-loop servers (default 1); with more than "
                            "one, each has its own listening socket (SO_REUSEPORT: Axon's --reuse-port, nginx's "
                            "reuseport)")
    place.add_argument("--count-workers", action="store_true",
                       help="count each worker's requests in every phase and set their sum beside the load "
                            "generator's count (Axon with --metrics, which turns its fixed answers off; nginx with "
                            "a buffered log line per request): a check that the workers share the load, at a cost")
    place.add_argument("--server-cpus",
                       help="CPUs the servers run on (taskset list; default 0, with --workers N: 0 to N-1)")
    place.add_argument("--load-cpus", default="1",
                       help="CPUs wrk runs on (default 1; on a 2-core machine with --workers 2 it shares CPU 1 with "
                            "a worker)")
    place.add_argument("--no-pin", action="store_true", help="do not pin servers or wrk to CPUs")
    place.add_argument("--no-restart", action="store_true",
                       help="with --compare: one server per target for all scenarios (default: a fresh one per scenario)")
    place.add_argument("--server-pid", type=int, action="append", default=[],
                       help="with a URL: a server process whose tree's peak RSS to report (repeatable)")
    place.add_argument("--name", default="server", help="with a URL: the target's name in the report")
    out = parser.add_argument_group("output")
    out.add_argument("--out", type=Path, help="directory for the report, JSON, chart, logs (default bench-results/<time>)")
    out.add_argument("--chart", default="chart.png", help="chart file name in --out, .png or .svg (default chart.png)")
    out.add_argument("--no-chart", action="store_true", help="skip the chart (no matplotlib needed)")
    out.add_argument("--cache-dir", type=Path, default=DEFAULT_CACHE, help="where the original's install is kept")
    out.add_argument("--from-json", type=Path, help="render the report and chart of a saved results.json; run nothing")


def settings_from(args: argparse.Namespace) -> runner.Settings:
    base = ARTICLE if args.article else DEFAULTS

    def pick(name: str) -> float:
        given = getattr(args, name)
        return given if given is not None else base[name]

    if args.workers < 1:
        raise ValueError(f"--workers must be 1 or more, not {args.workers}")
    server_cpus = args.server_cpus or ("0" if args.workers == 1 else f"0-{args.workers - 1}")
    for cpus in (server_cpus, args.load_cpus):
        if not args.no_pin:
            runner.parse_cpus(cpus)  # raises on a malformed list
    fraction = args.rate_fraction
    if fraction is not None:
        if args.rate is not None:
            raise ValueError("give --rate or --rate-fraction, not both")
        if not fraction > 0:
            raise ValueError(f"--rate-fraction must be above 0 (0.7: 70% of the reference's capacity), not {fraction:g}")
        if pick("burst") <= 0 and pick("sustained") <= 0:
            raise ValueError("--rate-fraction needs a closed-loop phase to take a fraction of: --burst or --sustained")
    return runner.Settings(
        burst=pick("burst"), sustained=pick("sustained"), rate=args.rate, rate_duration=args.rate_duration,
        rate_fraction=fraction, rate_reference=REFERENCE if args.compare else args.name,
        connections=int(pick("connections")), threads=int(pick("threads")), timeout=args.timeout,
        server_cpus=None if args.no_pin else server_cpus, load_cpus=None if args.no_pin else args.load_cpus,
        restart=not args.no_restart, workers=args.workers, count_workers=args.count_workers,
    )


def reference_first(chosen: list[targets.Target]) -> list[targets.Target]:
    """``chosen`` with the reference first: a rate fraction needs its capacity measured before."""
    if all(t.name != REFERENCE for t in chosen):
        raise ValueError(f"--rate-fraction is a fraction of {REFERENCE}'s capacity: add {REFERENCE} to --targets")
    return sorted(chosen, key=lambda t: t.name != REFERENCE)


def run(args: argparse.Namespace) -> int:
    if args.from_json:
        rs = ResultSet.load(args.from_json)
        return finish(rs, args.from_json.parent, args, rs.meta.get("descriptions", {}))
    if bool(args.url) == bool(args.compare):
        print("axon bench: give either a URL or --compare", file=sys.stderr)
        return 2
    try:
        settings = settings_from(args)
        chosen = scenarios.select(args.scenarios)
        if args.distinct:
            chosen = list(dict.fromkeys(scenarios.as_distinct(s) for s in chosen))
        chosen_targets = targets.select(args.targets) if args.compare else []
        if args.compare and settings.rate_fraction:
            chosen_targets = reference_first(chosen_targets)
    except ValueError as exc:
        print(f"axon bench: {exc}", file=sys.stderr)
        return 2
    out_dir = (args.out or Path("bench-results") / time.strftime("%Y%m%d-%H%M%S")).resolve()
    out_dir.mkdir(parents=True, exist_ok=True)
    descriptions = {t.name: t.describe(settings.workers) for t in chosen_targets}
    rs = ResultSet(meta={
        "command": "axon bench " + shlex.join(sys.argv[2:] if sys.argv[1:2] == ["bench"] else sys.argv[1:]),
        "started": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
        "machine": machine.describe(),
        "versions": machine.versions(),
        "settings": settings.describe(),
        "descriptions": descriptions,
    })
    pool = any(s.pool for s in chosen)  # 10,000 files: made once, and only when a scenario draws from them
    previous = procs.install_handlers()
    interrupted = False
    try:
        if args.compare:
            root = scenarios.ensure_files(args.files_dir or args.cache_dir / "files", pool=pool)
            for target in chosen_targets:
                runner.run_compare([target], chosen, settings, root, args.cache_dir.expanduser(), out_dir, rs)
                rs.save(out_dir / "results.json", targets.REFERENCES)  # a long run keeps what it has
        else:
            root = scenarios.ensure_files(args.files_dir, pool=pool) if args.files_dir else None
            runner.run_url(args.url, chosen, settings, args.server_pid, out_dir, rs, args.name, root=root)
    except (KeyboardInterrupt, procs.Interrupted) as exc:
        interrupted = True
        print(f"axon bench: interrupted ({exc or 'SIGINT'}); stopping servers, keeping what was measured",
              file=sys.stderr)
    finally:
        procs.stop_all()
        procs.restore_handlers(previous)
    code = finish(rs, out_dir, args, descriptions)
    if interrupted:
        return 130
    return code or (1 if any(r.status == "failed" for r in rs.results) else 0)


def finish(rs: ResultSet, out_dir: Path, args: argparse.Namespace, descriptions: dict[str, str]) -> int:
    """Write results.json, report.md and the chart; print the report."""
    rs.save(out_dir / "results.json", targets.REFERENCES)
    text = report.render(rs, targets.REFERENCES, descriptions)
    (out_dir / "report.md").write_text(text + "\n")
    summary = report.render(rs, targets.REFERENCES, descriptions, summary_only=True)
    (out_dir / "summary.md").write_text(summary + "\n")  # what BENCHMARKS.md shows
    print(text)
    if not args.no_chart and any(r.ok for r in rs.results):
        try:
            from . import chart

            path = chart.draw(rs, out_dir / args.chart)
            print(f"\nChart: {path}", file=sys.stderr)
        except ImportError:
            print("axon bench: no chart, matplotlib is not installed (pip install 'axon-stream[tools]')",
                  file=sys.stderr)
    print(f"Results: {out_dir}/results.json, {out_dir}/report.md, {out_dir}/summary.md", file=sys.stderr)
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="axon bench", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    configure(parser)
    return run(parser.parse_args(argv))


if __name__ == "__main__":
    sys.exit(main())
