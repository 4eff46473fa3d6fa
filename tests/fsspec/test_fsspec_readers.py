"""Real readers on axon://: pandas (CSV, and Parquet through pyarrow), fsspec's own generic tests
for copying a remote tree to local disk, and fsspec finding axon:// in a fresh install with
nothing imported. Every result is compared with reading the same files locally."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import uuid
from pathlib import Path

import pytest
from fsspec_served import Served

sys.path.insert(0, str(Path(__file__).parents[1] / "deploy"))

from deploy_rig import copy_checkout  # noqa: E402

from axon.fsspec import AxonFileSystem

pd = pytest.importorskip("pandas", reason="pandas is in the test extra (scripts/setup.sh --all)")
pytest.importorskip("pyarrow", reason="pyarrow is in the test extra (scripts/setup.sh --all)")

from fsspec.implementations.local import LocalFileSystem  # noqa: E402
from fsspec.tests.abstract import AbstractFixtures  # noqa: E402
from fsspec.tests.abstract.get import AbstractGetTests  # noqa: E402


@pytest.fixture(scope="session")
def tables(corpus: Path) -> Path:
    """A table written as CSV and as Parquet (several row groups) under the served root."""
    folder = corpus / "tables"
    folder.mkdir()
    rows = 20_000
    frame = pd.DataFrame({
        "id": range(rows),
        "name": [f"row {i} é" for i in range(rows)],
        "value": [i * 0.25 for i in range(rows)],
        "flag": [i % 3 == 0 for i in range(rows)],
    })
    frame.to_csv(folder / "t.csv", index=False)
    frame.to_parquet(folder / "t.parquet", engine="pyarrow", row_group_size=3000)
    return folder


def test_pandas_read_csv(served: Served, tables: Path):
    remote = pd.read_csv(served.url("tables/t.csv"))
    pd.testing.assert_frame_equal(remote, pd.read_csv(tables / "t.csv"))


def test_pandas_read_parquet_and_a_column_subset(served: Served, tables: Path):
    remote = pd.read_parquet(served.url("tables/t.parquet"), engine="pyarrow")
    pd.testing.assert_frame_equal(remote, pd.read_parquet(tables / "t.parquet", engine="pyarrow"))
    some = pd.read_parquet(served.url("tables/t.parquet"), columns=["id", "flag"],
                           storage_options={"block_size": 32 * 1024})
    pd.testing.assert_frame_equal(some, pd.read_parquet(tables / "t.parquet", columns=["id", "flag"]))


def test_pyarrow_reads_the_footer_and_row_groups_through_open(served: Served, tables: Path):
    import pyarrow.parquet as pq

    fs = AxonFileSystem(skip_instance_cache=True)
    with fs.open(served.path("tables/t.parquet"), block_size=16 * 1024) as f:
        remote = pq.ParquetFile(f)
        assert remote.metadata.num_row_groups == pq.ParquetFile(tables / "t.parquet").metadata.num_row_groups
        assert remote.read_row_group(3).equals(pq.ParquetFile(tables / "t.parquet").read_row_group(3))


# -- fsspec's generic tests ----------------------------------------------------------------------
# fsspec ships tests for copy, get, put, pipe, open, mv (fsspec.tests.abstract). A read-only
# filesystem can take only get (remote to local): the others write to it. Their scenarios are
# built with the filesystem's own touch/makedirs/pipe, so here they are built on the served
# root through the local filesystem, and each test reads them back over axon://.


class ArrangedAxon(AxonFileSystem):
    """axon:// whose mkdir and touch (one generic test arranges its files with them) write to the
    served root directly. Every read still goes over the wire."""

    served_root: Path

    def _local(self, path: str) -> Path:
        return self.served_root / self._split(path)[1]

    def mkdir(self, path, create_parents=True, **kwargs):
        self._local(path).mkdir(parents=True, exist_ok=True)

    def touch(self, path, truncate=True, **kwargs):
        self._local(path).parent.mkdir(parents=True, exist_ok=True)
        self._local(path).touch()


class TestAxonGet(AbstractGetTests, AbstractFixtures):
    @pytest.fixture
    def fs(self, served: Served) -> AxonFileSystem:
        fs = ArrangedAxon(skip_instance_cache=True)
        fs.served_root = served.root
        return fs

    @pytest.fixture
    def fs_join(self):
        return lambda *parts: "/".join(parts)

    @pytest.fixture
    def fs_path(self, served: Served) -> str:
        return served.path(f"abstract/{uuid.uuid4().hex}")

    def _served_scenario(self, served: Served, build):
        name = f"abstract/{uuid.uuid4().hex}"
        local = served.root / name
        build(LocalFileSystem(auto_mkdir=True), os.path.join, str(local))
        yield served.path(f"{name}/source")
        shutil.rmtree(local)

    @pytest.fixture
    def fs_bulk_operations_scenario_0(self, served: Served):
        yield from self._served_scenario(served, self._bulk_operations_scenario_0)

    @pytest.fixture
    def fs_glob_edge_cases_files(self, served: Served):
        yield from self._served_scenario(served, self._glob_edge_cases_files)

    @pytest.fixture
    def fs_dir_and_file_with_same_name_prefix(self, served: Served):
        yield from self._served_scenario(served, self._dir_and_file_with_same_name_prefix)

    @pytest.fixture
    def fs_10_files_with_hashed_names(self, served: Served):
        yield from self._served_scenario(served, self._10_files_with_hashed_names)


# -- installed, and found with nothing imported ----------------------------------------------------


@pytest.fixture(scope="session")
def installed_site(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """This checkout installed (as a wheel, so with its entry points) into a directory of its own."""
    source = copy_checkout(tmp_path_factory.mktemp("source"))
    site = tmp_path_factory.mktemp("site")
    done = subprocess.run([sys.executable, "-m", "pip", "install", "-q", "--no-deps", "--target", str(site), str(source)],
                          capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stdout + done.stderr
    return site


FRESH = """
import sys, fsspec
assert not any(name == "axon" or name.startswith("axon.") for name in sys.modules)
assert type(fsspec.filesystem("axon")).__name__ == "AxonFileSystem"
with fsspec.open(sys.argv[1]) as f:
    sys.stdout.buffer.write(f.read())
sys.stderr.write(sys.modules["axon"].__file__)
"""


@pytest.mark.slow  # builds and installs a wheel
def test_fsspec_finds_axon_by_its_entry_point_in_a_fresh_process(served: Served, installed_site: Path):
    env = {**os.environ, "PYTHONPATH": str(installed_site)}
    done = subprocess.run([sys.executable, "-c", FRESH, served.url(f"data/{'é ü 名前.txt'}")],
                          capture_output=True, env=env, timeout=60)
    assert done.returncode == 0, done.stderr.decode()
    assert done.stdout == served.local("data/é ü 名前.txt")
    assert done.stderr.decode().startswith(str(installed_site))  # the installed copy, not this checkout
