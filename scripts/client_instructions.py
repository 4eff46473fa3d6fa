#!/usr/bin/env python3
"""Instructions per part and per MB of the client's reading of a batch answer, under callgrind:
the client's own cost without the transport's, repeatable on a busy machine where CPU times are not.

    scripts/client_instructions.py [--sets 1000x4,64x256,1x16384] [--readers cat,parser,tar_files,tarfile]

For each set ``NxK`` (N files of K KiB) an answer is built in memory and read by each reader:

- ``cat``: ``axon://``'s reading (``read_parts`` into ``fs.cat``'s sinks) of the multipart
  answer, fed in 256 KiB ``bytes`` chunks, as a transport's reads come;
- ``parser``: ``MultipartParser(whole_parts=True, views=True)`` alone on the same chunks, each
  part's data made one ``bytes``;
- ``tar_files``: ``AxonShards``' tar reader (``batchclient/tar_reader.py``) on the same files as
  one tar answer, read through a buffered reader;
- ``tarfile``: ``tarfile``'s stream mode (``r|``) on the same tar, ``extractfile(m).read()``.

Each (set, reader) runs twice under ``valgrind --tool=callgrind`` (``PYTHONHASHSEED=0``): once
reading, once only building the answer and going through its chunks; the difference is the
reading's, printed per part and per MB. The ``axon`` on PYTHONPATH is measured.
"""

from __future__ import annotations

import argparse
import asyncio
import io
import os
import re
import subprocess
import sys
import tarfile
from pathlib import Path

TESTS = Path(__file__).resolve().parents[1] / "tests"
CHUNK = 256 * 1024
READERS = ("cat", "parser", "tar_files", "tarfile")


def tar_body(files: list[tuple[str, bytes]]) -> bytes:
    out = io.BytesIO()
    with tarfile.open(fileobj=out, mode="w", format=tarfile.USTAR_FORMAT) as archive:
        for path, data in files:
            info = tarfile.TarInfo(path)
            info.size = len(data)
            archive.addfile(info, io.BytesIO(data))
    return out.getvalue()


def read(count: int, kib: int, reader: str, parse: bool) -> None:
    sys.path[:0] = [str(TESTS), str(TESTS / "http")]
    from multipart_support import BOUNDARY, CONTENT_TYPE, axon_body

    # Both runs import the same modules and start the same event loop: only the reading differs.
    from axon.batchclient.tar_reader import tar_files
    from axon.fsspec.batches import read_parts
    from axon.fsspec.slices import plan
    from axon.fsspec.transfer import Collect
    from axon.http.multipart_parser import MultipartParser

    files = [(f"f/{i}.bin", bytes([i % 256]) * (kib * 1024)) for i in range(count)]
    paths, want = [path for path, _ in files], [data for _, data in files]
    body = tar_body(files) if reader.startswith("tar") else axon_body(files)
    chunks = [body[at : at + CHUNK] for at in range(0, len(body), CHUNK)]
    if not parse:
        asyncio.run(arrive_all(chunks))
        return
    if reader == "cat":
        out: list = [None] * len(paths)

        def sink(k: int, first: int) -> Collect:
            return Collect(out, k, plan(paths[k], None, None), first)

        asyncio.run(read_parts(arrive(chunks), CONTENT_TYPE, paths, sink))
        got = out
    elif reader == "parser":
        asyncio.run(arrive_all([]))
        got = read_parser(MultipartParser(BOUNDARY, whole_parts=True, views=True), chunks)
    elif reader == "tar_files":
        asyncio.run(arrive_all([]))
        got = [data for _, data in tar_files(io.BufferedReader(io.BytesIO(body), CHUNK).read)]
    else:
        asyncio.run(arrive_all([]))
        with tarfile.open(fileobj=io.BytesIO(body), mode="r|") as archive:
            got = [archive.extractfile(member).read() for member in archive if member.isfile()]
    if got != want:
        raise SystemExit(f"{reader} read other bytes")


async def arrive(chunks: list[bytes]):
    for chunk in chunks:
        yield chunk


async def arrive_all(chunks: list[bytes]) -> None:
    async for _ in arrive(chunks):
        pass


def read_parser(parser, chunks: list[bytes]) -> list[bytes]:
    from axon.http.multipart_parser import Part, PartData, PartEnd

    out: list[bytes] = []
    pieces: list = []
    for chunk in chunks:
        for event in parser.feed(chunk):
            kind = type(event)
            if kind is Part:
                out.append(bytes(event.data))
            elif kind is PartData:
                pieces.append(event.data)
            elif kind is PartEnd:
                out.append(b"".join(pieces))
                pieces = []
    parser.close()
    return out


def instructions(count: int, kib: int, reader: str, mode: str) -> int:
    argv = ["valgrind", "--tool=callgrind", "--callgrind-out-file=/dev/null",
            sys.executable, __file__, "--inner", f"{count}x{kib}", reader, mode]
    done = subprocess.run(argv, capture_output=True, text=True, env={**os.environ, "PYTHONHASHSEED": "0"}, timeout=900)
    found = re.search(r"Collected : (\d+)", done.stderr)
    if done.returncode != 0 or found is None:
        raise SystemExit(f"callgrind failed: {done.stderr[-2000:]}")
    return int(found[1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sets", default="1000x4,64x256,1x16384")
    parser.add_argument("--readers", default="cat", help=f"comma-separated, of: {', '.join(READERS)} (default cat)")
    parser.add_argument("--inner", help=argparse.SUPPRESS)
    parser.add_argument("args", nargs="*", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.inner:
        count, _, kib = args.inner.partition("x")
        reader, mode = args.args
        read(int(count), int(kib), reader, mode == "read")
        return
    readers = args.readers.split(",")
    if not set(readers) <= set(READERS):
        parser.error(f"--readers is a comma list of {', '.join(READERS)}")
    for one in args.sets.split(","):
        count, kib = (int(v) for v in one.split("x"))
        for reader in readers:
            reading = instructions(count, kib, reader, "read") - instructions(count, kib, reader, "chunks")
            print(f"{count} files of {kib} KiB, {reader:9}: {reading / count / 1e3:8.1f} k instructions/part, "
                  f"{reading / (count * kib / 1024) / 1e6:6.2f} M instructions/MB", flush=True)


if __name__ == "__main__":
    main()
