"""pyarrow, DuckDB, Polars and Hugging Face ``datasets`` read Parquet through axon:// as the real
libraries: the same table as from disk, read from the server (its access log shows the requests),
in at most one request per row group plus the footer's."""

from __future__ import annotations

import subprocess
import sys
from collections import Counter

import pytest

from engine_support import engine
from live_server import dead_netloc, says_not_axon

pa = pytest.importorskip("pyarrow", reason="pyarrow is in the test extra (scripts/setup.sh --all)")
pq = pytest.importorskip("pyarrow.parquet")
pa_dataset = pytest.importorskip("pyarrow.dataset")

import fsspec  # noqa: E402

from axon.engines.tables import arrow_filesystem  # noqa: E402
from axon.fsspec.errors import NotAxonServer  # noqa: E402

ROWS = "tables/rows.parquet"
PARTS = [f"tables/parts/part-{p}.parquet" for p in range(4)]


def local(served, rel: str = ROWS):
    return pq.read_table(served.root / rel)


def local_parts(served):
    return pa.concat_tables([local(served, rel) for rel in PARTS])


def assert_read_from_axon(served, seen: list[dict], rels: list[str], listed: str | None = None) -> None:
    """Every request was for these files (and the listing of ``listed``), each file was read,
    and no file took more GETs than its row groups plus one for the footer and one spare."""
    allowed = {f"/files/{rel}" for rel in rels} | {"/api/limits"}
    if listed:
        allowed |= {f"/browse/{listed}/", f"/files/{listed}"}  # fsspec's info of the directory
    assert {r["path"] for r in seen} <= allowed, seen
    gets = Counter(r["path"] for r in seen if r["method"] == "GET" and r["path"].startswith("/files/"))
    for rel in rels:
        row_groups = pq.ParquetFile(served.root / rel).num_row_groups
        assert 1 <= gets[f"/files/{rel}"] <= row_groups + 2, (rel, seen)


def test_importing_the_tables_helpers_imports_no_engine():
    code = ("import sys, axon.engines.tables; "
            "print(sorted(m for m in ('pyarrow', 'duckdb', 'polars', 'datasets', 'torch') if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"


# -- pyarrow ---------------------------------------------------------------------------------------


def test_pyarrow_reads_a_file_through_the_arrow_filesystem(served):
    filesystem = arrow_filesystem()
    assert isinstance(filesystem, pa.fs.FileSystem)
    mark = served.mark()
    table = pq.read_table(f"{served.address}/{ROWS}", filesystem=filesystem)
    seen = served.requests_since(mark)
    assert table.equals(local(served))
    assert_read_from_axon(served, seen, [ROWS])
    assert pq.read_table(f"{served.address}/{ROWS}", filesystem=filesystem, columns=["name"]).equals(
        local(served).select(["name"]))


def test_pyarrow_datasets_list_a_directory_and_read_its_files(served):
    mark = served.mark()
    dataset = pa_dataset.dataset(f"{served.address}/tables/parts", filesystem=arrow_filesystem(), format="parquet")
    table = dataset.to_table()
    seen = served.requests_since(mark)
    assert sorted(dataset.files) == [f"{served.address}/{rel}" for rel in PARTS]
    assert table.sort_by("id").equals(local_parts(served))
    assert_read_from_axon(served, seen, PARTS, listed="tables/parts")


def test_pyarrow_gets_file_not_found_for_a_file_the_server_lacks(served):
    with pytest.raises(FileNotFoundError):
        pq.read_table(f"{served.address}/tables/missing.parquet", filesystem=arrow_filesystem())


# -- DuckDB ----------------------------------------------------------------------------------------


def test_duckdb_queries_axon_urls_once_the_filesystem_is_registered(served):
    duckdb = engine("duckdb", "duckdb")
    connection = duckdb.connect()
    connection.register_filesystem(fsspec.filesystem("axon"))
    query = "SELECT id, name, x FROM read_parquet('{}') ORDER BY id"
    mark = served.mark()
    table = connection.sql(query.format(served.url(ROWS))).to_arrow_table()
    seen = served.requests_since(mark)
    assert table.equals(duckdb.connect().sql(query.format(served.root / ROWS)).to_arrow_table())
    assert table.equals(local(served))
    assert_read_from_axon(served, seen, [ROWS])
    mark = served.mark()
    totals = connection.sql(f"SELECT count(*), sum(id) FROM read_parquet('{served.url('tables/parts/*.parquet')}')")
    assert totals.fetchall() == [(5000, sum(range(5000)))]
    assert_read_from_axon(served, served.requests_since(mark), PARTS, listed="tables/parts")


def test_duckdb_reports_a_file_the_server_lacks(served):
    duckdb = engine("duckdb", "duckdb")
    connection = duckdb.connect()
    connection.register_filesystem(fsspec.filesystem("axon"))
    with pytest.raises(duckdb.Error, match="missing.parquet"):
        connection.sql(f"SELECT * FROM read_parquet('{served.url('tables/missing.parquet')}')").fetchall()


# -- Polars ----------------------------------------------------------------------------------------


def test_polars_reads_an_axon_url_through_pyarrow(served):
    pl = engine("polars", "polars")
    mark = served.mark()
    frame = pl.read_parquet(served.url(ROWS), use_pyarrow=True)
    seen = served.requests_since(mark)
    assert frame.equals(pl.read_parquet(served.root / ROWS))
    assert_read_from_axon(served, seen, [ROWS])
    with fsspec.open(served.url(ROWS)) as opened:  # an opened file is scanned as well
        names = pl.scan_parquet(opened).select("name").collect()
    assert names.equals(pl.read_parquet(served.root / ROWS, columns=["name"]))


# -- Hugging Face datasets -------------------------------------------------------------------------


@pytest.mark.slow
def test_hugging_face_datasets_loads_axon_files(served, tmp_path):
    datasets = engine("datasets", "datasets")
    mark = served.mark()
    loaded = datasets.load_dataset("parquet", data_files=served.url(ROWS), split="train", cache_dir=str(tmp_path))
    seen = served.requests_since(mark)
    assert loaded.data.table.select(["id", "name", "x"]).equals(local(served))
    # Downloaded into the cache: one batch request for the one file, no file read by blocks.
    assert downloads(seen) == ["/api/stream-files"], seen

    mark = served.mark()
    parts = datasets.load_dataset("parquet", data_files=served.url("tables/parts/*.parquet"), split="train",
                                  cache_dir=str(tmp_path))
    seen = served.requests_since(mark)
    assert parts.data.table.select(["id", "name", "x"]).sort_by("id").equals(local_parts(served))
    listing = "/browse/tables/parts/"  # read for the glob, unless an earlier test's is still cached
    assert [path for path in downloads(seen) if path != listing] == ["/api/stream-files"] * 4, seen


def downloads(seen: list[dict]) -> list[str]:
    """The requests that fetched something: no HEAD, and no /api/limits (asked once per process)."""
    return [r["path"] for r in seen if r["method"] != "HEAD" and r["path"] != "/api/limits"]


@pytest.mark.slow
def test_hugging_face_datasets_streams_axon_files(served, tmp_path):
    datasets = engine("datasets", "datasets")
    mark = served.mark()
    streamed = datasets.load_dataset("parquet", data_files=served.url(ROWS), split="train", streaming=True,
                                     cache_dir=str(tmp_path))  # streaming still takes a lock there
    rows = list(streamed)
    seen = served.requests_since(mark)
    assert rows == local(served).to_pylist()
    assert_read_from_axon(served, seen, [ROWS])


# -- errors a user can act on ----------------------------------------------------------------------


def read_duckdb(url: str, tmp_path) -> list:
    connection = engine("duckdb", "duckdb").connect()
    connection.register_filesystem(fsspec.filesystem("axon", skip_instance_cache=True))
    return connection.sql(f"SELECT * FROM read_parquet('{url}')").fetchall()


def read_datasets(url: str, tmp_path, streaming: bool = False) -> list:
    datasets = engine("datasets", "datasets")
    return list(datasets.load_dataset("parquet", data_files=url, split="train", streaming=streaming,
                                      cache_dir=str(tmp_path)))


READERS = {  # each engine reading one Parquet file of an axon:// URL
    "pyarrow": lambda url, tmp_path: pq.read_table(url.removeprefix("axon://"), filesystem=arrow_filesystem()),
    "duckdb": read_duckdb,
    "polars": lambda url, tmp_path: engine("polars", "polars").read_parquet(url, use_pyarrow=True),
    "datasets": read_datasets,
    "datasets, streaming": lambda url, tmp_path: read_datasets(url, tmp_path, streaming=True),
}
ENGINES = [pytest.param(name, marks=pytest.mark.slow) if name.startswith("datasets") else name for name in READERS]


@pytest.mark.parametrize("name", ENGINES)
def test_a_server_that_is_not_axon_says_so(name, nginx_netloc, tmp_path):
    with pytest.raises(Exception) as caught:  # noqa: PT011 - DuckDB raises its own Error, with the text
        READERS[name](f"axon://{nginx_netloc}/tables/missing.parquet", tmp_path)
    assert isinstance(caught.value, NotAxonServer) or name == "duckdb", repr(caught.value)
    assert says_not_axon(str(caught.value), nginx_netloc), caught.value


@pytest.mark.parametrize("name", ENGINES)
def test_a_server_that_is_down_is_named_by_host_and_port(name, tmp_path):
    netloc = dead_netloc()
    with pytest.raises(Exception) as caught:  # noqa: PT011 - as above
        READERS[name](f"axon://{netloc}/tables/sales.parquet", tmp_path)
    assert isinstance(caught.value, OSError) or name == "duckdb", repr(caught.value)
    assert netloc in str(caught.value), caught.value


# -- README ----------------------------------------------------------------------------------------


@pytest.mark.slow
def test_the_readme_example_runs_and_reads_the_tables(readme_block, readme_served, tmp_path, monkeypatch):
    duckdb = engine("duckdb", "duckdb")
    pl = engine("polars", "polars")
    datasets = engine("datasets", "datasets")
    monkeypatch.setattr(datasets.config, "HF_DATASETS_CACHE", tmp_path)  # not the user's cache
    monkeypatch.setattr(datasets.config, "DOWNLOADED_DATASETS_PATH", tmp_path / "downloads")
    try:
        names, _ = readme_served.run(readme_block("Engines: ", "axon.engines.tables"))
    finally:
        duckdb.unregister_filesystem("axon")  # the README registers on DuckDB's default connection
    sales = pq.read_table(readme_served.root / "tables/sales.parquet")
    assert names["table"].equals(sales)
    assert names["north"] == [(sum(range(0, 200, 4)),)]
    assert names["frame"].equals(pl.read_parquet(readme_served.root / "tables/sales.parquet"))
    assert names["sales"].data.table.select(["region", "amount"]).equals(sales)
    assert list(names["streamed"]) == sales.to_pylist()
