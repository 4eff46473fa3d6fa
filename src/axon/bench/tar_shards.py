"""The tar-shard peer of :mod:`axon.bench.loaders`: pre-built tar shards on a web server, read by
``tarfile`` in a ``DataLoader``, one kept connection a worker (what ``webdataset`` would do
without ``curl``'s new connection a shard)."""

from __future__ import annotations

import http.client
import tarfile
from collections.abc import Iterator

from torch.utils.data import IterableDataset, get_worker_info


class TarShards(IterableDataset):
    """Each worker reads every ``num_workers``-th of ``targets`` (request targets on ``netloc``,
    ``host:port``), one ``GET`` a shard on its one connection, and yields ``(name, bytes)`` for
    every file in it."""

    def __init__(self, netloc: str, targets: list[str], timeout: float = 60.0) -> None:
        self.netloc, self.targets, self.timeout = netloc, targets, timeout

    def __iter__(self) -> Iterator[tuple[str, bytes]]:
        info = get_worker_info()
        mine = self.targets[info.id :: info.num_workers] if info is not None else self.targets
        host, _, port = self.netloc.rpartition(":")
        connection = http.client.HTTPConnection(host, int(port), timeout=self.timeout)
        try:
            for target in mine:
                connection.request("GET", target)
                answer = connection.getresponse()
                if answer.status != 200:
                    raise OSError(f"GET {target} on {self.netloc}: {answer.status} {answer.reason}")
                with tarfile.open(fileobj=answer, mode="r|") as archive:
                    for member in archive:
                        if member.isfile():
                            yield member.name, archive.extractfile(member).read()
                answer.read()  # the archive's padding: the connection is then free for the next shard
        finally:
            connection.close()
