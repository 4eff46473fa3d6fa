"""Run the matrix: for each target, for each scenario, a burst phase, a sustained phase and
optionally a constant-rate phase, with the server's peak memory sampled throughout each and its
event loop's lag read before and after each (:mod:`.loop_lag`).

The constant rate is either given (``--rate``) or a fraction of a reference's closed-loop
capacity on the same scenario in the same run (``--rate-fraction``: nginx's, measured first), so
that every target is offered the same load and their tails compare.

The article's order: a burst run (its 1-minute "warmup"), then a sustained run on the same server.
By default each scenario gets a freshly started server, as seed 002 restarted its daemons between
runs, so that one scenario's leftovers (caches, grown heaps) do not count against the next and
each scenario's peak RSS is its own.
"""

from __future__ import annotations

import http.client
import os
import sys
import tempfile
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, replace
from pathlib import Path
from urllib.parse import urlsplit

from . import loop_lag, per_worker, procs, wrk
from .memory import PeakRSS
from .results import Result, ResultSet, value
from .scenarios import AXON, Dialect, HttpRequest, Scenario, request_for
from .targets import Context, Target


@dataclass(frozen=True)
class Settings:
    burst: float = 3.0  # seconds; 0 skips the phase
    sustained: float = 10.0
    rate: float | None = None  # batches/s for the constant-rate phase; None skips it
    # Or: that fraction of the reference's closed-loop batches/s on each scenario, in this run.
    rate_fraction: float | None = None
    rate_reference: str = "nginx"
    rate_duration: float = 10.0
    connections: int = 50
    threads: int = 2
    timeout: float = 2.0
    server_cpus: str | None = "0"
    load_cpus: str | None = "1"
    restart: bool = True  # a fresh server per scenario
    workers: int = 1  # processes of each event-loop server and of nginx
    count_workers: bool = False  # count each worker's requests in every phase (per_worker)

    def phases(self) -> list[tuple[str, wrk.Load]]:
        out = []
        if self.burst > 0:
            out.append(("burst", wrk.Load(self.burst, self.connections, self.threads, self.timeout)))
        if self.sustained > 0:
            out.append(("sustained", wrk.Load(self.sustained, self.connections, self.threads, self.timeout)))
        if self.rate or self.rate_fraction:
            # With a fraction, the rate is the scenario's own: set per scenario (run_scenario).
            out.append(("rate", wrk.Load(self.rate_duration, self.connections, self.threads, self.timeout,
                                         self.rate or 1.0)))
        return out

    def describe(self) -> dict[str, str]:
        out = {"connections": str(self.connections), "wrk threads": str(self.threads), "timeout": f"{self.timeout:g}s"}
        for phase, load in self.phases():
            if phase == "rate" and self.rate_fraction:
                out[phase] = f"{load.duration:g}s at {self.rate_fraction:g} of {self.rate_reference}'s capacity"
            else:
                out[phase] = f"{load.duration:g}s" + (f" at {load.rate:g} req/s" if load.rate else "")
        if self.workers > 1:
            out["server workers"] = f"{self.workers}, each with its own listening socket (SO_REUSEPORT)"
        if self.count_workers:
            out["server workers"] = out.get("server workers", "1") + ", requests counted per worker"
        if self.server_cpus or self.load_cpus:
            out["server CPUs"] = self.server_cpus or "any"
            out["load CPUs"] = self.load_cpus or "any"
            if self.server_cpus and self.load_cpus and parse_cpus(self.server_cpus) & parse_cpus(self.load_cpus):
                out["load CPUs"] += " (shared with the server)"
        return out


Progress = Callable[[str], None]


def _say(text: str) -> None:
    print(text, file=sys.stderr, flush=True)


def probe(base_url: str, request: HttpRequest, timeout: float = 10.0) -> int:
    """Send ``request`` once and return the status: a scenario whose answer is not what it
    expects is not measured (an error page is no benchmark): skipped when the server lacks
    the route (the echo), failed when it lacks the files (:func:`refused_files`)."""
    parts = urlsplit(base_url)
    conn = http.client.HTTPConnection(parts.hostname or "127.0.0.1", parts.port, timeout=timeout)
    try:
        conn.request(request.method, request.target, body=request.body or None, headers=dict(request.headers))
        response = conn.getresponse()
        response.read()
        return response.status
    finally:
        conn.close()


def refused_files(base_url: str, request: HttpRequest, scenario: Scenario, status: int, root: Path | None) -> str:
    """What a probe that did not find the scenario's files says: the URL it asked, the file,
    and where the bench put the files (which must be the server's root)."""
    where = (f"the bench put the files under {root}, which must be the server's root" if root is not None
             else "give --files-dir: the server's root, where the bench puts its files")
    return (f"GET {base_url}{request.target} answered {status}, expected {scenario.expect_status}: "
            f"the server has no {scenario.files[0]} under its root ({where})")


def run_scenario(base_url: str, target: str, dialect: Dialect, scenario: Scenario, settings: Settings,
                 pids: list[int], raw_dir: Path | None = None, say: Progress = _say, *,
                 users: bool = False, root: Path | None = None, earlier: list[Result] | None = None,
                 workers: Callable[[], per_worker.Counts] | None = None) -> list[Result]:
    """Every phase of one scenario against a server that is already up. ``users``: the server
    is the user's (a URL), serving ``root`` (``--files-dir``; None if not given), and a probe
    that finds none of the scenario's files fails the run. A server the bench started on its
    own files that answers a probe otherwise than expected has the scenario skipped.
    ``earlier``: the run's results so far, where a rate fraction finds its reference's capacity.
    ``workers``: reads the server's requests per worker process, counted over each phase."""
    phases = settings.phases()
    request = request_for(scenario, dialect)
    if request is None:
        return [Result(target, scenario.name, phase, "n/a", f"{target} has no equivalent") for phase, _ in phases]
    try:
        status = probe(base_url, request)
    except OSError as exc:
        return [Result(target, scenario.name, phase, "failed", f"probe: {exc}") for phase, _ in phases]
    if status == 404 and scenario.files and users:
        note = refused_files(base_url, request, scenario, status, root)
        say(f"[{target}] {scenario.name}: failed, {note}")
        return [Result(target, scenario.name, phase, "failed", note) for phase, _ in phases]
    if status != scenario.expect_status:
        note = f"probe answered {status}, expected {scenario.expect_status}"
        say(f"[{target}] {scenario.name}: skipped, {note}")
        return [Result(target, scenario.name, phase, "skipped", note) for phase, _ in phases]
    out: list[Result] = []
    for phase, load in phases:
        if phase == "rate" and settings.rate_fraction:
            reference = settings.rate_reference
            capacity = closed_loop_capacity([*(earlier or ()), *out], reference, scenario.name)
            if not capacity:
                note = f"no closed-loop figure of {reference} for {scenario.name} in this run to take a fraction of"
                out.append(Result(target, scenario.name, phase, "skipped", note))
                say(f"[{target}] {scenario.name} {phase}: skipped, {note}")
                continue
            load = replace(load, rate=settings.rate_fraction * capacity)
        if load.rate is not None and request.per_batch > 1:
            # Offer a static server the same batches per second: n of its requests per batch.
            load = replace(load, rate=load.rate * request.per_batch)
        lag_before = loop_lag.scrape(base_url)
        counts_before = per_worker.settled(workers) if workers else None
        with PeakRSS(pids) as peak:
            try:
                measured = wrk.run(base_url, request, load, settings.load_cpus)
            except (RuntimeError, OSError, ValueError) as exc:
                out.append(Result(target, scenario.name, phase, "failed", str(exc)))
                say(f"[{target}] {scenario.name} {phase}: failed: {exc}")
                continue
        lag = loop_lag.between(lag_before, loop_lag.scrape(base_url))
        counts = None if workers is None else per_worker.between(counts_before or {}, per_worker.settled(workers))
        if raw_dir is not None:
            try:  # wrk's own words, for anyone who doubts a figure; losing them loses no figure
                raw_dir.mkdir(parents=True, exist_ok=True)
                (raw_dir / f"{target}-{scenario.name}-{phase}.txt").write_text(measured.raw)
            except OSError as exc:
                say(f"[{target}] could not keep wrk's output: {exc}")
        result = Result(target, scenario.name, phase, per_batch=request.per_batch, wrk=measured, peak_rss=peak.bytes,
                        loop_lag=lag, per_worker=counts)
        out.append(result)
        say(_line(result))
    return out


def _line(r: Result) -> str:
    w = r.wrk
    assert w is not None
    rss = "" if r.peak_rss is None else f", peak RSS {r.peak_rss / 2**20:.0f} MB"
    errors = f", {w.socket_errors} socket errors" if w.socket_errors else ""
    status = f", {w.errors.get('status', 0)} non-2xx" if w.errors.get("status") else ""
    lag_max, lag_p99 = value(r, "lag_max"), value(r, "lag_p99")
    lag = "" if lag_max is None else f", loop lag max {lag_max:.2f} ms, p99 {lag_p99:.2f} ms"
    if r.per_worker is not None:
        lag += f", requests per worker {' + '.join(str(n) for n in r.per_worker.values())}"
    paced = ""
    if w.paced_rate is not None:
        paced = f", sent {w.sent_rate:.0f} of {w.paced_rate:.0f} req/s asked"
        if not w.held:
            paced += " (not valid: the rate was not sent, its latencies are of requests queued in wrk)"
    return (f"[{r.target}] {r.scenario} {r.phase}: {w.rps:.0f} req/s, {w.transfer / 2**20:.1f} MB/s, "
            f"avg {w.latency.mean:.2f} ms, p99 {w.latency.percentiles.get('99', 0):.2f} ms{errors}{status}{rss}{lag}"
            f"{paced}")


def closed_loop_capacity(results: list[Result], target: str, scenario: str) -> float | None:
    """``target``'s batches/s on ``scenario`` as fast as it answers: its sustained phase, else its
    burst; None if neither was measured."""
    found = {r.phase: r for r in results if (r.target, r.scenario) == (target, scenario) and r.ok}
    measured = found.get("sustained") or found.get("burst")
    return None if measured is None else value(measured, "rps", per_batch=True)


@contextmanager
def started(target: Target, ctx: Context, settings: Settings, log_dir: Path) -> Iterator[tuple[str, list[int]]]:
    """``target`` running and answering its health check; yields (base URL, its process ids)."""
    log_dir.mkdir(parents=True, exist_ok=True)
    with procs.Group(log_dir, settings.server_cpus) as group:
        for command in target.commands(ctx):
            group.start(command)
        base = f"http://{ctx.host}:{ctx.port}"
        try:
            procs.wait_ready(base + "/api/health", group)
        except (TimeoutError, RuntimeError) as exc:
            raise RuntimeError(f"{target.name} did not start: {exc} (logs in {log_dir})") from None
        yield base, group.pids


def run_target(target: Target, scenarios: list[Scenario], settings: Settings, root: Path, cache_dir: Path,
               out_dir: Path, say: Progress = _say, earlier: list[Result] | None = None) -> list[Result]:
    """Start ``target`` (once, or once per scenario) and run ``scenarios`` against it
    (``earlier``: the run's results so far)."""
    missing = target.missing()
    if missing:
        note = f"not installed: {', '.join(missing)}"
        say(f"[{target.name}] skipped, {note}")
        return [Result(target.name, s.name, p, "skipped", note) for s in scenarios for p, _ in settings.phases()]
    raw_dir = out_dir / "raw"
    results: list[Result] = []
    if settings.restart:
        batches = [[s] for s in scenarios]
    else:  # the cold CRC scenarios need a server of their own (its app keeps no CRC)
        batches = [b for b in ([s for s in scenarios if not s.cold], [s for s in scenarios if s.cold]) if b]
    with tempfile.TemporaryDirectory(prefix=f"axon-bench-{target.name}-") as tmp:
        for i, batch in enumerate(batches):
            ctx = Context(root, Path(tmp) / f"run{i}", procs.free_port(), cache_dir, workers=settings.workers,
                          cold_crc=batch[0].cold, count_workers=settings.count_workers)
            try:
                with started(target, ctx, settings, out_dir / "logs" / target.name) as (base, pids):
                    for scenario in batch:
                        results += run_scenario(base, target.name, target.dialect, scenario, settings, pids, raw_dir,
                                                say, earlier=earlier, workers=per_worker.reader(target.name, ctx))
            except (RuntimeError, OSError, TimeoutError) as exc:
                say(f"[{target.name}] failed: {exc}")
                done = {(r.scenario, r.phase) for r in results}
                results += [Result(target.name, s.name, p, "failed", str(exc))
                            for s in batch for p, _ in settings.phases() if (s.name, p) not in done]
    return results


def run_compare(targets: list[Target], scenarios: list[Scenario], settings: Settings, root: Path,
                cache_dir: Path, out_dir: Path, results: ResultSet, say: Progress = _say) -> ResultSet:
    """Every target, one after another on this machine; results are added to ``results`` as they come."""
    before = os.sched_getaffinity(0)
    if settings.load_cpus:
        # Keep this process (it samples memory, waits on wrk) off the server's CPUs too.
        os.sched_setaffinity(0, parse_cpus(settings.load_cpus))
    try:
        for target in targets:
            say(f"[{target.name}] {target.describe(settings.workers)}")
            for result in run_target(target, scenarios, settings, root, cache_dir, out_dir, say, results.results):
                results.add(result)
    finally:
        os.sched_setaffinity(0, before)
    return results


def run_url(base_url: str, scenarios: list[Scenario], settings: Settings, pids: list[int], out_dir: Path,
            results: ResultSet, name: str = "server", dialect: Dialect | None = None, say: Progress = _say,
            root: Path | None = None) -> ResultSet:
    """The matrix against a server someone else started (memory only if its ``pids`` are given),
    whose root is ``root`` (``--files-dir``, None if not given)."""
    raw_dir = out_dir / "raw"
    base = base_url.rstrip("/")
    for scenario in scenarios:
        for result in run_scenario(base, name, dialect or AXON, scenario, settings, pids, raw_dir, say, users=True,
                                   root=root, earlier=results.results):
            results.add(result)
    return results


def parse_cpus(spec: str) -> set[int]:
    """taskset's list syntax: ``1``, ``0,2``, ``2-3``."""
    cpus: set[int] = set()
    for part in spec.split(","):
        part = part.strip()
        if not part:
            continue
        if "-" in part:
            lo, hi = part.split("-", 1)
            cpus.update(range(int(lo), int(hi) + 1))
        else:
            cpus.add(int(part))
    if not cpus:
        raise ValueError(f"no CPUs in {spec!r}")
    return cpus
