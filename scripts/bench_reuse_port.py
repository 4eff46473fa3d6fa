"""How ``axon serve`` spreads connections over its workers, with and without ``--reuse-port``.

    PYTHONPATH=$PWD/src python3 scripts/bench_reuse_port.py [--seconds 10] [--connections 64]

For 1 and 2 workers, shared accept queue and ``--reuse-port``, it serves one 8 KiB file and runs
``wrk`` against it twice: with keep-alive (connections made once: where do they land?) and with
``Connection: close`` (a connection per request: who accepts them over time?). It reports
requests/s, each worker's share of the established connections (sampled mid-run) and of the CPU
time the workers used, and the CPU time wrk itself took (on 2 cores, what the workers can have). Markdown on stdout, for BENCHMARKS.md. Needs wrk and psutil.
"""

from __future__ import annotations

import argparse
import os
import re
import resource
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from pathlib import Path

import psutil


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def start(root: Path, workers: int, reuse: bool) -> tuple[subprocess.Popen, int]:
    port = free_port()
    argv = [sys.executable, "-m", "axon.cli", "serve", str(root), "--port", str(port), "--workers", str(workers),
            "--log-level", "warning", *(["--reuse-port"] if reuse else [])]  # fmt: skip
    proc = subprocess.Popen(argv, start_new_session=True)
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline:
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/api/health", timeout=1):
                break
        except OSError:
            time.sleep(0.05)
    while len(psutil.Process(proc.pid).children()) < workers:
        time.sleep(0.05)
    time.sleep(0.5)  # every worker listening
    return proc, port


def established(pid: int, port: int) -> int:
    return sum(c.status == psutil.CONN_ESTABLISHED and c.laddr.port == port
               for c in psutil.Process(pid).net_connections(kind="tcp"))  # fmt: skip


def measure(root: Path, workers: int, reuse: bool, close: bool, seconds: int, connections: int) -> dict:
    proc, port = start(root, workers, reuse)
    try:
        pids = [c.pid for c in psutil.Process(proc.pid).children()]
        cpu0 = {p: sum(psutil.Process(p).cpu_times()[:2]) for p in pids}
        argv = ["wrk", "-t1", f"-c{connections}", f"-d{seconds}s", *(["-H", "Connection: close"] if close else []),
                f"http://127.0.0.1:{port}/files/8kb.bin"]  # fmt: skip
        sample: dict[int, int] = {}

        def snapshot() -> None:
            time.sleep(seconds / 2)
            sample.update({p: established(p, port) for p in pids})

        t = threading.Thread(target=snapshot)
        t.start()
        before = resource.getrusage(resource.RUSAGE_CHILDREN)
        out = subprocess.run(argv, capture_output=True, text=True, check=True).stdout
        after = resource.getrusage(resource.RUSAGE_CHILDREN)
        wrk_cpu = (after.ru_utime + after.ru_stime) - (before.ru_utime + before.ru_stime)
        t.join()
        cpu = {p: sum(psutil.Process(p).cpu_times()[:2]) - cpu0[p] for p in pids}
        rps = float(re.search(r"Requests/sec:\s+([\d.]+)", out).group(1))
        errors = re.search(r"Socket errors: (.*)", out)
        return {"rps": rps, "conns": [sample[p] for p in pids], "cpu": [cpu[p] for p in pids], "wrk_cpu": wrk_cpu,
                "errors": errors.group(1) if errors else ""}  # fmt: skip
    finally:
        os.killpg(proc.pid, signal.SIGTERM)
        proc.wait(30)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--seconds", type=int, default=10)
    parser.add_argument("--connections", type=int, default=64)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as root:
        Path(root, "8kb.bin").write_bytes(os.urandom(8192))
        print(f"wrk -t1 -c{args.connections} -d{args.seconds}s /files/8kb.bin, {os.cpu_count()} CPUs, nothing pinned\n")
        print("| workers | accept | connections | requests/s | established per worker | CPU s per worker | wrk CPU s "
              "| wrk errors |")
        print("|---|---|---|---|---|---|---|---|")
        for close in (False, True):
            for workers, reuse in ((1, False), (2, False), (2, True)):
                r = measure(Path(root), workers, reuse, close, args.seconds, args.connections)
                cpu = " / ".join(f"{c:.1f}" for c in r["cpu"])
                conns = " / ".join(str(c) for c in r["conns"])
                print(f"| {workers} | {'reuse-port' if reuse else 'shared queue'} | {'close' if close else 'keep-alive'} "
                      f"| {r['rps']:,.0f} | {conns} | {cpu} | {r['wrk_cpu']:.1f} | {r['errors'] or '-'} |", flush=True)  # fmt: skip
    return 0


if __name__ == "__main__":
    sys.exit(main())
