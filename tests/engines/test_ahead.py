"""axon.engines.ahead and the torch loader that uses it: batches read ahead, bounded, one request
each, cancelled when the reader stops, and a failure raised on the batch that failed; through a
relay that makes each round trip 100 ms, so that reads which overlap show."""

from __future__ import annotations

import itertools
import threading
import time
from concurrent.futures import Future

import psutil
import pytest
from engine_support import engine

from axon.bench import relay
from axon.engines.ahead import AHEAD, Ahead, PlannedBatch, in_order

torch = engine("torch", "torch")

from torch.utils.data import DataLoader, SequentialSampler  # noqa: E402

from axon.engines.torch_dataset import AheadBatchSampler, AxonDataset, AxonShards  # noqa: E402

RELS = [f"small/{i:04}.bin" for i in range(300)]  # the files conftest.py writes
ROUND_TRIP = 0.1  # the relay holds each chunk 50 ms each way
# One request after another, N round trips take N * ROUND_TRIP at least, whatever the load; read
# ahead they overlap, and take a fraction of it (generous here: the machine may be busy).
FLOOR_SHARE = 0.75


@pytest.fixture(scope="module")
def slow(served):
    """``served`` behind the relay: ``(address, served)``."""
    with relay.start("127.0.0.1:0", served.address, ROUND_TRIP * 1000 / 2) as link:
        yield f"127.0.0.1:{link.port}", served


def expected(served, rels):
    return [(served.root / rel).read_bytes() for rel in rels]


def kept_connections(port: int) -> int:
    """This process's TCP connections to ``port`` that are open."""
    return sum(1 for c in psutil.Process().net_connections("tcp")
               if c.raddr and c.raddr.port == port and c.status == psutil.CONN_ESTABLISHED)


# -- the plan and the bound -----------------------------------------------------------------------


def test_each_batch_names_the_batches_its_process_reads_next():
    alone = list(AheadBatchSampler(SequentialSampler(range(10)), 2, ahead=2))
    assert [list(b) for b in alone] == [[0, 1], [2, 3], [4, 5], [6, 7], [8, 9]]
    token = alone[0].key[0]
    assert [b.key for b in alone] == [(token, k) for k in range(5)]
    assert alone[0].ahead == [((token, 1), [2, 3]), ((token, 2), [4, 5])]
    assert alone[3].ahead == [((token, 4), [8, 9])] and alone[4].ahead == []
    # Two workers: batch k goes to worker k % 2, which reads k + 2 and k + 4 next.
    dealt = list(AheadBatchSampler(SequentialSampler(range(12)), 2, num_workers=2, ahead=2))
    assert [[k for (_, k), _ in b.ahead] for b in dealt] == [[2, 4], [3, 5], [4], [5], [], []]
    again = list(AheadBatchSampler(SequentialSampler(range(4)), 2))
    assert again[0].key[0] != token  # a new pass is a new plan


def test_reads_ahead_stay_within_the_bound_and_stale_ones_are_cancelled():
    ahead = Ahead(2)
    started: list[int] = []

    def start(batch):
        started.append(batch)
        return Future()

    ahead.plan([(("a", 1), [1]), (("a", 2), [2]), (("a", 3), [3])], start)
    assert started == [[1], [2]] and len(ahead) == 2
    first = ahead.take(("a", 1), [1])
    ahead.plan([(("a", 2), [2]), (("a", 3), [3])], start)
    assert started == [[1], [2], [3]] and len(ahead) == 2 and first is not None
    _, kept = ahead._reads[("a", 3)]
    assert ahead.take(("a", 5), [5]) is None and len(ahead) == 0  # 2 and 3 will never be asked for now
    assert kept.cancelled()
    with pytest.raises(ValueError):
        Ahead(-1)


def test_reads_ahead_fit_the_bytes_of_the_largest_batch_read():
    ahead = Ahead(8, max_bytes=100)
    batches = [(("a", k), [k]) for k in range(1, 9)]
    ahead.plan(batches, lambda batch: Future())
    assert len(ahead) == 4  # no batch read yet: as far as before the bytes counted
    ahead.measured(30)
    ahead.plan(batches, lambda batch: Future())
    assert ahead.room == 3 and len(ahead) == 4  # none cancelled, none more started
    ahead.measured(10)
    assert ahead.room == 3  # the largest batch read counts
    ahead.measured(1000)
    assert ahead.room == 1  # one batch larger than the bound: still one ahead
    ahead.take(("a", 4), [4])
    ahead.plan(batches[4:], lambda batch: Future())
    assert len(ahead) == 1
    small = Ahead(8)
    small.measured(64 * 4096)
    assert small.room == 8 and Ahead(0).room == 0
    with pytest.raises(ValueError):
        Ahead(2, max_bytes=0)


def test_a_read_ahead_serves_only_its_own_indices_and_a_plan_drops_what_it_no_longer_names():
    ahead = Ahead(3)
    ahead.plan([(("a", 1), [2, 3]), (("a", 2), [4, 5])], lambda batch: Future())
    _, other = ahead._reads[("a", 2)]
    assert ahead.take(("a", 1), [2, 3, 4]) is None  # another batch size at the same place
    ahead.plan([], lambda batch: Future())  # a batch that plans nothing: nothing ahead is wanted
    assert other.cancelled() and len(ahead) == 0


def test_a_run_of_consecutive_indices_plans_the_runs_its_process_gets_next():
    assert in_order(range(0, 4), 18, 1, 2) == (("in order", 0), [(("in order", 4), range(4, 8)),
                                                                  (("in order", 8), range(8, 12))])
    # Three workers: batch k goes to worker k % 3, so worker 1 reads the runs at 4, 16, 28...
    assert in_order([4, 5, 6, 7], 18, 3, 4) == (("in order", 4), [(("in order", 16), range(16, 18))])
    assert in_order([16, 17], 18, 3, 4) == (("in order", 16), [])
    for batch in ([3, 1, 2], [0, 2, 4], [], [17, 18], [-1, 0]):  # shuffled, strided, empty, past the ends
        assert in_order(batch, 18, 1, 4) == (None, [])


def test_runs_are_read_ahead_from_a_pass_s_first_run_or_once_a_run_came_as_foretold():
    ahead = Ahead(2)
    assert ahead.in_order(range(8, 12), 40, 0, 1) == (("in order", 8), [])  # a run out of the blue
    assert ahead.in_order(range(16, 20), 40, 0, 1) == (("in order", 16), [])  # not the run 8-11 foretold
    key, following = ahead.in_order(range(20, 24), 40, 0, 1)  # the run 16-19 foretold: the order holds
    assert key == ("in order", 20) and [run for _, run in following] == [range(24, 28), range(28, 32)]
    assert ahead.in_order([3, 1, 2], 40, 0, 1) == (None, [])
    assert ahead.in_order(range(36, 40), 40, 0, 1)[1] == []  # the last run: it foretells none
    # The first run an ordered pass deals each worker (worker 1 of 2 gets 4-7, then 12-15), where
    # no run foretold another: at a process's start, or after the last run of a pass.
    assert [run for _, run in Ahead(2).in_order(range(4, 8), 40, 1, 2)[1]] == [range(12, 16), range(20, 24)]
    assert [run for _, run in ahead.in_order(range(0, 4), 40, 0, 1)[1]] == [range(4, 8), range(8, 12)]
    assert ahead.in_order(range(0, 4), 40, 0, 1)[1] == []  # the run 0-3 foretold 4-7
    with pytest.raises(ValueError):
        AxonDataset(["127.0.0.1:1/a"], ahead=True)


# -- over a real server -----------------------------------------------------------------------------


def test_the_loader_reads_ahead_one_request_a_batch(slow):
    address, served = slow
    dataset = AxonDataset([f"axon://{address}/{rel}" for rel in RELS[:240]])
    mark = served.mark()
    began = time.monotonic()
    batches = list(dataset.loader(batch_size=20, collate_fn=list))
    took = time.monotonic() - began
    seen = served.requests_since(mark)
    assert [data for batch in batches for data in batch] == expected(served, RELS[:240])
    assert len([r for r in seen if r["path"] == "/api/stream-files"]) == 12, seen
    # Batch after batch, 12 round trips take 1.2 s at least; read ahead, they overlap. And
    # overlapping requests took connections of their own, which the pool keeps (a plain
    # DataLoader never needs a second one).
    assert took < 12 * ROUND_TRIP * FLOOR_SHARE, took
    port = int(address.rpartition(":")[2])
    assert kept_connections(port) >= 2
    dataset.close()
    plain = AxonDataset([f"axon://{address}/{rel}" for rel in RELS[:60]])
    with plain:  # shuffled, nothing is read ahead: one connection does, one request a batch
        mark = served.mark()
        shuffled = DataLoader(plain, batch_size=20, shuffle=True, collate_fn=list)
        assert sorted(d for b in shuffled for d in b) == sorted(expected(served, RELS[:60]))
        assert kept_connections(port) == 1
        assert len([r for r in served.requests_since(mark) if r["path"] == "/api/stream-files"]) == 3


def test_a_plain_loader_in_order_without_workers_reads_ahead(served):
    with AxonDataset([served.url(rel) for rel in RELS[:100]], ahead=3) as dataset:
        mark = served.mark()
        batches = iter(DataLoader(dataset, batch_size=10, collate_fn=list))
        got = next(batches)
        _, ahead = dataset._fs.get()
        assert len(ahead) == 3  # the next three batches are under way
        got += [data for batch in batches for data in batch]
        seen = served.requests_since(mark)
    assert got == expected(served, RELS[:100])
    assert len([r for r in seen if r["path"] == "/api/stream-files"]) == 10, seen


def test_a_plain_loader_reads_further_ahead_once_its_batches_are_known_to_be_small(served):
    rels = RELS[:200]
    with AxonDataset([served.url(rel) for rel in rels]) as dataset:
        mark = served.mark()
        batches = iter(DataLoader(dataset, batch_size=5, collate_fn=list))
        got = next(batches)
        _, ahead = dataset._fs.get()
        assert len(ahead) == 4  # the first batch's size was not known when it planned
        got += next(batches)
        assert len(ahead) == AHEAD  # 5 small files a batch: as many as the default's count fit its bytes
        got += [data for batch in batches for data in batch]
        seen = served.requests_since(mark)
    assert got == expected(served, rels)
    assert len([r for r in seen if r["path"] == "/api/stream-files"]) == 40, seen
    with AxonDataset([served.url(rel) for rel in rels], ahead_bytes=1) as dataset:
        batches = iter(DataLoader(dataset, batch_size=5, collate_fn=list))
        got = [data for _ in range(5) for data in next(batches)]
        # the four planned before the first batch's size was known were read; then one at a time
        assert len(dataset._fs.get()[1]) == 1
        got += [data for batch in batches for data in batch]
    assert got == expected(served, rels)


def test_a_plain_loader_in_order_reads_ahead_in_each_worker_one_request_a_batch(slow):
    address, served = slow
    with AxonDataset([f"axon://{address}/{rel}" for rel in RELS[:240]]) as dataset:
        loader = DataLoader(dataset, batch_size=15, num_workers=2, multiprocessing_context="fork", collate_fn=list)
        mark = served.mark()
        batches = iter(loader)
        got = next(batches)
        began = time.monotonic()  # the rest, one by one: 7 round trips in each of the two workers
        got += [data for batch in batches for data in batch]
        took = time.monotonic() - began
        seen = served.requests_since(mark)
    assert got == expected(served, RELS[:240])
    assert len([r for r in seen if r["path"] == "/api/stream-files"]) == 16, seen  # none read twice, none past the end
    assert took < 7 * ROUND_TRIP * FLOOR_SHARE, took


def test_a_sampler_of_shuffled_runs_reads_no_batch_it_is_not_asked_for(served):
    runs = [list(range(start, start + 10)) for start in range(0, 100, 10)]
    order = [runs[k] for k in (3, 7, 2, 9, 4, 1, 8, 0, 6, 5)]  # shuffled blocks, each in order
    with AxonDataset([served.url(rel) for rel in RELS[:100]]) as dataset:
        mark = served.mark()
        got = [d for b in DataLoader(dataset, batch_sampler=order, collate_fn=list) for d in b]
        seen = served.requests_since(mark)
    assert got == [data for run in order for data in expected(served, [RELS[i] for i in run])]
    assert len([r for r in seen if r["path"] == "/api/stream-files"]) == 10, seen


def test_workers_read_their_own_next_batches(slow):
    address, served = slow
    mark = served.mark()
    # closed at the end: the main process asked the limits, and keeps that connection until then
    with AxonDataset([f"axon://{address}/{rel}" for rel in RELS[:240]]) as dataset:
        loader = dataset.loader(batch_size=15, num_workers=2, multiprocessing_context="fork", collate_fn=list)
        batches = iter(loader)
        got = next(batches)
        began = time.monotonic()  # each worker runs now: the rest is 7 round trips each, one by one
        got += [data for batch in batches for data in batch]
        took = time.monotonic() - began
    seen = served.requests_since(mark)
    assert got == expected(served, RELS[:240])
    assert len([r for r in seen if r["path"] == "/api/stream-files"]) == 16, seen
    assert len([r for r in seen if r["path"] == "/api/limits"]) == 1, seen  # asked before the workers start
    assert took < 7 * ROUND_TRIP * FLOOR_SHARE, took


def test_a_failed_batch_raises_on_that_batch_not_before(slow, served):
    address, _ = slow
    rels = RELS[:40] + ["small/missing.bin"] + RELS[41:100]
    dataset = AxonDataset([f"axon://{address}/{rel}" for rel in rels])
    batches = iter(dataset.loader(batch_size=20, collate_fn=list))
    assert next(batches) + next(batches) == expected(served, RELS[:40])  # batch 2 is read ahead by now
    with pytest.raises(FileNotFoundError, match="missing.bin"):
        next(batches)
    dataset.close()


def test_leaving_the_loop_cancels_the_reads_and_close_leaves_no_socket_or_thread(slow):
    address, served = slow
    port = int(address.rpartition(":")[2])
    dataset = AxonDataset([f"axon://{address}/{rel}" for rel in RELS], ahead=3)
    dataset[0]  # fsspec's IO thread runs from the first read on, for the whole process
    threads = set(threading.enumerate())
    mark = served.mark()
    for _ in dataset.loader(batch_size=10, collate_fn=list):
        break  # three batches are in flight here
    _, ahead = dataset._fs.get()
    assert len(ahead) == 0, "the reads ahead outlived the loop"
    dataset.close()
    deadline = time.monotonic() + 5
    while kept_connections(port) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert kept_connections(port) == 0
    assert set(threading.enumerate()) == threads
    seen = [r for r in served.requests_since(mark) if r["path"] == "/api/stream-files"]
    assert len(seen) <= 1 + 3, seen  # the batch taken and at most three ahead, never the rest
    assert dataset.__getitems__(PlannedBatch([1, 2], ("x", 0))) == expected(served, RELS[1:3])  # reads again
    dataset.close()


# -- tar shards: the next ones asked for while one is read, on kept connections ------------------------


def test_shards_are_asked_ahead_on_kept_connections(slow):
    address, served = slow
    port = int(address.rpartition(":")[2])
    shards = AxonShards.from_paths([f"axon://{address}/{rel}" for rel in RELS], 30, ahead=3)
    mark = served.mark()
    began = time.monotonic()
    got = [data for _, data in shards]
    took = time.monotonic() - began
    seen = served.requests_since(mark)
    assert got == expected(served, RELS)
    assert len([r for r in seen if r["path"] == "/api/stream-files.tar"]) == 10 == len(seen), seen
    assert took < 10 * ROUND_TRIP * FLOOR_SHARE, took  # one by one, ten round trips take 1 s at least
    local_ports: set[int] = set()
    for index, _ in enumerate(shards):
        if index % 30 == 0:  # once a shard
            local_ports |= {c.laddr.port for c in psutil.Process().net_connections("tcp")
                            if c.raddr and c.raddr.port == port}
    assert len(local_ports) <= 4, local_ports  # ten shards over the same four connections
    assert kept_connections(port) == 0  # the loop ended: all closed


def test_a_refused_shard_fails_on_its_turn_and_leaving_early_closes_the_connections(slow, served):
    address, _ = slow
    port = int(address.rpartition(":")[2])
    paths = [f"axon://{address}/{rel}" for rel in RELS[:90]]
    shards = AxonShards([paths[:30], paths[30:60], [f"axon://{address}/small/missing.bin"], paths[60:]], ahead=2)
    files = iter(shards)
    assert [data for _, data in itertools.islice(files, 60)] == expected(served, RELS[:60])
    with pytest.raises(FileNotFoundError, match="missing.bin"):
        next(files)
    files = iter(shards)
    next(files)
    assert kept_connections(port) == 3  # the shard under way and two asked ahead
    files.close()
    assert kept_connections(port) == 0


def test_shard_files_reach_a_loaders_workers_as_bytes(served):
    shards = AxonShards.from_paths([served.url(rel) for rel in RELS[:60]], 20)
    got = list(DataLoader(shards, batch_size=None, num_workers=2, multiprocessing_context="fork"))
    assert sorted(data for _, data in got) == sorted(expected(served, RELS[:60]))
    assert all(type(data) is bytes for _, data in got)
