"""Dask on a ``LocalCluster`` of worker processes reading ``axon://`` in batches."""

from __future__ import annotations

import math
import os
import pickle
from collections.abc import Iterator

import pytest

from engine_support import engine
from live_server import dead_netloc, says_not_axon

DASK = "dask[dataframe,distributed]"
dask = engine("dask", DASK)
db = engine("dask.bag", DASK)
dd = engine("dask.dataframe", DASK)
distributed = engine("distributed", DASK)
pd = pytest.importorskip("pandas")
pytest.importorskip("pyarrow")

from axon.engines import dask_io  # noqa: E402
from axon.fsspec import AxonFileSystem  # noqa: E402
from axon.fsspec.errors import NotAxonServer  # noqa: E402

pytestmark = [pytest.mark.slow, pytest.mark.timeout(180)]

PARTS = [f"tables/parts/part-{p}.parquet" for p in range(4)]


@pytest.fixture(scope="module")
def cluster_client() -> Iterator[distributed.Client]:
    """Two worker processes (spawned, each with a nanny), one thread each; closed after the module."""
    with distributed.LocalCluster(n_workers=2, processes=True, threads_per_worker=1, dashboard_address=None,
                                  silence_logs=40) as cluster, distributed.Client(cluster) as client:
        yield client


@pytest.fixture
def client(cluster_client: distributed.Client) -> distributed.Client:
    # Workers gone (killed from outside) would leave a compute waiting for them until the timeout.
    cluster_client.wait_for_workers(2, timeout=60)
    return cluster_client


def cat_in_worker(fs: AxonFileSystem, path: str) -> tuple[int, dict, bytes]:
    return os.getpid(), fs.storage_options, fs.cat_file(path)


def stream_requests(records: list[dict]) -> list[dict]:
    return [r for r in records if r["path"] == "/api/stream-files"]


def only_batches(records: list[dict]) -> bool:
    return all(r["path"] in ("/api/stream-files", "/api/limits") for r in records)


def from_disk(served, columns: list[str]) -> pd.DataFrame:
    """The parts as dask reads them from the local disk (its dtypes: pyarrow strings)."""
    frame = dd.read_parquet(str(served.root / "tables" / "parts"), columns=columns).compute(scheduler="sync")
    return frame.sort_values("id").reset_index(drop=True)


def test_read_bytes_reads_each_partition_in_one_request(served, client):
    paths = [served.url(f"small/{i:04}.bin") for i in range(300)]
    bag = dask_io.read_bytes(paths, files_per_partition=64)
    assert bag.npartitions == math.ceil(300 / 64)
    mark = served.mark()
    got = bag.compute()
    seen = served.requests_since(mark)
    assert got == [(served.root / "small" / f"{i:04}.bin").read_bytes() for i in range(300)]
    assert len(stream_requests(seen)) == bag.npartitions, seen
    assert only_batches(seen), seen


def test_the_filesystem_is_built_in_each_worker_process(served, client):
    """Tasks run in the worker processes, which build their own filesystem from plain options."""
    bag = dask_io.read_bytes([served.url(f"small/{i:04}.bin") for i in range(40)], files_per_partition=10,
                             include_path=True)
    pids = set(bag.map_partitions(lambda part: [os.getpid()]).compute())
    workers = set(client.run(os.getpid).values())
    assert pids and pids <= workers and os.getpid() not in pids
    # A filesystem shipped itself (as dask.dataframe.read_parquet ships it) crosses as its
    # constructor's options, without its session, and reads in the worker with a session of its own.
    fs = AxonFileSystem(skip_instance_cache=True, batch_concurrency=2)
    path = f"{served.address}/small/0000.bin"
    fs.cat([path])  # its session is open now
    assert b"ClientSession" not in pickle.dumps(fs)
    pid, options, data = client.submit(cat_in_worker, fs, path, pure=False).result(timeout=60)
    assert pid in workers and options["batch_concurrency"] == 2
    assert data == (served.root / "small" / "0000.bin").read_bytes()


def test_storage_options_reach_the_workers(served, client):
    """A partition longer than the filesystem's batches (files_per_batch, set here) is several."""
    bag = dask_io.read_bytes([served.url(f"small/{i:04}.bin") for i in range(50)], files_per_partition=25,
                             storage_options={"files_per_batch": 10})
    mark = served.mark()
    got = bag.compute()
    assert len(stream_requests(served.requests_since(mark))) == 2 * 3
    assert got == [(served.root / "small" / f"{i:04}.bin").read_bytes() for i in range(50)]


def test_read_bytes_with_paths_and_a_glob(served, client):
    bag = dask_io.read_bytes(served.url("small/01[0-4]?.bin"), files_per_partition=20, include_path=True)
    got = bag.compute()
    assert [path for _, path in got] == [f"{served.address}/small/{i:04}.bin" for i in range(100, 150)]
    assert all(data == (served.root / path.split("/", 1)[1]).read_bytes() for data, path in got)
    # A path ending in "/" is every file under it, found through the listing.
    parts = dask_io.read_bytes(served.url("tables/"), include_path=True).compute()
    assert [path for _, path in parts] == sorted(f"{served.address}/{p}" for p in [*PARTS, "tables/rows.parquet"])
    assert all(data == (served.root / path.split("/", 1)[1]).read_bytes() for data, path in parts)


def test_read_text_gives_the_lines_dask_s_own_gives(served, client):
    names = [f"small/{i:04}.bin" for i in range(30)]  # bytes 0-250: \r, \n and \r\n among them
    ours = dask_io.read_text([served.url(n) for n in names], files_per_partition=10, encoding="latin-1")
    mark = served.mark()
    got = ours.compute()
    assert len(stream_requests(served.requests_since(mark))) == 3
    local = db.read_text([str(served.root / n) for n in names], encoding="latin-1").compute(scheduler="sync")
    assert got == local and len(got) > 30
    split = dask_io.read_text([served.url(n) for n in names[:3]], linedelimiter="\x07", encoding="latin-1")
    assert split.compute() == db.read_text([str(served.root / n) for n in names[:3]], linedelimiter="\x07",
                                           encoding="latin-1").compute(scheduler="sync")


def test_dask_s_own_read_text_opens_every_file(served, client):
    """What read_text batches: dask's own, even with files_per_partition, asks file by file."""
    paths = [served.url(f"small/{i:04}.bin") for i in range(10)]
    mark = served.mark()
    db.read_text(paths, files_per_partition=10, encoding="latin-1").compute()
    per_file = {r["path"] for r in served.requests_since(mark) if r["path"].startswith("/files/small/")}
    assert len(per_file) == 10


def test_read_parquet_reads_each_partition_in_one_request(served, client):
    paths = [served.url(p) for p in PARTS]
    mark = served.mark()
    frame = dask_io.read_parquet(paths, files_per_partition=2, columns=["id", "name"], include_path=True)
    assert len(stream_requests(served.requests_since(mark))) == 1  # the first file, for the columns' types
    assert frame.npartitions == 2
    mark = served.mark()
    got = frame.compute()
    seen = served.requests_since(mark)
    assert len(stream_requests(seen)) == 2 and only_batches(seen), seen
    expected = from_disk(served, ["id", "name"])
    pd.testing.assert_frame_equal(got[["id", "name"]].reset_index(drop=True), expected)
    assert list(got["path"].unique()) == [f"{served.address}/{p}" for p in PARTS]
    # A selection after the read is pushed into it (dask's projection), still a request a partition.
    mark = served.mark()
    assert frame["id"].sum().compute() == sum(range(5000))
    assert len(stream_requests(served.requests_since(mark))) == 2


def test_dask_s_own_read_parquet_over_axon(served, client):
    """``dd.read_parquet("axon://dir/")`` works on the cluster as is (the filesystem pickled to the
    workers): the listing, then a HEAD and ranged GETs per file, in the client and the workers."""
    mark = served.mark()
    got = dd.read_parquet(served.url("tables/parts/"), columns=["id", "x"]).compute()
    seen = served.requests_since(mark)
    pd.testing.assert_frame_equal(got.sort_values("id").reset_index(drop=True), from_disk(served, ["id", "x"]))
    assert not stream_requests(seen)
    for part in PARTS:
        assert any(r["method"] == "GET" and r["path"] == f"/files/{part}" for r in seen), seen


def test_a_missing_file_raises_file_not_found(served, client):
    bag = dask_io.read_bytes([served.url("small/0000.bin"), served.url("small/missing.bin")])
    with pytest.raises(FileNotFoundError, match="missing.bin"):
        bag.compute()


def _reads(netloc: str) -> dict:
    """Every reader of ``dask_io`` on ``netloc``: in the workers (a file, Parquet with its types
    given) and in the client (a glob's listing, Parquet's types from its first file)."""
    meta = pd.DataFrame({"id": pd.Series([], dtype="int64")})
    return {
        "read_bytes": lambda: dask_io.read_bytes([f"axon://{netloc}/small/missing.bin"]).compute(),
        "read_text of a glob": lambda: dask_io.read_text(f"axon://{netloc}/small/*.bin").compute(),
        "read_parquet": lambda: dask_io.read_parquet(f"axon://{netloc}/tables/missing.parquet").compute(),
        "read_parquet, meta given": lambda: dask_io.read_parquet(f"axon://{netloc}/tables/missing.parquet",
                                                                 meta=meta).compute(),
    }


def test_a_server_that_is_not_axon_says_so(nginx_netloc, client):
    for name, read in _reads(nginx_netloc).items():
        with pytest.raises(NotAxonServer) as caught:
            read()
        assert says_not_axon(str(caught.value), nginx_netloc), (name, caught.value)


def test_a_server_that_is_down_is_named_by_host_and_port(client):
    netloc = dead_netloc()
    for name, read in _reads(netloc).items():
        with pytest.raises(OSError) as caught:
            read()
        assert netloc in str(caught.value), (name, caught.value)


def test_bad_arguments_are_refused_at_once(served):
    with pytest.raises(ValueError, match="files_per_partition is a positive integer"):
        dask_io.read_bytes([served.url("small/0000.bin")], files_per_partition=0)
    with pytest.raises(LookupError):
        dask_io.read_text([served.url("small/0000.bin")], encoding="no-such-codec")
    with pytest.raises(TypeError, match="string"):
        dask_io.read_bytes([served.url("small/0000.bin"), 7])


# -- README ----------------------------------------------------------------------------------------


def test_the_readme_example_runs_and_reads_the_files(readme_block, readme_served, client):
    names, seen = readme_served.run(readme_block("Dask\n", "axon.engines"))
    assert names["labels"] == [i % 3 for i in range(8)]
    assert names["lines"] == [f"sample {i}\n" for i in range(8)]
    expected = dd.read_parquet(str(readme_served.root / "tables/sales.parquet"), columns=["region", "amount"])
    pd.testing.assert_frame_equal(names["regions"], expected.compute(scheduler="sync"))
    # Two partitions of labels, two of lines, and sales: its types from the file, then its partition.
    assert len(stream_requests(seen)) == 6, seen
