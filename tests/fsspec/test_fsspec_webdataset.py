"""WebDataset reading Axon: a tar batch URL as a shard (webdataset fetches http:// with curl), and
a tar file on the server through axon://. Every sample is compared with the source files."""

from __future__ import annotations

import io
import tarfile
from pathlib import Path
from urllib.parse import urlencode

import fsspec
import pytest
from fsspec_served import Served

wds = pytest.importorskip("webdataset", reason="webdataset is in the test extra (scripts/setup.sh --all)")

SAMPLES = 24
KINDS = ("cls", "txt", "bin")


@pytest.fixture(scope="session")
def samples(corpus: Path) -> list[str]:
    """Sample keys ``samples/s000`` ..., each a .cls, .txt and .bin file under the served root."""
    folder = corpus / "samples"
    folder.mkdir()
    keys = []
    for i in range(SAMPLES):
        key = f"s{i:03}"
        (folder / f"{key}.cls").write_text(str(i % 5))
        (folder / f"{key}.txt").write_text(f"sample {i} ✓\n" * (i + 1), encoding="utf-8")
        (folder / f"{key}.bin").write_bytes(bytes([i]) * (i * 997))
        keys.append(f"samples/{key}")
    return keys


def shard_url(served: Served, keys: list[str]) -> str:
    """The tar batch holding ``keys``' files, a sample's files next to each other (as a shard has them)."""
    query = urlencode([("f", f"{key}.{kind}") for key in keys for kind in KINDS], safe="/")
    return f"http://{served.netloc}/api/stream-files.tar?{query}"


def expected(served: Served, key: str) -> dict:
    return {kind: served.local(f"{key}.{kind}") for kind in KINDS}


def check(served: Served, got: list[dict], keys: list[str]) -> None:
    assert [sample["__key__"] for sample in got] == keys
    for sample, key in zip(got, keys):
        assert {k: v for k, v in sample.items() if not k.startswith("__")} == expected(served, key)


def test_a_tar_batch_url_is_a_webdataset_shard(served: Served, samples: list[str]):
    dataset = wds.WebDataset(shard_url(served, samples), shardshuffle=False)
    check(served, list(dataset), samples)


def test_several_batch_urls_are_several_shards(served: Served, samples: list[str]):
    shards = [samples[:10], samples[10:17], samples[17:]]
    dataset = wds.WebDataset([shard_url(served, keys) for keys in shards], shardshuffle=False)
    check(served, list(dataset), samples)


def test_decoded_samples(served: Served, samples: list[str]):
    dataset = wds.WebDataset(shard_url(served, samples[:5]), shardshuffle=False).decode().to_tuple("cls", "txt")
    assert list(dataset) == [(i % 5, f"sample {i} ✓\n" * (i + 1)) for i in range(5)]


def test_a_tar_on_the_server_through_axon_urls(served: Served, samples: list[str], monkeypatch):
    shard = served.root / "shards" / f"train-{served.runtime}.tar"
    shard.parent.mkdir(exist_ok=True)
    with tarfile.open(shard, "w") as tar:
        for key in samples:
            for kind, data in expected(served, key).items():
                info = tarfile.TarInfo(f"{key}.{kind}")
                info.size = len(data)
                tar.addfile(info, io.BytesIO(data))
    # webdataset opens URLs by scheme (gopen_schemes); axon:// is one line away, through fsspec.
    monkeypatch.setitem(wds.gopen_schemes, "axon", lambda url, mode="rb", bufsize=8192, **kw: fsspec.open(url, mode).open())
    dataset = wds.WebDataset(served.url(f"shards/train-{served.runtime}.tar"), shardshuffle=False)
    check(served, list(dataset), samples)
