"""axon:// against a real server (axon serve and uvicorn): every answer compared with the files
read locally; requests counted with aiohttp's own tracing, on the real connection."""

from __future__ import annotations

import asyncio
import os
import random
import time
import urllib.error
import urllib.request
from pathlib import Path

import fsspec
import pytest
from fsspec_served import ODD_NAMES, SMALL_FILES, Served, counting_fs
from live_server import live_server

from axon.fsspec import AxonFileSystem

SMALL = [f"data/small/f{i:03}.bin" for i in range(SMALL_FILES)]


# -- cat of many paths: batches ------------------------------------------------------------------


def test_cat_of_many_paths_is_the_local_bytes_in_few_requests(served: Served):
    fs, seen = counting_fs()
    paths = SMALL + [f"data/{name}" for name in ODD_NAMES]
    got = fs.cat([served.path(p) for p in paths])
    assert got == {served.path(p): served.local(p) for p in paths}
    posts = [s for s in seen if s == ("POST", "/api/stream-files")]
    assert len(posts) == 1 and len(seen) == 2, seen  # the limits, then one batch


def test_batches_are_sized_by_files_per_batch_and_results_keep_order(served: Served):
    fs, seen = counting_fs(files_per_batch=7, batch_concurrency=3)
    paths = [served.path(p) for p in SMALL]
    got = fs.cat(paths)
    assert list(got) == sorted(paths)  # fsspec's cat answers a dict by sorted path
    assert all(got[served.path(p)] == served.local(p) for p in SMALL)
    assert seen.count(("POST", "/api/stream-files")) == -(-SMALL_FILES // 7)


def test_a_long_list_is_spread_over_connections_unless_one_batch_is_asked(served: Served):
    import aiohttp

    from axon.fsspec.transfer import SPREAD_FLOOR

    connections: list[int] = []

    async def on_connect(session, context, params):
        connections.append(1)

    trace = aiohttp.TraceConfig()
    trace.on_connection_create_end.append(on_connect)
    fs = AxonFileSystem(skip_instance_cache=True, batch_concurrency=4, client_kwargs={"trace_configs": [trace]})
    count = 4 * SPREAD_FLOOR + 100  # more than four batches' floor: four batches, side by side
    rels = [SMALL[i % len(SMALL)] for i in range(count)]
    got = fs.cat_ranges([served.path(rel) for rel in rels], None, None)
    assert got == [served.local(rel) for rel in rels]
    assert len(connections) >= 4, connections  # one a batch in flight (the limits' connection among them)
    connections.clear()
    fs, seen = counting_fs(batch_concurrency=4)
    fs.cat_ranges([served.path(rel) for rel in rels], None, None)
    assert seen.count(("POST", "/api/stream-files")) == 4
    fs, seen = counting_fs(batch_concurrency=4)
    fs.cat_ranges([served.path(rel) for rel in rels], None, None, one_batch=True)
    assert seen.count(("POST", "/api/stream-files")) == 2  # as the server's max_files (1000) cuts it
    fs, seen = counting_fs(batch_concurrency=4)
    fs.cat_ranges([served.path(rel) for rel in rels[:SPREAD_FLOOR]], None, None)
    assert seen.count(("POST", "/api/stream-files")) == 1  # up to the floor, a list is one batch


def test_cat_of_full_urls_and_a_glob(served: Served, fs: AxonFileSystem):
    got = fs.cat(served.url("data/small/f00*.bin"))
    assert got == {served.path(f"data/small/f00{i}.bin"): served.local(f"data/small/f00{i}.bin") for i in range(10)}
    assert fs.cat(served.url("data/tree/top.txt")) == b"top\n"  # one path: the bytes themselves


def test_cat_a_file_of_several_megabytes(served: Served, fs: AxonFileSystem):
    assert fs.cat([served.path("data/big.bin")])[served.path("data/big.bin")] == served.local("data/big.bin")


@pytest.mark.parametrize("path", ["h:1/a.bin", "h:1/dir/", "h:1//", "/", "", "axon://h:1/a.bin/", "axon::h:1/a",
                                  "axon:h:1/a", "axonx/a", "http://h/a", "h:1/axon://a", ["h:1/a/", "axon://h:1/b"]])
def test_strip_protocol_is_fsspecs(path):
    from fsspec.spec import AbstractFileSystem

    generic = AbstractFileSystem._strip_protocol.__func__  # fsspec's own, with our protocol
    assert AxonFileSystem._strip_protocol(path) == generic(AxonFileSystem, path)


@pytest.mark.parametrize("path", ["/data/a.bin", "user@host:1/a.bin", "axon://user@host:1/a.bin", "axon:///a.bin"])
def test_a_path_without_the_server_first_is_refused(path: str):
    """cat, cat_ranges and get take a path apart each its own way (cat after fsspec's expansion,
    without stripping again): each refuses a path that does not begin with host:port."""
    fs = AxonFileSystem(skip_instance_cache=True)
    with pytest.raises(ValueError, match="starts with the server's host:port"):
        fs.cat([path, "127.0.0.1:1/b.bin"])
    with pytest.raises(ValueError, match="starts with the server's host:port"):
        fs.cat_ranges([path], [0], [1])


@pytest.mark.parametrize("on_error", ["raise", "omit", "return"])
def test_a_missing_path_follows_on_error(served: Served, on_error: str):
    fs, seen = counting_fs()
    paths = [served.path(p) for p in ["data/small/f001.bin", "data/nope.bin", "data/tree/top.txt", "data/.hidden"]]
    if on_error == "raise":
        with pytest.raises((FileNotFoundError, PermissionError), match=r"nope\.bin|\.hidden"):
            fs.cat(paths, on_error=on_error)
        return
    got = fs.cat(paths, on_error=on_error)
    good = {served.path("data/small/f001.bin"): served.local("data/small/f001.bin"),
            served.path("data/tree/top.txt"): b"top\n"}
    if on_error == "omit":
        assert got == good
    else:
        assert {k: v for k, v in got.items() if isinstance(v, bytes)} == good
        assert isinstance(got[served.path("data/nope.bin")], FileNotFoundError)
        assert isinstance(got[served.path("data/.hidden")], (FileNotFoundError, PermissionError))
    # Refused once (both names in its details), then served without them: two batches.
    assert seen.count(("POST", "/api/stream-files")) == 2


def test_cat_file_reads_ranges_of_one_file(served: Served, fs: AxonFileSystem):
    data = served.local("data/big.bin")
    path = served.path("data/big.bin")
    for start, end in [(None, None), (0, 10), (5, 5), (100, 50), (-100, None), (-100, -10), (10, -10),
                       (-5, 10**7), (len(data) - 3, None), (len(data), None), (len(data) + 5, None), (-(10**8), 3)]:
        assert fs.cat_file(path, start, end) == data[start:end], (start, end)


# -- cat_ranges: slices inside a batch -----------------------------------------------------------


def test_cat_ranges_with_negative_starts_and_duplicates(served: Served):
    fs, seen = counting_fs()
    rng = random.Random(7)
    names = SMALL[:20] + ["data/big.bin", "data/odd name.txt"]
    paths, starts, ends = [], [], []
    for _ in range(200):
        name = rng.choice(names)
        size = len(served.local(name))
        bound = lambda: rng.choice([None, 0, 1, -1, size, size + 3, -size - 3, rng.randrange(-size - 2, size + 3)])  # noqa: E731
        paths.append(name)
        starts.append(bound())
        ends.append(bound())
    paths += ["data/big.bin"] * 3  # the same slice three times
    starts += [1000] * 3
    ends += [2000] * 3
    got = fs.cat_ranges([served.path(p) for p in paths], starts, ends)
    want = [served.local(p)[s:e] for p, s, e in zip(paths, starts, ends)]
    assert got == want
    assert all(method == "POST" or path == "/api/limits" for method, path in seen), seen


def test_cat_ranges_of_an_empty_file_and_past_the_end(served: Served, fs: AxonFileSystem):
    empty = next(p for p in SMALL if not served.local(p))
    short = "data/tree/top.txt"
    got = fs.cat_ranges([served.path(empty), served.path(empty), served.path(short), served.path(short)],
                        [0, -3, 10, 2], [None, None, 20, None])
    assert got == [b"", b"", b"", b"p\n"]


def test_cat_ranges_on_error(served: Served, fs: AxonFileSystem):
    paths = [served.path("data/tree/top.txt"), served.path("data/nope.bin")]
    got = fs.cat_ranges(paths, [0, 0], [2, 2])
    assert got[0] == b"to" and isinstance(got[1], FileNotFoundError)
    with pytest.raises(FileNotFoundError):
        fs.cat_ranges(paths, [0, 0], [2, 2], on_error="raise")


# -- open: ranged GETs -----------------------------------------------------------------------------


def test_open_seek_read(served: Served):
    fs, seen = counting_fs(block_size=64 * 1024)
    data = served.local("data/big.bin")
    with fs.open(served.path("data/big.bin")) as f:
        assert f.size == len(data)
        f.seek(1_000_000)
        assert f.read(10) == data[1_000_000:1_000_010]
        f.seek(-5, os.SEEK_END)
        assert f.read() == data[-5:]
        f.seek(0)
        assert f.read(100) == data[:100]
        assert f.tell() == 100
    gets = [s for s in seen if s[0] == "GET"]
    assert len(gets) == 3 and len(seen) == 4  # one HEAD, then one ranged GET per block read


def test_open_an_empty_file_and_read_it_all(served: Served, fs: AxonFileSystem):
    empty = next(p for p in SMALL if not served.local(p))
    with fs.open(served.path(empty)) as f:
        assert f.read() == b""
    with fs.open(served.path(f"data/{ODD_NAMES[1]}")) as f:
        assert f.read() == served.local(f"data/{ODD_NAMES[1]}")


def test_a_file_changed_while_open_is_an_error(served: Served, fs: AxonFileSystem, tmp_path: Path):
    name = f"data/changing-{served.runtime}.bin"
    target = served.root / name
    target.write_bytes(b"a" * 100_000)
    past = time.time() - 60
    os.utime(target, (past, past))
    with fs.open(served.path(name), block_size=1000, cache_type="none") as f:
        assert f.read(10) == b"a" * 10
        target.write_bytes(b"b" * 100_000)
        f.seek(50_000)
        with pytest.raises(OSError, match="changed"):
            f.read(10)


def test_open_async_reads_ranges(served: Served):
    data = served.local("data/big.bin")

    async def read() -> list[bytes]:
        fs = AxonFileSystem(skip_instance_cache=True, asynchronous=True)
        session = await fs.set_session()
        try:
            async with await fs.open_async(served.path("data/big.bin")) as f:
                first = await f.read(100)
                f.seek(len(data) - 10)
                last = await f.read(1000)  # past the end: what there is
                return [first, last, await f.read()]
        finally:
            await session.close()

    assert asyncio.run(read()) == [data[:100], data[-10:], b""]


def test_open_for_writing_is_refused(served: Served, fs: AxonFileSystem):
    with pytest.raises(NotImplementedError, match="read-only"):
        fs.open(served.path("data/new.bin"), "wb")


# -- the listing: ls, info, find, glob -------------------------------------------------------------


def test_ls_and_info(served: Served, fs: AxonFileSystem):
    listed = fs.ls(served.path("data/tree"))
    assert {(e["name"], e["type"]) for e in listed} == {
        (served.path("data/tree/a"), "directory"), (served.path("data/tree/empty"), "directory"),
        (served.path("data/tree/top.txt"), "file"),
    }
    top = next(e for e in listed if e["type"] == "file")
    assert top["size"] == 4 and top["mtime"] == pytest.approx((served.root / "data/tree/top.txt").stat().st_mtime)
    assert fs.ls(served.path("data/tree/empty"), detail=False) == []
    fresh = AxonFileSystem(skip_instance_cache=True)  # no listing cached: a HEAD
    info = fresh.info(served.path("data/big.bin"))
    assert info["type"] == "file" and info["size"] == len(served.local("data/big.bin")) and info["ETag"]
    assert fresh.info(served.path("data/tree/a"))["type"] == "directory"
    assert fresh.info(served.netloc)["type"] == "directory"
    assert fresh.ls(served.path("data/tree/top.txt"), detail=False) == [served.path("data/tree/top.txt")]
    with pytest.raises(FileNotFoundError):
        fresh.info(served.path("data/nope"))
    with pytest.raises(FileNotFoundError):
        fresh.ls(served.path("data/nope"))


def test_exists_isdir_isfile(served: Served, fs: AxonFileSystem):
    assert fs.exists(served.path("data/tree/top.txt")) and fs.isfile(served.path("data/tree/top.txt"))
    assert fs.isdir(served.path("data/tree")) and not fs.isfile(served.path("data/tree"))
    assert not fs.exists(served.path("data/nope")) and not fs.isdir(served.path("data/nope"))
    assert not fs.exists(served.path("data/.hidden"))
    assert not fs.isdir(served.path("data/tree/top.txt"))


def test_find_and_glob_match_the_local_tree(served: Served, fs: AxonFileSystem):
    local = fsspec.filesystem("file")
    root = str(served.root)

    def rel(names, prefix):
        return sorted(n.removeprefix(prefix) for n in names)

    assert rel(fs.find(served.path("data/tree")), served.netloc) == rel(local.find(f"{root}/data/tree"), root)
    assert (rel(fs.find(served.path("data/tree"), withdirs=True), served.netloc)
            == rel(local.find(f"{root}/data/tree", withdirs=True), root))
    assert rel(fs.glob(served.path("data/small/f05*")), served.netloc) == rel(local.glob(f"{root}/data/small/f05*"), root)
    assert rel(fs.glob(served.path("data/**/*.txt")), served.netloc) == rel(local.glob(f"{root}/data/**/*.txt"), root)
    assert fs.du(served.path("data/tree")) == 9


# -- get: batches written to local files -----------------------------------------------------------


def test_get_a_tree_in_batches(served: Served, tmp_path: Path):
    fs, seen = counting_fs(files_per_batch=25)
    fs.get(served.path("data/small"), str(tmp_path / "copy"), recursive=True)
    assert sorted(p.name for p in (tmp_path / "copy").iterdir()) == sorted(Path(p).name for p in SMALL)
    assert all((tmp_path / "copy" / Path(p).name).read_bytes() == served.local(p) for p in SMALL)
    assert seen.count(("POST", "/api/stream-files")) == -(-SMALL_FILES // 25)
    fs.get(served.path("data/tree"), str(tmp_path / "tree"), recursive=True)
    assert (tmp_path / "tree/a/b/leaf.txt").read_bytes() == b"leaf\n" and (tmp_path / "tree/empty").is_dir()


def test_get_file_and_a_missing_one(served: Served, fs: AxonFileSystem, tmp_path: Path):
    fs.get_file(served.path("data/tree/top.txt"), str(tmp_path / "top.txt"))
    assert (tmp_path / "top.txt").read_bytes() == b"top\n"
    with pytest.raises(FileNotFoundError):
        fs.get([served.path("data/tree/top.txt"), served.path("data/nope.bin")], str(tmp_path / "two") + "/")


# -- signing ------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def signed_server(corpus: Path):
    """axon serve with a secret: every request but the limits must be signed or carry a token."""
    with live_server("native", corpus, {"AXON_SECRET": "fsspec-secret", "AXON_BROWSE": "1"}) as url:
        yield url.removeprefix("http://")


def test_sign_makes_urls_the_server_accepts_and_the_secret_authenticates(signed_server: str, corpus: Path):
    fs = AxonFileSystem(skip_instance_cache=True, secret="fsspec-secret")
    url = fs.sign(f"{signed_server}/data/{ODD_NAMES[1]}", expiration=60)
    with urllib.request.urlopen(url) as response:
        assert response.read() == (corpus / "data" / ODD_NAMES[1]).read_bytes()
    expired = fs.sign(f"{signed_server}/data/tree/top.txt", expiration=-10)
    with pytest.raises(urllib.error.HTTPError) as refused:
        urllib.request.urlopen(expired)
    assert refused.value.code == 403
    paths = [f"{signed_server}/{p}" for p in SMALL[:5]]
    assert fs.cat(paths) == {p: (corpus / p.split("/", 1)[1]).read_bytes() for p in paths}
    assert fs.ls(f"{signed_server}/data/tree", detail=False)
    with pytest.raises(PermissionError):
        AxonFileSystem(skip_instance_cache=True).cat(paths)
    with pytest.raises(NotImplementedError, match="secret"):
        AxonFileSystem(skip_instance_cache=True).sign(paths[0])


def test_one_cat_reads_from_two_servers(served: Served, signed_server: str, corpus: Path):
    # The token minted from the secret goes to both; the server without one ignores it.
    fs = AxonFileSystem(skip_instance_cache=True, secret="fsspec-secret")
    paths = [served.path(p) for p in SMALL[:7]] + [f"{signed_server}/{p}" for p in SMALL[3:12]]
    assert fs.cat(paths) == {p: (corpus / p.split("/", 1)[1]).read_bytes() for p in paths}


def test_a_forked_child_dropping_the_filesystem_leaves_the_parents_connections(served: Served):
    # A DataLoader worker forked after the parent read drops the inherited filesystem when it
    # builds its own, and collects garbage. The parent's kept connection must still answer its
    # next read: the child shares the parent's epoll set, and a session closed or an aiohttp
    # transport collected there took the parent's connection (or one with the same descriptor
    # number) off it.
    import gc
    import threading

    fs = AxonFileSystem(skip_instance_cache=True)
    path = served.path(SMALL[0])
    assert fs.cat_file(path) == served.local(SMALL[0])  # a kept connection, idle in the pool
    pid = os.fork()
    if pid == 0:  # the child: drop the filesystem as a worker does, and leave without cleanup
        try:
            del fs
            gc.collect()
        finally:
            os._exit(0)
    os.waitpid(pid, 0)
    got: list[bytes] = []
    reader = threading.Thread(target=lambda: got.append(fs.cat_file(path)), daemon=True)
    reader.start()
    reader.join(10)
    assert got == [served.local(SMALL[0])], "the parent's read on its kept connection never ended"
    fs.close()


def test_reads_that_start_together_ask_the_limits_once(served: Served):
    # Reading ahead starts several batches at once on a new filesystem: one GET /api/limits.
    fs, seen = counting_fs()

    async def together():
        return await asyncio.gather(*[fs._cat([served.path(p)]) for p in SMALL[:6]])

    out = asyncio.run_coroutine_threadsafe(together(), fs.loop).result(30)
    assert [list(o.values())[0] for o in out] == [served.local(p) for p in SMALL[:6]]
    assert seen.count(("GET", "/api/limits")) == 1, seen
    fs.close()
