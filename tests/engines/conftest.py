"""Fixtures for the engines' tests: ``axon serve`` over real sockets, with its access log read back.

``served`` is one session-scoped ``axon serve`` (listing on, the JSON access log on stdout, which
this fixture collects into a file) over a corpus written once per session: many small files and
a Parquet table. ``mark = served.mark()`` before a read and ``served.requests_since(mark)``
after it give the access-log records of the requests in between, so a test can count the
requests an engine sent: at most one per batch, partition or block. (The log is written in
batches; a marker request, ``GET /api/health?mark=N``, tells when it has caught up.)
"""

from __future__ import annotations

import contextlib
import json
import re
import sys
import time
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parents[1] / "client"))
from live_server import live_server, nginx_static  # noqa: E402

pytest.importorskip("fsspec.asyn", reason="the fsspec extra is installed by scripts/setup.sh --all")

import fsspec  # noqa: E402

from axon.demo import make_demo_files  # noqa: E402
from axon.fsspec import AxonFileSystem  # noqa: E402

# The installed metadata may predate the entry point (an old editable install): name the class.
fsspec.register_implementation("axon", AxonFileSystem, clobber=True)


README = Path(__file__).resolve().parents[2] / "README.md"
SMALL_FILES = 300  # small files in corpus/small/, 1-4 KiB each, distinct bytes


@dataclass
class Served:
    address: str  # host:port, the start of every axon:// path
    root: Path
    log: Path
    _marks: int = 0

    def url(self, rel: str) -> str:
        return f"axon://{self.address}/{rel}"

    def run(self, block: str) -> tuple[dict, list[dict]]:
        """Run a README code block against this server (its 127.0.0.1:8000 made this server's
        address): the names it defined, and the access-log records of the requests it sent."""
        names: dict = {}
        mark = self.mark()
        exec(compile(block.replace("127.0.0.1:8000", self.address), "README.md", "exec"), names)
        return names, self.requests_since(mark)

    def mark(self) -> int:
        """Send a marker request and wait for its log record: the requests before it are logged."""
        self._marks += 1
        token = f"mark={self._marks}"
        with urllib.request.urlopen(f"http://{self.address}/api/health?{token}", timeout=10) as response:
            response.read()
        deadline = time.monotonic() + 15
        while True:
            records = self.requests()
            for index, record in enumerate(records):
                if record.get("query") == token:
                    return index
            if time.monotonic() > deadline:
                raise AssertionError(f"the access log never showed {token}")
            time.sleep(0.05)

    def requests_since(self, mark: int) -> list[dict]:
        """The records of the requests sent between ``mark`` and now (marker requests left out)."""
        end = self.mark()
        return [r for r in self.requests()[mark + 1 : end] if not r.get("query", "").startswith("mark=")]

    def requests(self) -> list[dict]:
        """The access-log records written so far (one JSON object a response)."""
        lines = self.log.read_text(encoding="utf-8", errors="replace").splitlines()
        records = []
        for line in lines:
            with contextlib.suppress(ValueError):
                record = json.loads(line)
                if isinstance(record, dict) and "path" in record:
                    records.append(record)
        return records



def _readme_block(heading: str, importing: str) -> str:
    """The one python block that imports ``importing`` in README's section ``heading`` (a
    ``### `` title, or its start), up to the next ``## ``."""
    section = README.read_text().split(f"\n### {heading}", 1)[1].split("\n## ", 1)[0]
    [block] = [b for b in re.findall(r"```python\n(.*?)```", section, re.DOTALL) if importing in b]
    return block


@pytest.fixture
def readme_block():
    """:func:`_readme_block`, as a fixture: a test module must not import conftest, since the
    Dask and Ray workers import the test module (to unpickle its functions) with a sys.path on
    which another directory's conftest may come first."""
    return _readme_block


def write_corpus(root: Path) -> None:
    small = root / "small"
    small.mkdir(parents=True)
    for i in range(SMALL_FILES):
        size = 1024 + (i * 97) % 3072
        (small / f"{i:04}.bin").write_bytes(bytes((i * 7 + j) % 251 for j in range(size)))
    tables = root / "tables"
    tables.mkdir()
    pa = pytest.importorskip("pyarrow")
    pq = pytest.importorskip("pyarrow.parquet")
    table = pa.table({"id": list(range(5000)), "name": [f"row-{i}" for i in range(5000)], "x": [i * 0.5 for i in range(5000)]})
    pq.write_table(table, tables / "rows.parquet", row_group_size=1000)
    parts = tables / "parts"
    parts.mkdir()
    for p in range(4):
        pq.write_table(table.slice(p * 1250, 1250), parts / f"part-{p}.parquet")


@contextlib.contextmanager
def axon_serving(root: Path, log: Path, env: dict[str, str] | None = None) -> Iterator[str]:
    """``axon serve root`` (listing on) with its JSON access log going to ``log``; yields host:port."""
    args = ["--browse", "--access-log", "--json-logs"]
    with live_server("native", root, env, args, log) as url:
        yield url.removeprefix("http://")


@pytest.fixture(scope="session")
def corpus(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("engines-root")
    write_corpus(root)
    return root


@pytest.fixture(scope="session")
def served(corpus: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Served]:
    log = tmp_path_factory.mktemp("engines-log") / "access.jsonl"
    with axon_serving(corpus, log) as address:
        yield Served(address, corpus, log)


# -- README's engines subsection: the files its examples name, served as its examples expect --------


@pytest.fixture(scope="session")
def readme_served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Served]:
    """``axon serve`` over what ``axon demo`` writes: the files README's examples read."""
    pytest.importorskip("pyarrow", reason="pyarrow is in the test extra (scripts/setup.sh --all)")
    root = tmp_path_factory.mktemp("engines-readme-root")
    assert make_demo_files(root)[1] is None
    log = tmp_path_factory.mktemp("engines-readme-log") / "access.jsonl"
    with axon_serving(root, log) as address:
        yield Served(address, root, log)


@pytest.fixture(scope="session")
def secret_served(corpus: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, str]]:
    """``axon serve`` over the corpus with ``AXON_SECRET`` set (every file needs a token):
    ``(host:port, secret)``."""
    secret = "engines-test-secret"
    log = tmp_path_factory.mktemp("engines-secret-log") / "access.jsonl"
    with axon_serving(corpus, log, {"AXON_SECRET": secret}) as address:
        yield address, secret


@pytest.fixture(scope="session")
def nginx_netloc(corpus: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """nginx serving the corpus as static files: a server that is not Axon (``host:port``)."""
    with nginx_static(corpus, tmp_path_factory.mktemp("engines-nginx")) as netloc:
        yield netloc
