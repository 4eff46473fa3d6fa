"""Run wrk and read what it measured.

The numbers come from the JSON line our Lua ``done()`` prints (exact counters, latencies in
microseconds). Two figures exist only in wrk's text -- the "+/- Stdev" columns, the share of
samples within one standard deviation, which the article reports as "Std Dev %" -- and are read
from it. Nothing here decides how hard to push; a :class:`Load` says that.
"""

from __future__ import annotations

import json
import math
import re
import shutil
import subprocess
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

from . import lua, procs
from .scenarios import HttpRequest

WRK = "wrk"
#: A constant-rate phase whose generator sent less than this share of the rate asked is not valid:
#: its requests waited in the generator (behind a server too slow for the rate, or a generator too
#: slow to send it), so its latencies say how far behind the schedule fell, not how the server
#: answers at that rate.
HELD = 0.95


@dataclass(frozen=True)
class Load:
    """One wrk run: how long, how many connections and threads, and (paced) at what rate."""

    duration: float  # seconds
    connections: int = 50
    threads: int = 2
    timeout: float = 2.0  # seconds; slower responses count as timeout errors, as in wrk
    rate: float | None = None  # requests/s in total; None: as fast as the server answers

    def __post_init__(self) -> None:
        if self.duration <= 0 or self.connections <= 0 or self.threads <= 0:
            raise ValueError("duration, connections and threads must be positive")
        if self.connections % self.threads:
            # wrk gives each thread connections // threads and silently drops the remainder.
            raise ValueError(f"{self.connections} connections do not divide among {self.threads} threads")


@dataclass
class Stats:
    mean: float = 0.0
    stdev: float = 0.0
    max: float = 0.0
    within_stdev: float | None = None  # percent of samples within mean +/- 1 stdev
    percentiles: dict[str, float] = field(default_factory=dict)  # "50" -> value, "99.9" -> value


@dataclass
class WrkResult:
    duration: float  # seconds wrk actually ran
    requests: int
    bytes: int
    errors: dict[str, int]  # connect, read, write, timeout, status (= non-2xx/3xx responses)
    latency: Stats  # milliseconds
    thread_rps: Stats  # requests/s per wrk thread, sampled every 100 ms
    paced_rate: float | None = None  # the rate asked for, in a constant-rate run
    raw: str = ""  # wrk's output as printed
    sent: int | None = None  # requests sent, in a constant-rate run (requests counts those answered)
    # In a constant-rate run: how late the generator sent what it could send on time (its own
    # lag, ms: "99" and "max"), which no latency is charged with.
    send_lag: dict[str, float] | None = None

    @property
    def rps(self) -> float:
        return self.requests / self.duration if self.duration else 0.0

    @property
    def transfer(self) -> float:
        """Bytes per second read, headers included (as wrk counts)."""
        return self.bytes / self.duration if self.duration else 0.0

    @property
    def sent_rate(self) -> float | None:
        """Requests/s the generator sent, in a constant-rate run (None otherwise)."""
        if self.paced_rate is None:
            return None
        sent = self.requests if self.sent is None else self.sent
        return sent / self.duration if self.duration else 0.0

    @property
    def held(self) -> bool:
        """Whether the rate asked was sent (at least :data:`HELD` of it); True when none was asked."""
        sent = self.sent_rate
        return sent is None or sent >= HELD * (self.paced_rate or 0.0)

    @property
    def socket_errors(self) -> int:
        return sum(self.errors.get(k, 0) for k in ("connect", "read", "write", "timeout"))


def command(base_url: str, load: Load, script: Path) -> list[str]:
    return [
        WRK, "-t", str(load.threads), "-c", str(load.connections), "-d", f"{_seconds(load.duration)}s",
        "--timeout", f"{_seconds(load.timeout)}s", "--latency", "-s", str(script), base_url,
    ]


def run(base_url: str, request: HttpRequest, load: Load, cpus: str | None = None) -> WrkResult:
    """Run wrk against ``base_url`` (scheme, host and port; the script supplies the target)."""
    if shutil.which(WRK) is None:
        raise FileNotFoundError("wrk is not installed (Debian/Ubuntu: apt-get install wrk)")
    if load.rate is None:
        source = lua.peak_script(request)
    else:
        source = lua.paced_script(request, load.rate, load.connections, load.threads)
    with tempfile.TemporaryDirectory(prefix="axon-bench-wrk-") as tmp:
        script = Path(tmp) / "bench.lua"
        script.write_text(source)
        argv = procs.wrap(command(base_url, load, script), cpus)
        # Its own session, like the servers: an interrupt is ours to handle, and we stop it.
        proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                                start_new_session=True)
        procs.track(proc)
        try:
            out, err = proc.communicate(timeout=load.duration + load.timeout + 30)
        finally:
            procs.stop(proc, grace=1.0)
    if proc.returncode != 0 or lua.MARKER not in out:
        raise RuntimeError(f"wrk failed (exit {proc.returncode}): {(err or out).strip()[-500:]}")
    return parse(out)


def parse(output: str) -> WrkResult:
    """A :class:`WrkResult` from wrk's output with our ``done()`` JSON line in it."""
    data = None
    for line in output.splitlines():
        if line.startswith(lua.MARKER):
            data = json.loads(line[len(lua.MARKER):])
    if data is None:
        raise ValueError("no axon-bench JSON line in wrk's output (was the script loaded?)")
    within = _within_stdev(output)
    lat = data["latency_us"]
    latency = Stats(
        mean=_ms(lat["mean"]), stdev=_ms(lat["stdev"]), max=_ms(lat["max"]), within_stdev=within.get("Latency"),
        percentiles={_pkey(k): _ms(v) for k, v in lat.get("percentiles", {}).items()},
    )
    rps = data["thread_rps"]
    thread_rps = Stats(mean=rps["mean"] or 0.0, stdev=rps["stdev"] or 0.0, max=rps["max"] or 0.0,
                       within_stdev=within.get("Req/Sec"))
    paced = data.get("paced")
    if paced is not None:
        # wrk's own latency counts from when a request was actually sent; the paced histogram
        # counts from when it was due, which is the figure a constant-rate run is for.
        latency = paced_latency(paced)
    return WrkResult(
        duration=data["duration_us"] / 1e6, requests=int(data["requests"]), bytes=int(data["bytes"]),
        errors={k: int(v) for k, v in data["errors"].items()}, latency=latency, thread_rps=thread_rps,
        paced_rate=None if paced is None else float(paced["rate"]), raw=output,
        sent=None if paced is None or "sent" not in paced else int(paced["sent"]),
        send_lag=None if paced is None or "late_buckets" not in paced else send_lag(paced),
    )


def paced_latency(paced: dict) -> Stats:
    """Latency stats (ms) from the paced script's log-bucketed histogram."""
    count = int(paced["count"])
    if count == 0:
        return Stats()
    mean = paced["sum_us"] / count
    variance = max(0.0, (paced["sumsq_us"] - count * mean * mean) / max(1, count - 1))
    buckets = {int(b): int(c) for b, c in paced["buckets"].items()}
    step = float(paced["step"])
    percentiles = {
        _pkey(p): _ms(min(histogram_percentile(buckets, step, p), paced["max_us"])) for p in lua.PERCENTILES
    }
    return Stats(mean=_ms(mean), stdev=_ms(math.sqrt(variance)), max=_ms(paced["max_us"]), percentiles=percentiles)


def send_lag(paced: dict) -> dict[str, float]:
    """The generator's own lag (ms), its 99th percentile and maximum, from the paced script's
    histogram of how late it sent what it could send on time."""
    buckets = {int(b): int(c) for b, c in paced["late_buckets"].items()}
    if not buckets:
        return {"99": 0.0, "max": 0.0}
    p99 = min(histogram_percentile(buckets, float(paced["step"]), 99), paced["late_max_us"])
    return {"99": _ms(p99), "max": _ms(paced["late_max_us"])}


def histogram_percentile(buckets: dict[int, int], step: float, p: float) -> float:
    """The ``p``-th percentile of a histogram whose bucket ``b`` holds values in
    ``[step**(b-1), step**b)``."""
    return bucket_percentile(sorted((step**b, n) for b, n in buckets.items()), p)


def bucket_percentile(counts: list[tuple[float, float]], p: float) -> float:
    """The ``p``-th percentile of samples counted by bucket, ``(upper bound, count)`` in rising
    order: the upper bound of the bucket it falls in, so never an underestimate; 0 with none."""
    total = sum(n for _, n in counts)
    if total <= 0:
        return 0.0
    rank = max(1, math.ceil(p / 100 * total))
    seen = 0.0
    for bound, n in counts:
        seen += n
        if seen >= rank:
            return bound
    return counts[-1][0]


_STATS_LINE = re.compile(r"^\s*(Latency|Req/Sec)\s+\S+\s+\S+\s+\S+\s+([\d.]+)%\s*$", re.MULTILINE)


def _within_stdev(output: str) -> dict[str, float]:
    return {name: float(value) for name, value in _STATS_LINE.findall(output)}


def _pkey(p: float | str) -> str:
    """One spelling for a percentile key: 50 -> "50", 99.9 -> "99.9"."""
    value = float(p)
    return str(int(value)) if value.is_integer() else str(value)


def _ms(us: float | None) -> float:
    return 0.0 if us is None else us / 1000.0


def _seconds(value: float) -> int:
    return max(1, round(value))
