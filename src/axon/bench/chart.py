"""A chart of throughput and latency per scenario and target (PNG or SVG, by the file's suffix).

One row per phase; on the left batches per second, on the right the 99th-percentile latency,
both on log scales because the scenarios span three orders of magnitude. matplotlib is imported
here only, when a chart is asked for (it is in the ``tools`` extra, never a core dependency).
"""

from __future__ import annotations

from pathlib import Path

from .report import PHASE_TITLES
from .results import ResultSet, value


def draw(rs: ResultSet, path: Path) -> Path:
    import matplotlib

    matplotlib.use("Agg")  # no display needed, and no GUI toolkit picked up by accident
    import matplotlib.pyplot as plt
    from matplotlib import ticker

    phases = rs.phases
    scenarios = [s.name for s in rs.scenarios()]
    targets = rs.targets
    if not phases or not scenarios:
        raise ValueError("nothing measured to chart")
    width = 0.8 / max(1, len(targets))
    fig, axes = plt.subplots(len(phases), 2, figsize=(max(10, 1.1 * len(scenarios) * 2), 3.6 * len(phases)),
                             squeeze=False)
    panels = [("rps", "batches/s (log)"), ("p99", "p99 latency, ms (log)")]
    for row, phase in enumerate(phases):
        for col, (key, ylabel) in enumerate(panels):
            ax = axes[row][col]
            for i, target in enumerate(targets):
                xs, ys = [], []
                for j, name in enumerate(scenarios):
                    r = rs.find(target, name, phase)
                    v = None if r is None else value(r, key, per_batch=True)
                    if v is not None and v > 0:
                        xs.append(j + (i - (len(targets) - 1) / 2) * width)
                        ys.append(v)
                ax.bar(xs, ys, width, label=target)
            ax.set_yscale("log")
            plain = ticker.FuncFormatter(lambda v, _: f"{v:g}")
            ax.yaxis.set_major_formatter(plain)
            ax.yaxis.set_minor_formatter(plain)
            ax.tick_params(axis="y", which="both", labelsize=7)
            ax.set_xticks(range(len(scenarios)))
            ax.set_xticklabels(scenarios, fontsize=8)
            ax.set_ylabel(ylabel)
            ax.set_title(f"{PHASE_TITLES[phase]}", fontsize=10)
            ax.grid(axis="y", which="major", alpha=0.3)
    axes[0][0].legend(fontsize=8, ncol=min(4, len(targets)))
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path
