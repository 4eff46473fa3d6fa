"""The client's CPU per byte, reading the same files from a local ``axon serve``:

    python scripts/client_cpu.py [--sets 4000x4,256x256,2x65536] [--repeat 3] [--readers ...]

For each set ``NxK`` it writes N files of K KiB into a temporary directory, serves it (one
worker), and reads them all to memory with each reader below, checking the bytes. It prints the
client's CPU time (``time.process_time``: this process and its threads, not the server) per MB
read, the best of ``--repeat`` runs, and the wall time beside it. The readers:

- ``axon:// cat``: ``AxonFileSystem.cat`` of the paths (multipart batches, aiohttp);
- ``AxonShards``: the files as one tar shard (``axon.engines.torch_dataset``);
- ``tarfile``: the same tar batch read by ``tarfile`` in stream mode over ``http.client``;
- ``parser``: the same batch as one multipart answer over ``http.client``, read by
  ``MultipartParser`` alone (256 KiB reads), each part's data joined into ``bytes``: the parser's
  own cost beside ``tarfile``'s on the same transport;
- ``cat in memory``: ``axon://``'s own reading of the same multipart answers (``read_parts``
  into ``fs.cat``'s sinks), fed 256 KiB ``bytes`` chunks from memory: the client's cost without
  the transport's. The answers are fetched once, in the first run, which ``--repeat`` of 2 or
  more leaves out of the best;
- ``aiohttp GET``: one ``GET /files/<path>`` a file, four at once, ``await response.read()``.
"""

from __future__ import annotations

import argparse
import asyncio
import http.client
import json
import os
import socket
import subprocess
import sys
import tarfile
import tempfile
import time
import urllib.request
from collections.abc import Callable
from pathlib import Path


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def serve(root: Path) -> tuple[subprocess.Popen, str]:
    port = free_port()
    argv = [sys.executable, "-m", "axon.cli", "serve", "--host", "127.0.0.1", "--port", str(port),
            "--workers", "1", "--log-level", "warning", str(root)]
    proc = subprocess.Popen(argv)
    deadline = time.monotonic() + 30
    while True:
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/api/health", timeout=2) as answer:
                answer.read()
            return proc, f"127.0.0.1:{port}"
        except OSError:
            if time.monotonic() > deadline or proc.poll() is not None:
                proc.kill()
                raise SystemExit("axon serve did not start")
            time.sleep(0.1)


def axon_cat(address: str, rels: list[str]) -> list[bytes]:
    from axon.fsspec import AxonFileSystem

    fs = AxonFileSystem(skip_instance_cache=True)
    paths = [f"{address}/{rel}" for rel in rels]
    try:
        out = fs.cat(paths)
        return [out[p] for p in paths]
    finally:
        fs.close()


# The server's default files per batch: the readers that send one request send one a batch.
BATCH = 1000


def batches(rels: list[str]) -> list[list[str]]:
    return [rels[i : i + BATCH] for i in range(0, len(rels), BATCH)]


def axon_shards(address: str, rels: list[str]) -> list[bytes]:
    from axon.engines.torch_dataset import AxonShards

    shards = [[f"{address}/{rel}" for rel in batch] for batch in batches(rels)]
    return [data for _, data in AxonShards(shards)]


def post(connection: http.client.HTTPConnection, target: str, rels: list[str]) -> http.client.HTTPResponse:
    connection.request("POST", target, json.dumps({"files": rels}), {"Content-Type": "application/json"})
    return connection.getresponse()


def plain_tarfile(address: str, rels: list[str]) -> list[bytes]:
    host, _, port = address.partition(":")
    connection = http.client.HTTPConnection(host, int(port), timeout=60)
    out = []
    for batch in batches(rels):
        response = post(connection, "/api/stream-files.tar", batch)
        with tarfile.open(fileobj=response, mode="r|") as archive:
            out += [archive.extractfile(member).read() for member in archive if member.isfile()]
        response.read()  # to its end: the connection carries the next batch
    connection.close()
    return out


def bare_parser(address: str, rels: list[str]) -> list[bytes]:
    from axon.http.multipart_parser import MultipartParser, Part, PartData, PartEnd

    try:  # part data as views of what was read, where the parser offers them
        options = {"whole_parts": True, "views": MultipartParser("b", views=True).views}
    except TypeError:
        options = {"whole_parts": True}
    host, _, port = address.partition(":")
    connection = http.client.HTTPConnection(host, int(port), timeout=60)
    out: list[bytes] = []
    for batch in batches(rels):
        response = post(connection, "/api/stream-files", batch)
        parser = MultipartParser.from_content_type(response.getheader("Content-Type"), **options)
        pieces: list = []
        while chunk := response.read1(256 * 1024):
            for event in parser.feed(chunk):
                kind = type(event)
                if kind is PartData:
                    pieces.append(event.data)
                elif kind is PartEnd:
                    out.append(b"".join(pieces))
                    pieces = []
                elif kind is Part:
                    out.append(bytes(event.data))
        parser.close()
        response.read()  # http.client lets the connection go on only once it read the end itself
    connection.close()
    return out


_ANSWERS: dict[tuple[str, int], tuple[str, bytes]] = {}


def cat_without_socket(address: str, rels: list[str]) -> list[bytes]:
    from axon.fsspec.batches import read_parts
    from axon.fsspec.slices import plan
    from axon.fsspec.transfer import Collect

    out: list[bytes] = []
    for start in range(0, len(rels), BATCH):
        batch = rels[start : start + BATCH]
        if (address, start) not in _ANSWERS:
            host, _, port = address.partition(":")
            connection = http.client.HTTPConnection(host, int(port), timeout=60)
            response = post(connection, "/api/stream-files", batch)
            _ANSWERS[address, start] = response.getheader("Content-Type"), response.read()
            connection.close()
        content_type, body = _ANSWERS[address, start]
        got: list = [None] * len(batch)

        async def chunks():
            for at in range(0, len(body), 256 * 1024):
                yield body[at : at + 256 * 1024]  # a new bytes, as a transport's read makes one

        def sink(k: int, first: int, got=got, batch=batch) -> Collect:
            return Collect(got, k, plan(batch[k], None, None), first)

        asyncio.run(read_parts(chunks(), content_type, batch, sink))
        out += got
    return out


def aiohttp_get(address: str, rels: list[str]) -> list[bytes]:
    import aiohttp

    async def run() -> list[bytes]:
        slots = asyncio.Semaphore(4)
        async with aiohttp.ClientSession(auto_decompress=False) as session:
            async def one(rel: str) -> bytes:
                async with slots, session.get(f"http://{address}/files/{rel}") as response:
                    return await response.read()

            return await asyncio.gather(*(one(rel) for rel in rels))

    return asyncio.run(run())


READERS: dict[str, Callable[[str, list[str]], list[bytes]]] = {
    "axon:// cat": axon_cat, "AxonShards": axon_shards, "tarfile": plain_tarfile, "parser": bare_parser,
    "cat in memory": cat_without_socket, "aiohttp GET": aiohttp_get,
}


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sets", type=sets, default=sets("4000x4,256x256,2x65536"),
                        help="comma-separated NxK: N files of K KiB each")
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--readers", type=lambda v: v.split(","), default=list(READERS),
                        help=f"comma-separated, of: {', '.join(READERS)}")
    args = parser.parse_args(argv)
    for count, kib in args.sets:
        measure(count, kib, args.repeat, args.readers)


def sets(value: str) -> list[tuple[int, int]]:
    return [(int(n), int(k)) for n, _, k in (one.partition("x") for one in value.split(","))]


def measure(count: int, kib: int, repeat: int, readers: list[str]) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        rels = [f"f/{i:05}.bin" for i in range(count)]
        (root / "f").mkdir()
        for rel in rels:
            (root / rel).write_bytes(os.urandom(kib * 1024))
        want = [(root / rel).read_bytes() for rel in rels]
        megabytes = count * kib / 1024
        proc, address = serve(root)
        try:
            print(f"{count} files of {kib} KiB ({megabytes:.0f} MB), client CPU per MB, best of {repeat}")
            for name in readers:
                runs = []
                for _ in range(repeat):
                    cpu, wall = time.process_time(), time.perf_counter()
                    got = READERS[name](address, rels)
                    runs.append((time.process_time() - cpu, time.perf_counter() - wall))
                    if got != want:
                        raise SystemExit(f"{name} read other bytes")
                    del got
                cpu, wall = min(runs)
                print(f"{name:14} {cpu / megabytes * 1000:6.2f} ms CPU/MB  ({cpu:.2f} s CPU, {wall:.2f} s wall)", flush=True)
        finally:
            proc.terminate()
            proc.wait(10)


if __name__ == "__main__":
    main()
