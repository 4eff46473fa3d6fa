"""A DataLoader whose workers are forked, run by test_torch_dataset as a program of its own.

A training script forks its workers from a process that holds torch and its reader. The test
suite's process holds far more by the time the engines' tests run (Ray's and Dask's threads,
pyarrow's pools, servers of earlier tests), and a worker forked from it once died of a
segmentation fault in CI that no run of this program, alone or after ``ray.init``, reproduced.
So the forking tests run this program: the fork they test is the user's, not the suite's.

``python forked_loader.py dataset|shards ADDRESS REL...`` prints one JSON object: the SHA-256 of
each sample in the order the DataLoader gave them (``dataset``: the parent reads a file and asks the limits before
the workers fork and another after they are done, as ``parent_before`` and ``parent_after``).
"""

from __future__ import annotations

import hashlib
import json
import sys

from torch.utils.data import DataLoader

from axon.engines.torch_dataset import AxonDataset, AxonShards


def digest(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def named_length(path: str, data: bytes) -> tuple[str, int]:
    """AxonShards' decode hook: a path and its file's length (module level, so it pickles)."""
    return path, len(data)


def read_dataset(urls: list[str]) -> dict:
    dataset = AxonDataset(urls)
    before = digest(dataset[0])  # the parent's filesystem and session now exist
    dataset.ask_limits()  # and its servers' limits, which the workers take
    loader = DataLoader(dataset, batch_size=30, num_workers=2, multiprocessing_context="fork", collate_fn=list)
    got = [digest(data) for batch in loader for data in batch]
    return {"parent_before": before, "samples": got, "parent_after": digest(dataset[1])}


def read_shards(urls: list[str]) -> dict:
    shards = AxonShards.from_paths(urls, 30, decode=named_length)
    loader = DataLoader(shards, batch_size=None, num_workers=2, multiprocessing_context="fork")
    return {"samples": sorted(map(tuple, loader))}  # a sample's tuple comes out as a list


if __name__ == "__main__":
    kind, address, *rels = sys.argv[1:]
    urls = [f"axon://{address}/{rel}" for rel in rels]
    print(json.dumps({"dataset": read_dataset, "shards": read_shards}[kind](urls)))
