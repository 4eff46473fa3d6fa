"""The event loop's lag over one phase: ``/metrics`` read before and after, the histogram's difference.

``axon serve`` times its own loop (axon.metrics.loop_lag) and shows the histogram at
``/metrics``; the bench's app serves it there even without ``--metrics``, counting nothing
(axon.bench.echo_app). A server without it (nginx, another runtime) answers otherwise, and its
phases have no lag. From the difference: the maximum and the 99th percentile, each the upper
bound of the bucket it falls in (never an underestimate; ``inf`` past the largest bound).
"""

from __future__ import annotations

import http.client
import math
import re
from urllib.parse import urlsplit

from .wrk import bucket_percentile

NAME = "axon_event_loop_lag_seconds"
_BUCKET = re.compile(rf'^{NAME}_bucket\{{le="([^"]+)"\}} (\S+)$', re.MULTILINE)

#: Lag samples by bucket: the bucket's upper bound as the text shows it ("0.005", "+Inf") -> count.
Histogram = dict[str, float]


def scrape(base_url: str, path: str = "/metrics", timeout: float = 5.0) -> Histogram | None:
    """The lag histogram ``base_url`` shows now, cumulative as in the text; None if it shows none."""
    parts = urlsplit(base_url)
    conn = http.client.HTTPConnection(parts.hostname or "127.0.0.1", parts.port, timeout=timeout)
    try:
        conn.request("GET", path)
        response = conn.getresponse()
        body = response.read()
    except OSError:
        return None
    finally:
        conn.close()
    if response.status != 200:
        return None
    return parse(body.decode("utf-8", "replace"))


def parse(text: str) -> Histogram | None:
    found = {le: float(count) for le, count in _BUCKET.findall(text)}
    return found or None


def between(before: Histogram | None, after: Histogram | None) -> Histogram | None:
    """The samples taken between two scrapes, by bucket (not cumulative); None without both."""
    if before is None or after is None:
        return None
    bounds = sorted(after, key=_bound)
    out: Histogram = {}
    below = 0.0
    for le in bounds:
        cumulative = after[le] - before.get(le, 0.0)
        out[le] = cumulative - below
        below = cumulative
    return out


def maximum(samples: Histogram) -> float | None:
    """Seconds: the upper bound of the highest bucket with a sample (None with no sample)."""
    filled = [_bound(le) for le, n in samples.items() if n > 0]
    return max(filled) if filled else None


def percentile(samples: Histogram, p: float) -> float | None:
    """Seconds: the upper bound of the bucket the ``p``-th percentile falls in (None with no sample)."""
    if sum(samples.values()) <= 0:
        return None
    return bucket_percentile(sorted((_bound(le), n) for le, n in samples.items()), p)


def _bound(le: str) -> float:
    return math.inf if le == "+Inf" else float(le)
