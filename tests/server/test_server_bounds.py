"""What a hostile client can make one worker of axon serve hold: a real server process, a real
flood of distinct batches, its descriptors and memory read from /proc."""

from __future__ import annotations

import os
import random
from pathlib import Path

import pytest
from conftest import Client, batch_target

POOL = 3000
CACHE = 1000


def _fds(pid: int) -> int:
    return len(os.listdir(f"/proc/{pid}/fd"))


def _rss(pid: int) -> int:
    with open(f"/proc/{pid}/status") as f:
        return next(int(line.split()[1]) * 1024 for line in f if line.startswith("VmRSS:"))


@pytest.fixture
def pool(tmp_path: Path) -> Path:
    root = tmp_path / "flood"
    for i in range(POOL):
        path = root / f"d{i // 500}" / f"{i:05d}.bin"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(random.Random(i).randbytes(4096))
    return root


@pytest.mark.slow
def test_a_flood_of_distinct_batches_stays_within_the_stated_bounds(spawn, pool) -> None:
    """The issue's hostile client: hundreds of distinct 64-file batches, each sent twice (so that
    each is remembered), from a pool three times the open-file cache. The worker stays within
    ``--file-cache`` descriptors (and its listening socket, its connections, a few of its own)
    and 64 MiB of memory growth, and answers every request whole."""
    server = spawn("--workers", "0", "--file-cache", str(CACHE), serve_root=pool)
    pid = server.proc.pid
    rng = random.Random(7)
    names = [f"d{i // 500}/{i:05d}.bin" for i in range(POOL)]
    with Client(server.port) as c:
        assert c.get(batch_target(names[:64])).status == 200  # warm: the loop, the imports
        fds, rss = _fds(pid), _rss(pid)
        own = fds - 64  # all but the warm batch's files: the root, the socket, the loop's, ...
        most_fds = fds
        for n in range(400):
            target = batch_target(rng.sample(names, 64))
            for _ in range(2):
                resp = c.get(target, {"X-Request-Id": str(n)})
                assert resp.status == 200 and len(resp.body) > 64 * 4096
            most_fds = max(most_fds, _fds(pid))
        grown = _rss(pid) - rss
    assert most_fds <= own + CACHE + 2, (own, most_fds)
    assert grown <= 64 * 1024 * 1024, grown
