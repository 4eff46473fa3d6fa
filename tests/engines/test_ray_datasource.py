"""Ray Data on a local cluster (a head and worker processes) reading ``axon://`` in batches."""

from __future__ import annotations

import math
import os
from collections.abc import Iterator

import pytest

from engine_support import engine
from live_server import dead_netloc, says_not_axon

ray = engine("ray", "ray[data]")
engine("ray.data", "ray[data]")
pa = pytest.importorskip("pyarrow")
pq = pytest.importorskip("pyarrow.parquet")

from pyarrow.fs import FSSpecHandler, PyFileSystem  # noqa: E402

from axon.engines.ray_datasource import AxonFiles, read_binary_files, read_parquet  # noqa: E402
from axon.fsspec import AxonFileSystem  # noqa: E402
from axon.fsspec.errors import NotAxonServer, ServerDown  # noqa: E402

pytestmark = [pytest.mark.slow, pytest.mark.timeout(240)]


@pytest.fixture(scope="module")
def ray_cluster() -> Iterator[None]:
    """``ray.init`` starts a head (GCS, raylet) and worker processes here; shut down after the module."""
    os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
    os.environ.setdefault("RAY_AUTH_MODE", "disabled")  # loopback only; no token file written
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False, configure_logging=False)
    ray.data.DataContext.get_current().enable_progress_bars = False
    try:
        yield
    finally:
        ray.shutdown()


def stream_requests(records: list[dict]) -> list[dict]:
    return [r for r in records if r["path"] == "/api/stream-files"]


def test_read_binary_files_reads_each_block_in_one_request(served, ray_cluster):
    paths = [served.url(f"small/{i:04}.bin") for i in range(300)]
    mark = served.mark()
    rows = read_binary_files(paths, files_per_block=64, include_paths=True).take_all()
    seen = served.requests_since(mark)
    assert len(rows) == 300
    for row in rows:
        assert row["path"].startswith(served.address + "/small/")
        assert row["bytes"] == (served.root / row["path"].split("/", 1)[1]).read_bytes()
    assert sorted(row["path"] for row in rows) == [p.removeprefix("axon://") for p in paths]
    # One POST per block and nothing else: no HEAD or GET per file.
    assert len(stream_requests(seen)) == math.ceil(300 / 64), seen
    assert all(r["path"] in ("/api/stream-files", "/api/limits") for r in seen), seen


def test_storage_options_reach_the_workers(served, ray_cluster):
    """A block longer than the filesystem's batches (files_per_batch, set here) is several."""
    paths = [served.url(f"small/{i:04}.bin") for i in range(50)]
    mark = served.mark()
    rows = read_binary_files(paths, files_per_block=25, storage_options={"files_per_batch": 10}).take_all()
    assert len(stream_requests(served.requests_since(mark))) == 2 * 3
    assert sorted(r["bytes"] for r in rows) == sorted((served.root / "small" / f"{i:04}.bin").read_bytes() for i in range(50))


def test_rows_match_ray_s_own_read_binary_files(served, ray_cluster):
    """Same columns as ``ray.data.read_binary_files`` gives; Ray's own opens every file alone."""
    paths = [served.url(f"small/{i:04}.bin") for i in range(8)]
    ours = read_binary_files(paths, files_per_block=4).take_all()
    fs = PyFileSystem(FSSpecHandler(AxonFileSystem()))
    mark = served.mark()
    theirs = ray.data.read_binary_files([p.removeprefix("axon://") for p in paths], filesystem=fs).take_all()
    per_file = [r for r in served.requests_since(mark) if r["path"].startswith("/files/small/")]
    assert sorted(r["bytes"] for r in ours) == sorted(r["bytes"] for r in theirs)
    assert set(ours[0]) == set(theirs[0]) == {"bytes"}
    assert len(per_file) >= 8  # at least a request a file: what AxonFiles saves


def test_a_glob_is_expanded_through_the_listing(served, ray_cluster):
    source = AxonFiles(served.url("small/00[0-4]?.bin"), files_per_block=25)
    assert len(source.files) == 50
    mark = served.mark()
    data = sorted(row["bytes"] for row in ray.data.read_datasource(source).take_all())
    assert len(stream_requests(served.requests_since(mark))) == 2
    assert data == sorted((served.root / "small" / f"{i:04}.bin").read_bytes() for i in range(50))


def test_a_missing_file_fails_the_read_with_file_not_found(served, ray_cluster):
    paths = [served.url("small/0000.bin"), served.url("small/missing.bin")]
    with pytest.raises(FileNotFoundError, match="missing.bin"):
        read_binary_files(paths, files_per_block=2).take_all()


def _reads(netloc: str) -> dict:
    """Every reader of ``ray_datasource`` on ``netloc``: in a read task (a file, Parquet) and on
    the driver (a glob's listing)."""
    return {
        "read_binary_files": lambda: read_binary_files([f"axon://{netloc}/small/missing.bin"]).take_all(),
        "read_binary_files of a glob": lambda: read_binary_files(f"axon://{netloc}/small/*.bin").take_all(),
        "read_parquet": lambda: read_parquet([f"axon://{netloc}/tables/missing.parquet"]).take_all(),
    }


def test_a_server_that_is_not_axon_says_so(nginx_netloc, ray_cluster):
    for name, read in _reads(nginx_netloc).items():
        with pytest.raises(NotAxonServer) as caught:  # from a task: RayTaskError(NotAxonServer)
            read()
        assert says_not_axon(str(caught.value), nginx_netloc), (name, caught.value)


def test_a_server_that_is_down_is_named_by_host_and_port(ray_cluster):
    """ServerDown from a read task as on the driver: it pickles (aiohttp's error did not, and
    Ray gave an UnserializableException)."""
    netloc = dead_netloc()
    for name, read in _reads(netloc).items():
        with pytest.raises(ServerDown) as caught:  # from a task: RayTaskError(ServerDown)
            read()
        assert netloc in str(caught.value), (name, caught.value)


def test_bad_arguments_are_refused_before_anything_runs(served):
    with pytest.raises(ValueError, match="files_per_block is a positive integer"):
        AxonFiles([served.url("small/0000.bin")], files_per_block=0)
    with pytest.raises(ValueError, match="host:port"):
        AxonFiles(["/small/0000.bin"])
    with pytest.raises(ValueError, match="no paths"):
        AxonFiles([])
    with pytest.raises(FileNotFoundError, match="nothing"):
        AxonFiles(served.url("small/nothing*.bin"))


def test_read_parquet_fetches_each_block_of_files_in_one_request(served, ray_cluster):
    paths = [served.url(f"tables/parts/part-{p}.parquet") for p in range(4)]
    mark = served.mark()
    blocks = ray.get(read_parquet(paths, files_per_block=2, columns=["id", "name"], include_paths=True).to_arrow_refs())
    seen = served.requests_since(mark)
    got = pa.concat_tables(blocks).sort_by("id")
    expected = pq.read_table(served.root / "tables" / "parts", columns=["id", "name"]).sort_by("id")
    assert got.select(["id", "name"]).equals(expected)
    assert got["path"][0].as_py() == f"{served.address}/tables/parts/part-0.parquet"
    assert got["path"][-1].as_py() == f"{served.address}/tables/parts/part-3.parquet"
    assert len(stream_requests(seen)) == 2, seen
    assert all(r["path"] in ("/api/stream-files", "/api/limits") for r in seen), seen


def test_read_parquet_refuses_what_is_not_parquet(served, ray_cluster):
    with pytest.raises(ValueError, match="0000.bin"):
        read_parquet([served.url("small/0000.bin")]).take_all()


def test_ray_s_own_read_parquet_reads_ranges_file_by_file(served, ray_cluster):
    """``ray.data.read_parquet`` over pyarrow's wrapper works as is: a HEAD and ranged GETs per
    file, in the driver and in the worker that reads it (what :func:`read_parquet` batches)."""
    fs = PyFileSystem(FSSpecHandler(AxonFileSystem()))
    paths = [f"{served.address}/tables/parts/part-{p}.parquet" for p in range(4)]
    mark = served.mark()
    blocks = ray.get(ray.data.read_parquet(paths, filesystem=fs).select_columns(["id", "name"]).to_arrow_refs())
    seen = served.requests_since(mark)
    expected = pq.read_table(served.root / "tables" / "parts", columns=["id", "name"]).sort_by("id")
    assert pa.concat_tables(blocks).sort_by("id").equals(expected)
    assert not stream_requests(seen)
    for p in range(4):
        per_file = [r for r in seen if r["path"] == f"/files/tables/parts/part-{p}.parquet"]
        assert len([r for r in per_file if r["method"] == "GET"]) >= 2, seen  # the footer, then the data


# -- README ----------------------------------------------------------------------------------------


def test_the_readme_example_runs_and_reads_the_files(readme_block, readme_served, ray_cluster):
    names, seen = readme_served.run(readme_block("Ray Data\n", "axon.engines.ray_datasource"))
    assert names["texts"] == {f"{readme_served.address}/samples/{i:03}.txt": f"sample {i}\n" for i in range(8)}
    expected = pq.read_table(readme_served.root / "tables/sales.parquet", columns=["region", "amount"])
    assert names["sales_rows"].to_dict("list") == expected.to_pydict()  # Ray's pandas dtypes are Arrow's
    assert len(stream_requests(seen)) == 3, seen  # two blocks of texts, one of sales
