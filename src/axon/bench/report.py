"""Markdown reports: the article's tables per target and phase, and side-by-side summaries.

The article puts scenarios in columns and metrics in rows, grouped in sections (Performance
Results, Socket Errors, Latency Statistics, Latency Distribution, RPS Variance); we keep that
layout and add the rows its wrk runs could not show (non-2xx responses, 99.9th percentile, peak
RSS). With reference targets in the run, each figure is followed by its ratio to them.
"""

from __future__ import annotations

import math

from ..metrics.loop_lag import INTERVAL as LAG_INTERVAL
from .results import METRICS, RSS_LABEL, Result, ResultSet, ratio, value
from .scenarios import Scenario
from .wrk import HELD

PHASE_TITLES = {
    "burst": "burst",
    "sustained": "sustained",
    "rate": "constant rate (latency from the intended send time)",
}
SHORT = {"nginx": "n", "original": "o"}
LAG_ROWS = [("lag_max", "Maximum"), ("lag_p99", "99th Percentile")]
# The summary: the figures a reader compares first.
SUMMARY = [
    ("rps", "Requests/s (batches)"),
    ("transfer", "Transfer (MB/s)"),
    ("lat_mean", "Average latency (ms)"),
    ("p99", "99th percentile latency (ms)"),
    ("errors", "Errors (socket errors + unexpected statuses)"),
    ("rss", RSS_LABEL),
]


def fmt(kind: str, x: float | None) -> str:
    if x is None or math.isnan(x):
        return "–"
    if kind == "count":
        return f"{x:.0f}"
    if kind == "bytes":
        return _binary(x)
    if kind == "ratio":
        return f"{x:.2f}" if x < 100 else f"{x:.0f}"
    return f"{x:.2f}"


def _binary(n: float) -> str:
    """Bytes as wrk prints them: 792.39MB, 5.69GB (powers of 1024)."""
    for unit in ("B", "KB", "MB", "GB", "TB"):
        if abs(n) < 1024 or unit == "TB":
            return f"{n:.2f}{unit}" if unit != "B" else f"{n:.0f}B"
        n /= 1024
    return f"{n:.2f}TB"  # pragma: no cover


def _row(cells: list[str]) -> str:
    return "| " + " | ".join(cells) + " |"


def _header(first: str, columns: list[str]) -> list[str]:
    return [_row([first, *columns]), _row(["---"] + ["--:"] * len(columns))]


def _with_ratios(text: str, rs: ResultSet, result: Result, key: str, references: tuple[str, ...]) -> str:
    parts = []
    for ref in references:
        if ref == result.target or ref not in rs.targets:
            continue
        r = ratio(result, rs.find(ref, result.scenario, result.phase), key)
        parts.append(f"{SHORT.get(ref, ref)} {fmt('ratio', r)}")
    return f"{text} ({', '.join(parts)})" if parts else text


def article_table(rs: ResultSet, target: str, phase: str, scenarios: list[Scenario],
                  references: tuple[str, ...] = ()) -> str:
    """One target, one phase: the article's table for ``scenarios``."""
    results = {s.name: rs.find(target, s.name, phase) for s in scenarios}
    lines = _header("Metric", [s.name for s in scenarios])
    lines.append(_row(["**Contents**"] + [""] * len(scenarios)))
    lines.append(_row(["Scenario"] + [s.label for s in scenarios]))
    if any(s.kind == "batch" for s in scenarios):
        lines.append(_row(["File Count (response)"] + [str(s.file_count) if s.kind == "batch" else "" for s in scenarios]))
        lines.append(_row(["File Size (each)"] + [_size(s.file_size) for s in scenarios]))
        lines.append(_row(["Payload Size (total)"] + [_size(s.payload) for s in scenarios]))
    if any(r is not None and r.per_batch > 1 for r in results.values()):
        lines.append(_row(["Requests per batch"] + [str(r.per_batch) if r else "" for r in results.values()]))
    section = None
    for metric in METRICS:
        if metric.section != section:
            section = metric.section
            lines.append(_row([f"**{section}**"] + [""] * len(scenarios)))
        cells = []
        for r in results.values():
            if r is None or not r.ok:
                cells.append("–" if r is None else r.status)
                continue
            cells.append(_with_ratios(fmt(metric.kind, value(r, metric.key)), rs, r, metric.key, references))
        lines.append(_row([metric.label, *cells]))
    lines.append(_row(["**Memory**"] + [""] * len(scenarios)))
    cells = []
    for r in results.values():
        if r is None or not r.ok:
            cells.append("–")
        else:
            cells.append(_with_ratios(fmt("number", value(r, "rss")), rs, r, "rss", references))
    lines.append(_row([RSS_LABEL, *cells]))
    if any(r is not None and r.loop_lag is not None for r in results.values()):
        lines.append(_row(["**Event Loop Lag (ms)**"] + [""] * len(scenarios)))
        for key, label in LAG_ROWS:
            lines.append(_row([label, *(fmt("ms", None if r is None else value(r, key)) for r in results.values())]))
    return "\n".join(lines)


def summary_table(rs: ResultSet, phase: str, key: str, references: tuple[str, ...]) -> str:
    """Targets in rows, scenarios in columns, one figure (with its ratios) per cell."""
    scenarios = rs.scenarios()
    lines = _header("Target", [s.name for s in scenarios])
    kind = "count" if key == "errors" else ("number" if key in ("rss", "transfer") else "rate" if key == "rps" else "ms")
    for target in rs.targets:
        cells = []
        for s in scenarios:
            r = rs.find(target, s.name, phase)
            if r is None or not r.ok:
                cells.append("–" if r is None else r.status)
                continue
            shown = value(r, key, per_batch=key == "rps")
            cells.append(_with_ratios(fmt(kind, shown), rs, r, key, references))
        lines.append(_row([target, *cells]))
    return "\n".join(lines)


def real_table(rs: ResultSet, phase: str, references: tuple[str, ...]) -> str:
    """Real traffic (random files, and requests made distinct): scenarios in rows, and for each
    target its files/s and its p99, each with its ratios; "" when the run has none of them."""
    scenarios = [s for s in rs.scenarios() if s.pool or s.distinct]
    if not scenarios:
        return ""
    columns = []
    for target in rs.targets:
        columns += [f"{target} files/s", f"{target} p99 (ms)"]
    lines = _header("Scenario", columns)
    for s in scenarios:
        cells = []
        for target in rs.targets:
            r = rs.find(target, s.name, phase)
            if r is None or not r.ok:
                cells += ["–" if r is None else r.status, ""]
                continue
            rate = value(r, "rps", per_batch=True)
            shown = None if rate is None else rate * (s.file_count if s.kind in ("batch", "file") else 1)
            cells.append(_with_ratios(fmt("count", shown), rs, r, "rps", references))
            cells.append(_with_ratios(fmt("ms", value(r, "p99")), rs, r, "p99", references))
        lines.append(_row([f"{s.name} ({s.label})", *cells]))
    return "\n".join(lines)


def _lag(r: Result | None) -> str:
    """``max / p99`` of a phase's event-loop lag, in ms."""
    if r is None or value(r, "lag_max") is None:
        return "–"
    return f"{fmt('ms', value(r, 'lag_max'))} / {fmt('ms', value(r, 'lag_p99'))}"


def tails_table(rs: ResultSet) -> str:
    """The constant-rate phase: scenarios in rows; the rate asked, then for each target its
    p50 / p99 / p99.9, the batches/s it was sent, and its loop lag; "" without the phase."""
    if "rate" not in rs.phases:
        return ""
    lagged = [t for t in rs.targets if any(r.target == t and r.loop_lag is not None for r in rs.results)]
    columns = ["batches/s asked"]
    columns += [f"{t} p50 / p99 / p99.9 (ms)" for t in rs.targets]
    columns += [f"{t} batches/s sent" for t in rs.targets]
    columns += [f"{t} wrk's own lag p99 / max (ms)" for t in rs.targets]
    columns += [f"{t} loop lag max / p99 (ms)" for t in lagged]
    lines = _header("Scenario", columns)
    for s in rs.scenarios():
        found = {t: rs.find(t, s.name, "rate") for t in rs.targets}
        measured = [r for r in found.values() if r is not None and r.ok]
        if not measured:
            continue
        paced = measured[0].wrk.paced_rate  # type: ignore[union-attr]
        cells = [fmt("count", None if paced is None else paced / measured[0].per_batch)]
        for r in found.values():
            cells.append(_tails(r))
        cells += [fmt("count", None if r is None else value(r, "sent", per_batch=True)) for r in found.values()]
        cells += [_send_lag(r) for r in found.values()]
        cells += [_lag(found[t]) for t in lagged]
        lines.append(_row([f"{s.name} ({s.label})", *cells]))
    return "\n".join(lines)


def _tails(r: Result | None) -> str:
    """p50 / p99 / p99.9 of a constant-rate phase, or why there are none."""
    if r is None or not r.ok:
        return "–" if r is None else r.status
    w = r.wrk
    assert w is not None
    if not w.held:
        share = (w.sent_rate or 0.0) / w.paced_rate if w.paced_rate else 0.0
        return f"not valid: sent {share:.0%} of the rate"
    return " / ".join(fmt("ms", value(r, key)) for key in ("p50", "p99", "p999"))


def _send_lag(r: Result | None) -> str:
    lag = None if r is None or not r.ok or r.wrk is None else r.wrk.send_lag
    return "–" if lag is None else f"{fmt('ms', lag['99'])} / {fmt('ms', lag['max'])}"


TAILS_NOTE = ("Every target offered the same batches per second, each request's latency counted from when it was"
              " due (no coordinated omission); nginx's are per file. A row the load generator did not send at"
              f" {HELD:.0%} of the rate asked or more is not valid and has no tails: its requests queued in the"
              " generator, behind a server that could not answer that fast (every connection busy) or a generator"
              " that could not send that fast (then its own lag is high). wrk's own lag: how late wrk sent what a free connection could send on time (its"
              " thread woke late), charged to no latency; where it is near the tails, the host held the"
              " generator up and the tails are the host's as much as the server's. Loop lag: how late the server's event loop ran its own timer during the phase, each"
              " figure the upper bound of its histogram bucket.")


def lag_table(rs: ResultSet) -> str:
    """The event loop's lag, ``max / p99`` in ms: scenarios in rows, a column per target that
    shows one and phase; "" when no target shows one."""
    lagged = [t for t in rs.targets if any(r.target == t and r.loop_lag is not None for r in rs.results)]
    if not lagged:
        return ""
    pairs = [(t, phase) for t in lagged for phase in rs.phases]
    lines = _header("Scenario", [f"{t} {phase}" for t, phase in pairs])
    for s in rs.scenarios():
        lines.append(_row([f"{s.name} ({s.label})", *(_lag(rs.find(t, s.name, phase)) for t, phase in pairs)]))
    return "\n".join(lines)


LAG_NOTE = (f"How late the server's event loop ran a timer it sets every {LAG_INTERVAL * 1000:g} ms"
            " (`axon_event_loop_lag_seconds` read from /metrics before and after each phase): max / p99 in ms,"
            " each the upper bound of its bucket.")


def workers_table(rs: ResultSet) -> str:
    """Each phase's requests per server worker beside the load generator's count; "" when no
    target counted them (one worker)."""
    rows = [r for r in rs.results if r.ok and r.per_worker is not None]
    if not rows:
        return ""
    lines = _header("Target", ["scenario", "phase", "per worker", "sum", "load generator", "sum / generator"])
    for r in rows:
        assert r.wrk is not None and r.per_worker is not None
        total = sum(r.per_worker.values())
        share = f"{total / r.wrk.requests:.3f}" if r.wrk.requests else "–"
        lines.append(_row([r.target, r.scenario, r.phase, " + ".join(str(n) for n in r.per_worker.values()),
                           str(total), str(r.wrk.requests), share]))
    return "\n".join(lines)


WORKERS_NOTE = ("Requests each worker process answered in the phase, as the server counted them (Axon's workers"
                " in their metrics files, nginx's in a log line per request naming the worker), beside the requests"
                " the load generator counted answered. The sum can pass the generator's by the requests still in"
                " flight when it stopped (at most one a connection).")


REAL_NOTE = ("Files drawn at random from a pool of 4 KiB files for every request, and requests whose"
             " headers differ every time (`~`): no two requests alike. Files/s are requests/s for the"
             " scenarios without a file (health). In parentheses: the ratio to the reference, same"
             " scenario and phase; nginx serves one file per request, so its files/s are its requests/s"
             " and its p99 is that of one file.")


def formats_table(rs: ResultSet, target: str, phase: str) -> str:
    """Files/s of each batch as multipart, zip (CRCs known, then cold) and tar, with each
    archive's ratio to the multipart batch; "" when the run has no archive scenario."""
    scenarios = rs.scenarios(target)
    bases = [s for s in scenarios if s.kind == "batch" and s.format == "multipart"
             and any(a.name.split(".")[0] == s.name and a.format != "multipart" for a in scenarios)]
    if not bases:
        return ""
    columns = [("", "multipart"), (".zip", "zip, CRCs known"), (".zip.cold", "zip, CRCs cold"), (".tar", "tar")]
    lines = _header("Files/s", [title for _, title in columns])
    for base in bases:
        plain = _files_per_second(rs, target, base, base.name, phase)
        cells = []
        for suffix, _ in columns:
            got = _files_per_second(rs, target, base, base.name + suffix, phase)
            text = fmt("count", got)
            if suffix and got is not None and plain:
                text += f" ({got / plain:.2f}x)"
            cells.append(text)
        lines.append(_row([f"{base.name} ({base.label})", *cells]))
    return "\n".join(lines)


def _files_per_second(rs: ResultSet, target: str, base: Scenario, name: str, phase: str) -> float | None:
    found = rs.find(target, name, phase)
    rps = None if found is None else value(found, "rps", per_batch=True)
    return None if rps is None else rps * base.file_count


def legend(rs: ResultSet, references: tuple[str, ...]) -> str:
    present = [ref for ref in references if ref in rs.targets]
    if not present:
        return ""
    names = " and ".join(f"`{SHORT.get(ref, ref)}` = {ref}" for ref in present)
    text = f"In parentheses: this figure divided by the same figure of the reference ({names}), same scenario and phase."
    if "nginx" in present:
        text += (" nginx serves one file per request, so a batch of n files costs it n requests: request counts and"
                 " rates are compared per batch (its requests ÷ n); its latencies are per file.")
    return text


def render(rs: ResultSet, references: tuple[str, ...] = (), descriptions: dict[str, str] | None = None,
           *, summary_only: bool = False) -> str:
    """The whole report as Markdown (``summary_only``: the run's description and the summaries)."""
    descriptions = descriptions or {}
    out = ["# axon bench report", ""]
    meta = rs.meta
    if meta.get("command"):
        out += [f"Command: `{meta['command']}`", ""]
    if meta.get("machine"):
        out += [f"Machine: {meta['machine']}", ""]
    if meta.get("versions"):
        out += ["Versions: " + ", ".join(f"{k} {v}" for k, v in meta["versions"].items()), ""]
    if meta.get("settings"):
        out += ["Settings: " + ", ".join(f"{k} {v}" for k, v in meta["settings"].items()), ""]
    if descriptions:
        out += ["Targets:", ""] + [f"- `{name}`: {text}" for name, text in descriptions.items()] + [""]
    note = legend(rs, references)
    for phase in rs.phases:  # real traffic first: the figures that matter most
        table = real_table(rs, phase, references)
        if table:
            out += [f"## Real traffic: {PHASE_TITLES[phase]}", "", REAL_NOTE, "", table, ""]
    table = tails_table(rs)
    if table:
        out += [f"## Tails: {PHASE_TITLES['rate']}", "", TAILS_NOTE, "", table, ""]
    table = lag_table(rs)
    if table:
        out += ["## Event loop lag", "", LAG_NOTE, "", table, ""]
    table = workers_table(rs)
    if table:
        out += ["## Requests per worker", "", WORKERS_NOTE, "", table, ""]
    for target in rs.targets:
        for phase in rs.phases:
            table = formats_table(rs, target, phase)
            if table:
                out += [f"## {target}: one batch in three formats, {PHASE_TITLES[phase]}", "",
                        "In parentheses: files/s divided by the same batch's as multipart.", "", table, ""]
    if len(rs.targets) > 1:
        for phase in rs.phases:
            out += [f"## Summary: {PHASE_TITLES[phase]}", ""]
            if note:
                out += [note, ""]
            for key, title in SUMMARY:
                out += [f"### {title}", "", summary_table(rs, phase, key, references), ""]
    if summary_only:
        return "\n".join(out)
    for target in rs.targets:
        title = f"## {target}"
        out += [title, ""]
        scenarios = rs.scenarios(target)
        groups = [[s for s in scenarios if s.kind == "batch"], [s for s in scenarios if s.kind != "batch"]]
        for phase in rs.phases:
            out += [f"### {target}: {PHASE_TITLES[phase]}", ""]
            if note:
                out += [note, ""]
            for group in groups:
                if group:
                    out += [article_table(rs, target, phase, group, references), ""]
        problems = [r for r in rs.results if r.target == target and not r.ok]
        if problems:
            out += ["Not measured:", ""]
            out += [f"- {r.scenario} {r.phase}: {r.status}: {r.note}" for r in problems]
            out += [""]
    return "\n".join(out)


def _size(n: int) -> str:
    if not n:
        return ""
    return f"{n // 1024}KB" if n % 1024 == 0 else f"{n}B"
