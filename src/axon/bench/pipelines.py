"""``python -m axon.bench.pipelines``: many small files read with fsspec, axon:// against HTTP.

    python -m axon.bench.pipelines                  # 10,000 x 4 KiB and 1,000 x 64 KiB, loopback and 10 ms
    python -m axon.bench.pipelines --sets 2000x4096 --delays 0

Each set of files is read with one ``fs.cat(paths)`` by three clients, side by side: axon://
(batches) on ``axon serve``; fsspec's ``HTTPFileSystem`` on axon serve's ``/files/``; and
``HTTPFileSystem`` on nginx serving the same directory (one request per file, the way a data
pipeline reads a web server or a hub today). Then the same through the delay relay
(:mod:`axon.bench.relay`: every chunk held each of ``--delays`` ms in each direction, so a round
trip takes twice that more) in front of each server. Both servers run one worker pinned to
``--server-cpus``; this process, the client, pins itself to ``--client-cpus``; the relay runs on
any CPU. Every client runs at fsspec's defaults (HTTPFileSystem: up to 128 requests in flight on
up to 100 connections; axon://: batches as large as the server's limits, 4 in flight). One timed
run each, after an untimed warm-up on a few files (connections, the limits); the bytes read are
checked against the files.

Needs the fsspec extra and nginx. Prints a Markdown table (``--json`` also saves the rows).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import random
import shlex
import sys
import time
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from dataclasses import asdict, dataclass
from pathlib import Path

import aiohttp
from fsspec.implementations.http import HTTPFileSystem

from ..fsspec import AxonFileSystem
from . import machine, nginx, procs, relay

DEFAULT_SETS = "10000x4096,1000x65536"
DEFAULT_FILES = Path("~/.cache/axon-bench/pipelines")
WARMUP_FILES = 10
HOST = "127.0.0.1"
CLIENTS = (
    ("axon://", "axon serve"),
    ("HTTPFileSystem", "axon serve /files/"),
    ("HTTPFileSystem", "nginx /files/"),
)


@dataclass(frozen=True)
class FileSet:
    count: int
    size: int

    @classmethod
    def parse(cls, text: str) -> FileSet:
        count, _, size = text.lower().partition("x")
        if not (count.isdigit() and size.isdigit() and int(count) > 0):
            raise argparse.ArgumentTypeError(f"a set is COUNTxBYTES (e.g. 10000x4096), not {text!r}")
        return cls(int(count), int(size))

    @property
    def label(self) -> str:
        size = f"{self.size // 1024} KiB" if self.size % 1024 == 0 else f"{self.size} B"
        return f"{self.count:,} x {size}"

    def paths(self) -> list[str]:
        return [f"{self.count}x{self.size}/{i:06}.bin" for i in range(self.count)]

    def content(self, index: int) -> bytes:
        """The bytes of file ``index`` (of :meth:`paths`): random, the same in every run."""
        return random.Random(index).randbytes(self.size)


@dataclass(frozen=True)
class Row:
    files: str
    delay_ms: float
    client: str
    server: str
    requests: int
    seconds: float
    megabytes: float

    @property
    def files_per_second(self) -> float:
        return int(self.files.split(" x ")[0].replace(",", "")) / self.seconds


def write_files(root: Path, fileset: FileSet) -> str:
    """The set's files under ``root`` (kept between runs: written only if missing or resized);
    returns the SHA-256 of their bytes in order, which every client's answer must match."""
    digest = hashlib.sha256()
    for index, rel in enumerate(fileset.paths()):
        path = root / rel
        data = fileset.content(index)
        try:
            fresh = path.stat().st_size != fileset.size or path.read_bytes() != data
        except FileNotFoundError:
            fresh = True
        if fresh:
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_bytes(data)
        digest.update(data)
    return digest.hexdigest()


def read_all(client: str, netloc: str, paths: list[str], digest: str) -> tuple[float, int]:
    """Seconds one ``fs.cat(paths)`` takes, and the requests it sent, its answer checked."""
    sent = [0]

    async def count(session, context, params) -> None:
        sent[0] += 1

    trace = aiohttp.TraceConfig()
    trace.on_request_start.append(count)
    options = {"skip_instance_cache": True, "client_kwargs": {"trace_configs": [trace]}}
    if client == "axon://":
        fs = AxonFileSystem(**options)
        urls = [f"{netloc}/{p}" for p in paths]
    else:
        fs = HTTPFileSystem(**options)
        urls = [f"http://{netloc}/files/{p}" for p in paths]
    fs.cat(urls[:WARMUP_FILES])
    sent[0] = 0
    started = time.perf_counter()
    out = fs.cat(urls)
    seconds = time.perf_counter() - started
    check = hashlib.sha256()
    for url in urls:
        check.update(out[fs._strip_protocol(url)])
    if check.hexdigest() != digest:
        raise RuntimeError(f"{client} on {netloc} read other bytes than the files hold")
    return seconds, sent[0]


@contextmanager
def servers(root: Path, workdir: Path, cpus: str | None, access_logs: bool = False) -> Iterator[dict[str, int]]:
    """axon serve and nginx on ``root``, one worker each, pinned to ``cpus``: server -> port.
    With ``access_logs`` each logs every request: axon serve JSON lines to WORKDIR/axon-serve.log
    (with its other output), nginx to WORKDIR/nginx/access.log."""
    workdir.mkdir(parents=True, exist_ok=True)
    ports = {"axon serve": procs.free_port(), "nginx": procs.free_port()}
    log_flags = ["--access-log", "--json-logs"] if access_logs else []
    axon = procs.Command([sys.executable, "-m", "axon.cli", "serve", str(root), "--host", HOST,
                          "--port", str(ports["axon serve"]), "--workers", "1", "--log-level", "warning", *log_flags],
                         "axon-serve")
    nginx_log = workdir / "nginx" / "access.log" if access_logs else None
    with procs.Group(workdir, cpus) as group:
        group.start(axon)
        group.start(nginx.static_command(workdir / "nginx", ports["nginx"], root, nginx_log))
        for port in ports.values():
            procs.wait_ready(f"http://{HOST}:{port}/api/health", group)
        yield ports


@contextmanager
def every_cpu() -> Iterator[None]:
    """Processes started in this block may run on any CPU, though this thread (the client) is
    pinned: a child inherits the mask of the thread that starts it."""
    pinned = os.sched_getaffinity(0)
    os.sched_setaffinity(0, range(os.cpu_count() or 1))
    try:
        yield
    finally:
        os.sched_setaffinity(0, pinned)


def run(sets: list[FileSet], delays: list[float], root: Path, workdir: Path, server_cpus: str | None) -> list[Row]:
    digests = {fileset: write_files(root, fileset) for fileset in sets}
    rows = []
    with servers(root, workdir, server_cpus) as ports:
        for delay in delays:
            with ExitStack() as stack:
                netlocs = {}
                for name, port in ports.items():
                    if delay:
                        with every_cpu():  # the relay is the link, neither server nor client
                            link = stack.enter_context(relay.start(f"{HOST}:0", f"{HOST}:{port}", delay))
                        port = link.port
                    netlocs[name] = f"{HOST}:{port}"
                for fileset in sets:
                    for client, server in CLIENTS:
                        netloc = netlocs["nginx" if server.startswith("nginx") else "axon serve"]
                        seconds, requests = read_all(client, netloc, fileset.paths(), digests[fileset])
                        rows.append(Row(fileset.label, delay, client, server, requests, seconds,
                                        fileset.count * fileset.size / 1e6))
    return rows


def table(rows: list[Row]) -> str:
    lines = [
        "| files | delay each way | client | server | requests | seconds | files/s | MB/s | axon:// is faster by |",
        "|---|---|---|---|---:|---:|---:|---:|---:|",
    ]
    fastest = {(r.files, r.delay_ms): r.seconds for r in rows if r.client == "axon://"}
    for r in rows:
        link = f"{r.delay_ms:g} ms (relay)" if r.delay_ms else "loopback"
        ratio = "" if r.client == "axon://" else f"{r.seconds / fastest[(r.files, r.delay_ms)]:.1f}x"
        lines.append(f"| {r.files} | {link} | {r.client} | {r.server} | {r.requests:,} | {r.seconds:.3f} "
                     f"| {r.files_per_second:,.0f} | {r.megabytes / r.seconds:,.1f} | {ratio} |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m axon.bench.pipelines", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sets", default=DEFAULT_SETS,
                        type=lambda text: [FileSet.parse(part) for part in text.split(",")],
                        help=f"comma list of COUNTxBYTES (default {DEFAULT_SETS})")
    parser.add_argument("--delays", default="0,10", type=lambda text: [float(d) for d in text.split(",")],
                        help="comma list of ms each way; 0 is plain loopback (default 0,10)")
    parser.add_argument("--files-dir", type=Path, default=DEFAULT_FILES, help=f"the served root (default {DEFAULT_FILES})")
    parser.add_argument("--workdir", type=Path, help="servers' logs and nginx's prefix (default: FILES_DIR/../pipelines-run)")
    two = (os.cpu_count() or 1) >= 2
    parser.add_argument("--server-cpus", default="0" if two else None, help="taskset list for the servers (default 0)")
    parser.add_argument("--client-cpus", default="1" if two else None, help="CPUs this process (the client) runs on (default 1)")
    parser.add_argument("--no-pin", action="store_true", help="pin nothing")
    parser.add_argument("--json", type=Path, help="also write the rows here")
    args = parser.parse_args(argv)

    root = args.files_dir.expanduser().resolve()
    workdir = (args.workdir or root.parent / "pipelines-run").expanduser().resolve()
    server_cpus = None if args.no_pin else args.server_cpus
    if args.client_cpus and not args.no_pin:
        os.sched_setaffinity(0, {int(c) for c in args.client_cpus.split(",")})
    previous = procs.install_handlers()
    try:
        rows = run(args.sets, args.delays, root, workdir, server_cpus)
    finally:
        procs.restore_handlers(previous)
    client_cpus = None if args.no_pin else args.client_cpus
    setting = f"servers on CPUs {server_cpus or 'any'}, client on CPUs {client_cpus or 'any'}, relay on any"
    report("axon.bench.pipelines", argv, setting, table(rows), rows, args.json)
    return 0


def report(module: str, argv: list[str] | None, setting: str, text: str, rows: list, to: Path | None) -> None:
    """Print the command, the machine and ``setting``, then ``text`` (the table); the rows (dataclasses)
    as JSON to ``to`` if given."""
    command = f"python -m {module} " + shlex.join(argv if argv is not None else sys.argv[1:])
    print(f"`{command.strip()}` on {machine.describe()}; {setting}\n")
    print(text)
    if to:
        to.write_text(json.dumps([asdict(r) for r in rows], indent=1))


if __name__ == "__main__":
    sys.exit(main())
