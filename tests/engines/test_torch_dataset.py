"""axon.engines.torch_dataset under a real DataLoader: the bytes on disk, one request per batch or
shard, workers forked or spawned, shards split by worker and by torch.distributed's rank."""

from __future__ import annotations

import errno
import hashlib
import json
import multiprocessing
import pickle
import subprocess
import sys
import time
from pathlib import Path

import pytest
from engine_support import engine
from live_server import dead_netloc, says_not_axon

torch = engine("torch", "torch")

from torch.utils.data import DataLoader  # noqa: E402

from axon.engines.torch_dataset import AxonDataset, AxonShards  # noqa: E402
from axon.fsspec.errors import NotAxonServer  # noqa: E402

SMALL_FILES = 300  # the files conftest.py writes into small/
RELS = [f"small/{i:04}.bin" for i in range(SMALL_FILES)]


def batch_requests(seen: list[dict], suffix: str = "") -> list[dict]:
    return [r for r in seen if r["path"] == "/api/stream-files" + suffix]


def limits_requests(seen: list[dict]) -> list[dict]:
    return [r for r in seen if r["path"] == "/api/limits"]


def sized(path: str, data: bytes) -> tuple[str, int]:
    """A decode hook at module level, so that it pickles for spawned workers."""
    return path, len(data)


# -- map-style -------------------------------------------------------------------------------------


def test_a_sampler_batch_is_one_request_and_the_bytes_are_the_files(served):
    assert sorted(p.name for p in (served.root / "small").iterdir()) == [rel[6:] for rel in RELS]
    dataset = AxonDataset([served.url(rel) for rel in RELS])
    mark = served.mark()
    batches = list(DataLoader(dataset, batch_size=50, collate_fn=list))
    seen = served.requests_since(mark)
    assert [data for batch in batches for data in batch] == [(served.root / rel).read_bytes() for rel in RELS]
    assert len(batch_requests(seen)) == len(batches) == SMALL_FILES // 50, seen
    assert not [r for r in seen if r["path"].startswith("/files/")], "a file was read on its own"


def test_the_decode_hook_gets_each_path_and_its_bytes_in_sampler_order(served):
    dataset = AxonDataset([served.url(rel) for rel in RELS[:40]], decode=sized)
    order = [7, 3, 3, 39, 0]
    assert dataset.__getitems__(order) == [(f"{served.address}/{RELS[i]}", len((served.root / RELS[i]).read_bytes()))
                                           for i in order]
    shuffled = list(DataLoader(dataset, batch_size=8, shuffle=True, collate_fn=list,
                               generator=torch.Generator().manual_seed(1)))
    assert sorted(sample for batch in shuffled for sample in batch) == sorted(dataset.__getitems__(range(40)))


def test_one_item_is_one_file_and_indexes_as_a_list_does(served):
    dataset = AxonDataset([f"{served.address}/{rel}" for rel in RELS[:10]])  # without axon:// too
    assert len(dataset) == 10
    assert dataset[3] == (served.root / RELS[3]).read_bytes()
    assert dataset[-1] == (served.root / RELS[9]).read_bytes()
    with pytest.raises(IndexError):
        dataset[10]
    with pytest.raises(IndexError):
        dataset.__getitems__([0, 10])
    with pytest.raises(TypeError):
        dataset[1.0]
    assert dataset.__getitems__([]) == []


def test_a_file_the_server_lacks_is_file_not_found_not_a_short_batch(served):
    dataset = AxonDataset([served.url(RELS[0]), served.url("small/missing.bin")])
    with pytest.raises(FileNotFoundError, match="missing.bin"):
        next(iter(DataLoader(dataset, batch_size=2, collate_fn=list)))
    with pytest.raises(FileNotFoundError, match="missing.bin"):
        dataset[1]


def test_a_path_without_a_server_is_refused_when_the_dataset_is_made():
    with pytest.raises(ValueError, match="host:port"):
        AxonDataset(["/small/0000.bin"])
    with pytest.raises(ValueError, match="host:port"):
        AxonDataset(["axon://127.0.0.1:1"])
    with pytest.raises(ValueError, match="host:port"):
        AxonDataset(["http://127.0.0.1:1/small/0000.bin"])
    with pytest.raises(TypeError):
        AxonDataset("axon://127.0.0.1:1/small/0000.bin")


def forked_loader(kind: str, served, rels: list[str]) -> dict:
    """``forked_loader.py`` (beside this module) run as a program of its own, on ``rels``."""
    program = Path(__file__).with_name("forked_loader.py")
    done = subprocess.run([sys.executable, str(program), kind, served.address, *rels],
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


def sha256_of(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def test_forked_workers_read_with_their_own_filesystem_after_the_parent_read(served):
    mark = served.mark()
    got = forked_loader("dataset", served, RELS)
    seen = served.requests_since(mark)
    assert got["samples"] == [sha256_of(served.root / rel) for rel in RELS]
    assert got["parent_before"] == sha256_of(served.root / RELS[0])
    assert got["parent_after"] == sha256_of(served.root / RELS[1])  # and the parent's still works
    assert len(batch_requests(seen)) == SMALL_FILES // 30, seen
    assert len(limits_requests(seen)) == 1, seen  # the parent's: the workers take its answer


def test_a_batch_past_the_servers_max_files_is_split_not_refused(served):
    dataset = AxonDataset([served.url(rel) for rel in RELS] * 4)  # 1,200 paths; the server takes 1,000
    mark = served.mark()
    got = dataset.__getitems__(range(len(dataset)))
    seen = served.requests_since(mark)
    assert got == [(served.root / rel).read_bytes() for rel in RELS] * 4
    assert len(batch_requests(seen)) == 2, seen


def test_the_dataset_pickles_after_use_and_the_copy_reads_the_same(served):
    dataset = AxonDataset([served.url(rel) for rel in RELS[:5]], decode=sized)
    dataset.__getitems__([0])  # a batch: the server's limits are asked
    copy = pickle.loads(pickle.dumps(dataset))
    mark = served.mark()
    assert copy.__getitems__([0, 4]) == dataset.__getitems__([0, 4])
    assert limits_requests(served.requests_since(mark)) == []  # the copy took what the original asked


@pytest.mark.slow
def test_spawned_workers_read_the_pickled_dataset(served):
    dataset = AxonDataset([served.url(rel) for rel in RELS[:120]], decode=sized)
    mark = served.mark()
    loader = DataLoader(dataset, batch_size=40, num_workers=2, multiprocessing_context="spawn", collate_fn=list)
    got = [sample for batch in loader for sample in batch]
    seen = served.requests_since(mark)
    assert got == [(f"{served.address}/{rel}", len((served.root / rel).read_bytes())) for rel in RELS[:120]]
    assert len(batch_requests(seen)) == 3, seen


# -- tar shards ------------------------------------------------------------------------------------


def shards_of(served, per_shard: int = 30, **kwargs) -> AxonShards:
    return AxonShards.from_paths([served.url(rel) for rel in RELS], per_shard, **kwargs)


def test_each_shard_is_one_tar_request_and_yields_its_files_in_order(served):
    mark = served.mark()
    got = list(shards_of(served))
    seen = served.requests_since(mark)
    assert got == [(f"{served.address}/{rel}", (served.root / rel).read_bytes()) for rel in RELS]
    assert len(batch_requests(seen, ".tar")) == SMALL_FILES // 30 and len(seen) == SMALL_FILES // 30, seen


def test_workers_split_the_shards_and_read_each_once(served):
    mark = served.mark()
    got = forked_loader("shards", served, RELS)
    seen = served.requests_since(mark)
    expected = [[f"{served.address}/{rel}", len((served.root / rel).read_bytes())] for rel in RELS]
    assert got["samples"] == expected
    assert len(batch_requests(seen, ".tar")) == SMALL_FILES // 30, seen


def test_explicit_ranks_take_disjoint_shards_that_cover_the_list(served):
    ranks = [shards_of(served, 40, rank=r, world_size=3) for r in range(3)]
    names = [[path for path, _ in rank] for rank in ranks]
    assert [len(shards) for shards in (r.my_shards() for r in ranks)] == [3, 3, 2]  # 8 shards of 40 (the last 20)
    assert sorted(sum(names, [])) == [f"{served.address}/{rel}" for rel in RELS]
    assert names[1][:40] == [f"{served.address}/{rel}" for rel in RELS[40:80]]


def test_shuffle_draws_one_shard_order_per_epoch_the_same_on_every_rank(served):
    one, two = shards_of(served, shuffle=True, seed=5), shards_of(served, shuffle=True, seed=5)
    assert one.my_shards() == two.my_shards() != shards_of(served).my_shards()
    first = one.my_shards()
    one.set_epoch(1)
    assert one.my_shards() != first and sorted(one.my_shards()) == sorted(first)


def test_a_missing_file_fails_its_shard_with_file_not_found(served):
    shards = AxonShards([[served.url(RELS[0]), served.url("small/missing.bin")]])
    with pytest.raises(FileNotFoundError, match="missing.bin"):
        list(shards)


def _reads(path: str) -> list:
    """Every way the datasets read ``path``: one item, a sampler's batch, a shard."""
    return [lambda: AxonDataset([path])[0], lambda: AxonDataset([path]).__getitems__([0]),
            lambda: list(AxonShards([[path]]))]


def test_a_server_that_is_down_is_named_by_host_and_port():
    netloc = dead_netloc()
    for read in _reads(f"axon://{netloc}/small/0000.bin"):
        with pytest.raises(OSError, match=netloc):
            read()


def test_asking_the_limits_before_the_workers_leaves_a_server_that_is_down_to_the_reads():
    netloc = dead_netloc()
    dataset = AxonDataset([f"axon://{netloc}/small/0000.bin"])
    dataset.ask_limits()  # what a loader does before its workers start: nothing raised here
    with pytest.raises(OSError, match=netloc):
        dataset.__getitems__([0])  # but where a read is, naming the server


def test_a_server_that_is_not_axon_says_so(nginx_netloc):
    for read in _reads(f"axon://{nginx_netloc}/small/missing.bin"):
        with pytest.raises(NotAxonServer) as caught:
            read()
        assert says_not_axon(str(caught.value), nginx_netloc), caught.value


def test_a_shard_past_the_servers_max_files_is_refused_naming_the_limit(served):
    with pytest.raises(OSError, match="at most 1000 files") as refused:
        list(AxonShards([[served.url(RELS[0])] * 1001]))
    assert refused.value.errno == errno.E2BIG


def test_shards_pickle_and_the_copy_reads_the_same(served):
    shards = shards_of(served, 100, decode=sized, rank=1, world_size=2)
    assert list(pickle.loads(pickle.dumps(shards))) == list(shards)


def test_bad_shards_and_ranks_are_refused_when_made(served):
    with pytest.raises(ValueError, match="one server"):
        AxonShards([[served.url(RELS[0]), "axon://127.0.0.1:1/small/0001.bin"]])
    with pytest.raises(ValueError, match="at least one"):
        AxonShards([[]])
    with pytest.raises(TypeError):
        AxonShards([served.url(RELS[0])])  # a list of paths is not a list of shards
    with pytest.raises(ValueError, match="both"):
        AxonShards([[served.url(RELS[0])]], rank=0)
    with pytest.raises(ValueError, match="rank"):
        AxonShards([[served.url(RELS[0])]], rank=2, world_size=2)


def _distributed_rank(address: str, store: str, rank: int, out: str) -> None:
    """One rank of a two-process gloo job: the files its AxonShards yields, written to ``out``."""
    torch.distributed.init_process_group("gloo", init_method=f"file://{store}", rank=rank, world_size=2)
    try:
        shards = AxonShards.from_paths([f"axon://{address}/{rel}" for rel in RELS], 50)
        with open(out, "w") as f:
            json.dump([path for path, _ in shards], f)
    finally:
        torch.distributed.destroy_process_group()


@pytest.mark.slow
def test_ranks_of_an_initialised_process_group_split_the_shards(served, tmp_path):
    context = multiprocessing.get_context("spawn")  # a clean process: no event loop thread forked
    outs = [tmp_path / f"rank{r}.json" for r in range(2)]
    ranks = [context.Process(target=_distributed_rank, args=(served.address, str(tmp_path / "store"), r, str(outs[r])))
             for r in range(2)]
    for process in ranks:
        process.start()
    for process in ranks:
        process.join(120)
        assert process.exitcode == 0
    names = [json.loads(out.read_text()) for out in outs]
    expect = [f"{served.address}/{rel}" for rel in RELS]
    assert names[0] == expect[0:50] + expect[100:150] + expect[200:250]
    assert names[1] == expect[50:100] + expect[150:200] + expect[250:300]


# -- a server with a secret -------------------------------------------------------------------------


def test_both_datasets_authenticate_with_the_secret_or_a_token(secret_served, corpus):
    from axon.signing import mint_token

    address, secret = secret_served
    paths = [f"axon://{address}/{rel}" for rel in RELS[:6]]
    expected = [(corpus / rel).read_bytes() for rel in RELS[:6]]
    token = mint_token(secret, int(time.time()) + 600)
    for options in ({"secret": secret}, {"token": token}):
        assert AxonDataset(paths, storage_options=options).__getitems__(range(6)) == expected
        assert [data for _, data in AxonShards([paths], storage_options=options)] == expected
    with pytest.raises(PermissionError):
        AxonDataset(paths).__getitems__([0])
    with pytest.raises(PermissionError):
        list(AxonShards([paths]))


# -- README ----------------------------------------------------------------------------------------


def test_the_readme_example_runs_and_reads_the_files(readme_block, readme_served):
    names, seen = readme_served.run(readme_block("Engines: ", "axon.engines.torch_dataset"))
    expected = [f"sample {i}" for i in range(8)]
    assert names["texts"] == expected
    assert names["worker_texts"] == expected
    assert [r["path"] for r in seen if "stream-files" in r["path"]].count("/api/stream-files") == 2, seen
    assert [r["path"] for r in seen if "stream-files" in r["path"]].count("/api/stream-files.tar") == 2, seen
