"""The Prometheus text exposition format (version 0.0.4) of a server's summed counts.

Pure: sample keys and their values in (as :mod:`.files` names them), text out.
"""

from __future__ import annotations

from .files import BYTES, FILES, SUM
from .loop_lag import BUCKETS as LAG_BUCKETS
from .loop_lag import INTERVAL as LAG_INTERVAL
from .loop_lag import LAG_SUM

#: The Prometheus text exposition format, version 0.0.4.
CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"

_HELP = {
    "axon_requests_total": ("counter", "Responses sent, by method and status."),
    "axon_errors_total": ("counter", "Error responses (status >= 400), by status and Axon's error code."),
    "axon_response_bytes_total": ("counter", "Body bytes planned (Content-Length); 0 for HEAD and 304."),
    "axon_files_total": ("counter", "Files opened to serve responses (distinct files per response)."),
    "axon_requests_in_flight": ("gauge", "Requests being handled now (the transfer of a body excluded)."),
    "axon_request_duration_seconds": ("histogram", "Time to handle a request and plan its response (transfer excluded)."),
}
_LAG = "axon_event_loop_lag_seconds"
_LAG_HELP = f"How late a worker's event loop ran a timer it sets every {LAG_INTERVAL:g} s: the time the loop was held up."

#: A source's own counters (sample key ``"c NAME"``), as ``axon_NAME_total``.
_SOURCE_HELP = {
    "object_disk_hits": "Objects sent from the disk tier's files.",
    "object_disk_misses": "Objects looked up in the disk tier and not found there.",
    "object_disk_bytes_filled": "Bytes written into the disk tier's files.",
    "object_disk_evictions": "Files the disk tier deleted to stay within its size.",
    "object_disk_fill_failures": "Fills of the disk tier abandoned (full disk, store failure, bad checksum).",
}


def render_text(values: dict[str, float], bounds: tuple[float, ...]) -> bytes:
    """``values`` (sample keys, with ``"in_flight"``), with the histogram's upper ``bounds``,
    as the text a scrape reads."""
    requests: dict[tuple[str, str], float] = {}
    errors: dict[tuple[str, str], float] = {}
    buckets = [0.0] * (len(bounds) + 1)
    for key, value in values.items():
        kind, _, rest = key.partition(" ")
        if kind == "r":
            method, status, bucket = rest.split(" ")
            requests[(method, status)] = requests.get((method, status), 0) + value
            if int(bucket) < len(buckets):
                buckets[int(bucket)] += value
        elif kind == "e":
            status, code = rest.split(" ", 1)
            errors[(status, code)] = value
        # "l": the loop lag's, rendered by render_lag
    samples: dict[str, list[str]] = {name: [] for name in _HELP}
    for (method, status), value in sorted(requests.items()):
        samples["axon_requests_total"].append(f'axon_requests_total{{method="{method}",status="{status}"}} {_number(value)}')
    for (status, code), value in sorted(errors.items()):
        samples["axon_errors_total"].append(f'axon_errors_total{{status="{status}",code="{_label(code)}"}} {_number(value)}')
    samples["axon_response_bytes_total"].append(f"axon_response_bytes_total {_number(values.get(BYTES, 0))}")
    samples["axon_files_total"].append(f"axon_files_total {_number(values.get(FILES, 0))}")
    samples["axon_requests_in_flight"].append(f"axon_requests_in_flight {_number(values.get('in_flight', 0))}")
    count = 0.0
    histogram = samples["axon_request_duration_seconds"]
    for bound, n in zip((*bounds, float("inf")), buckets):
        count += n
        histogram.append(f'axon_request_duration_seconds_bucket{{le="{_number(bound)}"}} {_number(count)}')
    histogram.append(f"axon_request_duration_seconds_sum {_number(values.get(SUM, 0.0))}")
    histogram.append(f"axon_request_duration_seconds_count {_number(count)}")
    lines = []
    for name, (kind, help_text) in _HELP.items():
        lines += [f"# HELP {name} {help_text}", f"# TYPE {name} {kind}", *samples[name]]
    for key, value in sorted(values.items()):
        if key.startswith("c "):
            stem = key[2:]
            name = f"axon_{stem}_total"
            lines += [f"# HELP {name} {_SOURCE_HELP.get(stem, 'A count of the source.')}", f"# TYPE {name} counter",
                      f"{name} {_number(value)}"]
    return ("\n".join(lines) + "\n").encode("utf-8") + render_lag(values)


def render_lag(values: dict[str, float]) -> bytes:
    """The event-loop lag histogram of ``values`` (sample keys ``"l <bucket>"`` and ``"l sum"``,
    summed over processes), as text; nothing when no process timed a loop (WSGI, ASGI)."""
    if LAG_SUM not in values:
        return b""
    lines = [f"# HELP {_LAG} {_LAG_HELP}", f"# TYPE {_LAG} histogram"]
    count = 0.0
    for i, bound in enumerate((*LAG_BUCKETS, float("inf"))):
        count += values.get(f"l {i}", 0)
        lines.append(f'{_LAG}_bucket{{le="{_number(bound)}"}} {_number(count)}')
    lines.append(f"{_LAG}_sum {_number(values[LAG_SUM])}")
    lines.append(f"{_LAG}_count {_number(count)}")
    return ("\n".join(lines) + "\n").encode("utf-8")


def _label(value: str) -> str:
    return value.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")


def _number(value: float) -> str:
    if value == float("inf"):
        return "+Inf"
    if value == int(value) and abs(value) < 2**53:
        return str(int(value))
    return repr(value)
