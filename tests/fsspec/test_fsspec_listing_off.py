"""axon:// on a server that lists no directories (the default: no ``--browse``): every call that
needs the listing raises an error naming the switch, never an empty answer; files still read.
And each refusal is the exception a local filesystem would raise, its server's reason kept."""

from __future__ import annotations

import errno
from collections.abc import Iterator
from pathlib import Path

import fsspec
import pytest
from fsspec_served import Served, counting_fs
from live_server import live_server, runtime_available

from axon.fsspec import AxonFileSystem
from axon.fsspec.errors import ListingOff, error_for

SWITCH = r"axon serve --browse.*AXON_BROWSE=1"


@pytest.fixture(scope="module", params=["native", "uvicorn"])
def unlisted(request: pytest.FixtureRequest, corpus: Path) -> Iterator[Served]:
    why = runtime_available(request.param)
    if why is not None:
        pytest.skip(why)
    with live_server(request.param, corpus, {"AXON_BROWSE": "0"}) as url:
        yield Served(request.param, url.removeprefix("http://"), corpus)


@pytest.fixture
def fs() -> AxonFileSystem:
    return AxonFileSystem(skip_instance_cache=True)


CASES = [  # (call, path under the server): every way fsspec asks for a listing
    ("ls", "data/tree"), ("ls", ""), ("find", "data/tree"), ("find", ""), ("glob", "data/**/*.txt"),
    ("glob", "data/tree"), ("glob", "*"), ("walk", "data"), ("du", "data/tree"), ("get", "data/tree"),
    ("info", "data/tree"), ("exists", "data/tree"), ("isdir", "data/tree/a"),
]


@pytest.mark.parametrize(("call", "where"), CASES)
def test_what_needs_the_listing_raises_naming_the_switch(unlisted: Served, fs: AxonFileSystem, tmp_path: Path,
                                                         call: str, where: str):
    path = unlisted.path(where).rstrip("/")
    copy = tmp_path / "copy"
    calls = {
        "ls": lambda: fs.ls(path), "find": lambda: fs.find(path), "glob": lambda: fs.glob(path),
        "walk": lambda: list(fs.walk(path)), "du": lambda: fs.du(path),
        "get": lambda: fs.get(path, str(copy), recursive=True),
        "info": lambda: fs.info(path), "exists": lambda: fs.exists(path), "isdir": lambda: fs.isdir(path),
    }
    with pytest.raises(ListingOff, match=SWITCH) as raised:
        calls[call]()
    assert isinstance(raised.value, PermissionError) and raised.value.errno == errno.EACCES
    assert not copy.exists() or not any(copy.rglob("*"))


def test_the_limits_say_so_and_no_listing_is_asked(unlisted: Served):
    fs, seen = counting_fs()
    with pytest.raises(ListingOff):
        fs.find(unlisted.path("data"))
    assert ("GET", "/api/limits") in seen and not any(p.startswith("/browse") for _, p in seen), seen


def test_files_need_no_listing(unlisted: Served, fs: AxonFileSystem):
    top = unlisted.path("data/tree/top.txt")
    assert fs.exists(top) and fs.isfile(top) and not fs.isdir(top)
    assert fs.info(top)["size"] == 4 and fs.ls(top, detail=False) == [top]
    assert fs.cat(top) == b"top\n"
    with fs.open(unlisted.path("data/big.bin")) as f:
        f.seek(1000)
        assert f.read(10) == unlisted.local("data/big.bin")[1000:1010]
    assert not fs.exists(unlisted.path("data/nope.bin")) and not fs.isdir(unlisted.path("data/nope.bin"))
    with pytest.raises(FileNotFoundError, match="no such file"):
        fs.info(unlisted.path("data/nope.bin"))
    with pytest.raises(FileNotFoundError, match="no such file"):
        fs.ls(unlisted.path("data/nope.bin"))


def test_a_refused_path_says_why_not_forbidden(unlisted: Served, fs: AxonFileSystem):
    hidden = unlisted.path("data/.hidden")
    assert not fs.exists(hidden)  # not there for us: a name the server never serves
    with pytest.raises(PermissionError, match="hidden files are not served") as raised:
        fs.info(hidden)
    assert type(raised.value) is PermissionError


def test_pandas_on_a_directory_names_the_switch(unlisted: Served):
    pd = pytest.importorskip("pandas")
    pytest.importorskip("pyarrow")
    with pytest.raises(ListingOff, match=SWITCH):
        pd.read_parquet(unlisted.url("data/tree"))
    with fsspec.open(unlisted.url("data/tree/top.txt")) as f:  # a file still opens
        assert f.read() == b"top\n"


def test_refusals_are_the_exceptions_of_a_local_filesystem(unlisted: Served, fs: AxonFileSystem):
    with pytest.raises(ValueError, match="400: path contains a backslash"):
        fs.cat_file(unlisted.path("data/a\\b.txt"))
    with pytest.raises(OSError, match="414") as raised:
        fs.cat_file(unlisted.path("data/" + "x" * 20_000))
    assert raised.value.errno == errno.ENAMETOOLONG
    got = fs.cat([unlisted.path("data/a\\b.txt"), unlisted.path("data/tree/top.txt")], on_error="return")
    assert isinstance(got[unlisted.path("data/a\\b.txt")], ValueError)
    assert got[unlisted.path("data/tree/top.txt")] == b"top\n"


@pytest.mark.parametrize(("status", "kind", "code"), [
    (404, FileNotFoundError, errno.ENOENT), (401, PermissionError, errno.EACCES),
    (403, PermissionError, errno.EACCES), (400, ValueError, None), (413, OSError, errno.E2BIG),
    (414, OSError, errno.ENAMETOOLONG), (431, OSError, errno.E2BIG), (408, TimeoutError, errno.ETIMEDOUT),
    (504, TimeoutError, errno.ETIMEDOUT), (429, ConnectionError, errno.EAGAIN),
    (503, ConnectionError, errno.EAGAIN), (502, ConnectionError, errno.ECONNREFUSED),
    (500, OSError, errno.EIO), (418, OSError, None),
])
def test_each_status_maps_to_its_exception(status: int, kind: type, code: int | None):
    error = error_for(status, "what the server said", "h:1/a.bin")
    assert type(error) is kind and getattr(error, "errno", None) == code
    assert "what the server said" in str(error)
    assert status in (404, 401, 403) or str(status) in str(error)
