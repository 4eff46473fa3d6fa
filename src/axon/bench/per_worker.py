"""Requests per worker process, counted by the server, to check that a multi-worker run's figures
add up: the workers' counts over a phase should sum to what the load generator counted.

With ``axon bench --workers N --count-workers`` each server says which worker answered:
Axon's workers each keep their counts in a file of their own (``--metrics`` with
``AXON_METRICS_DIR``: ``<pid>.metrics``, read here with :mod:`axon.metrics.files`), and nginx
writes a line per request, ``<worker pid> <uri>``, to a buffered log (``nginx.WORKER_LOG_FORMAT``).
Counting has a cost (Axon's metrics also turn its fixed answers off), so a run counts only when
asked, to check that the workers share the load and that the figures add up. Counts are read
before and after a phase; each reader's counts lag by at most :data:`SETTLE`
seconds (Axon's workers publish four times a second, nginx flushes its log every second), so the
after-count waits that long. The bench's own ``/metrics`` reads are not requests of the phase:
Axon leaves them out of its counts, and nginx's are skipped here.
"""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Callable
from pathlib import Path

from ..metrics.files import read_file
from .targets import Context

#: Seconds after a phase before its counts are complete (nginx flushes its log buffer every 1 s).
SETTLE = 1.3
#: Requests by worker process id.
Counts = dict[str, int]


def axon_counts(directory: Path) -> Counts:
    """Requests each Axon worker has answered, from the files in ``directory`` (one a worker)."""
    out: Counts = {}
    for path in sorted(directory.glob("*.metrics")):
        try:
            values = read_file(path)
        except OSError:
            continue
        # "r METHOD STATUS BUCKET": every request counted once, in the bucket of its duration.
        out[path.stem] = round(sum(v for k, v in values.items() if k.startswith("r ")))
    return out


def nginx_counts(log: Path, skip: tuple[str, ...] = ("/metrics",)) -> Counts:
    """Requests each nginx worker has logged to ``log`` (``<pid> <uri>`` a line), but ``skip``'s."""
    counts: Counter[str] = Counter()
    try:
        text = log.read_text(errors="replace")
    except FileNotFoundError:
        return {}
    for line in text.splitlines():
        pid, _, uri = line.partition(" ")
        if pid and uri not in skip:
            counts[pid] += 1
    return dict(counts)


def reader(target: str, ctx: Context) -> Callable[[], Counts] | None:
    """How to read ``target``'s counts per worker, or None when they are not counted (or it has no such count)."""
    if not ctx.count_workers:
        return None
    if target == "nginx":
        return lambda: nginx_counts(ctx.worker_log)
    if target.startswith("axon"):
        return lambda: axon_counts(ctx.metrics_dir)
    return None


def between(before: Counts, after: Counts) -> Counts:
    """Each worker's requests between two readings (a worker that started between them counts from 0)."""
    return {pid: n - before.get(pid, 0) for pid, n in sorted(after.items()) if n - before.get(pid, 0) > 0}


def settled(read: Callable[[], Counts]) -> Counts:
    """``read()`` once the phase's last requests are in the counts."""
    time.sleep(SETTLE)
    return read()
