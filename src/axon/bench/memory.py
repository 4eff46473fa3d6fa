"""Peak resident memory of a server's processes while a scenario runs.

A background thread samples the RSS of every process in the server's trees (masters and their
workers, found afresh each time since servers respawn workers) and keeps the largest sum. RSS
counts pages shared between a master and its forked workers once per process, so a multi-process
server's figure is an upper bound; that is the figure a capacity planner adds up, too.
"""

from __future__ import annotations

import threading

try:
    import psutil
except ImportError:  # pragma: no cover - psutil is in the tools and test extras
    psutil = None


class PeakRSS:
    """``with PeakRSS(pids) as peak: ...`` then ``peak.bytes`` (None when it cannot be measured)."""

    def __init__(self, pids: list[int], interval: float = 0.1) -> None:
        self.pids = list(pids)
        self.interval = interval
        self.bytes: int | None = None
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def sample(self) -> int | None:
        """The summed RSS of the trees under ``pids`` now, or None when none can be read."""
        if psutil is None:
            return None
        total, seen = 0, False
        for pid in self.pids:
            try:
                root = psutil.Process(pid)
                tree = [root, *root.children(recursive=True)]
            except psutil.Error:
                continue
            for proc in tree:
                try:
                    total += proc.memory_info().rss
                    seen = True
                except psutil.Error:  # a worker that exited between listing and reading
                    pass
        return total if seen else None

    def _run(self) -> None:
        while True:
            value = self.sample()
            if value is not None and (self.bytes is None or value > self.bytes):
                self.bytes = value
            if self._stop.wait(self.interval):
                return

    def __enter__(self) -> PeakRSS:
        if self.pids and psutil is not None:
            self._thread = threading.Thread(target=self._run, name="axon-bench-rss", daemon=True)
            self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join()
