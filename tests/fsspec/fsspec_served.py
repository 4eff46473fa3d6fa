"""The corpus the axon:// tests read; ``Served``: a server's address and root, with the helpers
that name a file both ways (over the wire and on disk); and a filesystem that counts requests."""

from __future__ import annotations

import random
from dataclasses import dataclass
from pathlib import Path

SMALL_FILES = 60
ODD_NAMES = ["odd name.txt", "é ü 名前.txt", "a+b=c;d&e.txt", "100%.txt", "hash#tag.txt"]


@dataclass(frozen=True)
class Served:
    """A running server: its runtime, ``host:port`` (the first part of every axon path), its root."""

    runtime: str
    netloc: str
    root: Path

    def path(self, rel: str) -> str:
        return f"{self.netloc}/{rel}"

    def url(self, rel: str) -> str:
        return f"axon://{self.netloc}/{rel}"

    def local(self, rel: str) -> bytes:
        return (self.root / rel).read_bytes()


def write_corpus(root: Path) -> None:
    rng = random.Random(15)
    small = root / "data" / "small"
    small.mkdir(parents=True)
    for i in range(SMALL_FILES):
        # Sizes from empty (the first) to a few KiB, a few larger than a part's read chunk.
        size = 0 if i == 0 else rng.choice([1, 7, 4096, 70_000]) if i % 10 == 0 else rng.randrange(1, 6000)
        (small / f"f{i:03}.bin").write_bytes(rng.randbytes(size))
    for name in ODD_NAMES:
        (root / "data" / name).write_bytes(name.encode("utf-8") * 3)
    deeper = root / "data" / "tree" / "a" / "b"
    deeper.mkdir(parents=True)
    (deeper / "leaf.txt").write_bytes(b"leaf\n")
    (root / "data" / "tree" / "top.txt").write_bytes(b"top\n")
    (root / "data" / "tree" / "empty").mkdir()
    (root / "data" / ".hidden").write_bytes(b"never served\n")
    big = root / "data" / "big.bin"
    big.write_bytes(rng.randbytes(3 * 1024 * 1024 + 17))


def counting_fs(**options):
    """An AxonFileSystem, and the (method, path) of every request it sends, in order (recorded by
    aiohttp's own tracing, on the real connection)."""
    import aiohttp  # here: the conftest skips the suite when the extra is missing, after importing this

    from axon.fsspec import AxonFileSystem

    seen: list[tuple[str, str]] = []

    async def on_start(session, context, params):
        seen.append((params.method, params.url.path))

    trace = aiohttp.TraceConfig()
    trace.on_request_start.append(on_start)
    return AxonFileSystem(skip_instance_cache=True, client_kwargs={"trace_configs": [trace]}, **options), seen
