"""Readers in processes of their own against servers behind the delay relay, for
:mod:`axon.bench.engines` and :mod:`axon.bench.loaders`: the servers up (:func:`servers`), a
reader's process started, the servers' records marked when it is ready and again when it is done
(:func:`run_process`), and the requests each server saw in between read from those records
(:class:`ServerLog`, :class:`StoreMetrics`).
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import json
import os
import re
import select
import subprocess
import sys
import tempfile
import time
import urllib.request
from collections.abc import Callable, Iterator
from contextlib import ExitStack
from pathlib import Path

from . import objects, pipelines, procs, relay, seaweed
from .pipelines import HOST

SETUP_TIMEOUT = 180.0  # a reader's cluster or workers up and the warm-up read


# -- the requests a server saw -----------------------------------------------------------------


def axon_request(line: str) -> str | None:
    with contextlib.suppress(ValueError):
        record = json.loads(line)
        if isinstance(record, dict) and record.get("logger") == "axon.access":
            return f"{record['method']} {_kind(record['path'])}"
    return None


def nginx_request(line: str) -> str | None:
    found = re.search(r'"([A-Z]+) (\S+) HTTP/', line)
    return f"{found[1]} {_kind(found[2].split('?')[0])}" if found else None


def _kind(path: str) -> str:
    if path.startswith("/api/"):
        return path
    return "/files/....tar" if path.endswith(".tar") else "/files/..."


def requests_text(seen: collections.Counter) -> str:
    """``"79 POST /api/stream-files + 2 GET /api/limits"``: the most frequent first."""
    return " + ".join(f"{n:,} {kind}" for kind, n in seen.most_common())


def seconds_text(error: str, seconds: float | None, budget: float) -> str:
    """A reader's time as a table shows it: ``failed``, ``> BUDGET`` (stopped), or the seconds."""
    if error:
        return "failed"
    return f"> {budget:g}" if seconds is None else f"{seconds:.2f}"


class ServerLog:
    """The requests a server logged between two marks. A mark is a request sent straight to the
    server, ``GET /api/health?TOKEN``, and the log read until its line shows: axon serve writes
    its log in batches, so only then are the requests before it all there."""

    def __init__(self, path: Path, port: int, parse: Callable[[str], str | None]) -> None:
        self.path, self.url, self.parse = path, f"http://{HOST}:{port}/api/health", parse
        self.offset = path.stat().st_size if path.exists() else 0
        self.marks = 0

    def begin(self) -> None:
        self._to_mark()

    def end(self) -> collections.Counter:
        return self._to_mark()

    def _to_mark(self) -> collections.Counter:
        self.marks += 1
        token = f"bench-mark-{self.marks}x"
        with urllib.request.urlopen(f"{self.url}?{token}", timeout=10) as answer:
            answer.read()
        kinds: collections.Counter = collections.Counter()
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            with open(self.path, "rb") as log:
                log.seek(self.offset)
                data = log.read()
            for line in data.splitlines(keepends=True):
                if not line.endswith(b"\n"):
                    break  # half written: read again
                self.offset += len(line)
                text = line.decode(errors="replace")
                if token in text:
                    return kinds
                if "bench-mark-" not in text and (kind := self.parse(text)):
                    kinds[kind] += 1
            time.sleep(0.05)
        raise TimeoutError(f"{self.path} never showed the request {token}")


class StoreMetrics:
    """The S3 requests SeaweedFS counted (its metrics), between begin and end."""

    def __init__(self, store: seaweed.Seaweed) -> None:
        self.store = store

    def begin(self) -> None:
        self.counter = objects.Counter(self.store).__enter__()

    def end(self) -> collections.Counter:
        self.counter.__exit__(None, None, None)
        names = {"GET": "S3 GET or HEAD", "LIST": "S3 LIST"}  # the store counts a HEAD as a GET
        return collections.Counter({names[kind]: n for kind, n in self.counter.counts.items() if n})



def upload(store: seaweed.Seaweed, root: Path, rels: list[str]) -> None:
    asyncio.run(objects.upload(store, {rel: (root / rel).read_bytes() for rel in rels}, concurrency=32))


# -- one reader --------------------------------------------------------------------------------


def _message(proc: subprocess.Popen, timeout: float) -> dict | None:
    """The cell's next line on stdout as JSON; None if none came in ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    data = b""
    fd = proc.stdout.fileno()
    while not data.endswith(b"\n"):
        left = deadline - time.monotonic()
        if left <= 0 or not select.select([fd], [], [], left)[0]:
            return None
        chunk = os.read(fd, 65536)
        if not chunk:
            raise RuntimeError(f"the cell exited ({proc.wait()}) before it answered")
        data += chunk
    return json.loads(data)


def run_process(module: str, spec: dict, title: str, counter: ServerLog | StoreMetrics, budget: float,
                log: Path) -> tuple[dict, dict | None, collections.Counter, str]:
    """Run ``python -m module SPEC_JSON``: once it says it is ready, mark ``counter``, tell it to go,
    and take its answer (None: none came in ``budget`` seconds). What it said when ready, its
    answer, the requests the server saw meanwhile, and why it failed (if it did: ``log`` has its
    stderr)."""
    argv = [sys.executable, "-m", module, json.dumps(spec)]
    with open(log, "ab") as err:
        err.write(f"\n=== {title}\n".encode())
        err.flush()
        proc = subprocess.Popen(procs.wrap(argv, None), stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=err,
                                start_new_session=True)
    procs.track(proc)
    ready, done, error, counting = {}, None, "", False
    try:
        if (ready := _message(proc, SETUP_TIMEOUT)) is None:
            raise TimeoutError(f"not ready in {SETUP_TIMEOUT:.0f} s")
        counter.begin()
        counting = True
        proc.stdin.write(b"go\n")
        proc.stdin.flush()
        done = _message(proc, budget)
    except (RuntimeError, TimeoutError, OSError, ValueError) as exc:
        error = f"failed ({exc}; log: {log})"
    finally:
        procs.stop(proc)  # its whole process group: the engine's cluster too
    seen = counter.end() if counting else collections.Counter()
    return ready or {}, done, seen, error


# -- the whole run -----------------------------------------------------------------------------


@contextlib.contextmanager
def servers(root: Path, workdir: Path, delay_ms: float, rels: list[str], s3: bool,
            connect_ms: float = 0.0) -> Iterator[tuple[dict, dict]]:
    """axon serve, nginx and (with ``s3``) SeaweedFS holding ``rels``, each behind a relay that
    holds every chunk ``delay_ms`` and a new connection's first ``connect_ms`` more:
    way -> its address through the relay, and way -> its request counter."""
    with ExitStack() as stack:
        ports = stack.enter_context(pipelines.servers(root, workdir, None, access_logs=True))
        targets = {"axon": ports["axon serve"], "http": ports["nginx"]}
        counters: dict = {"axon": ServerLog(workdir / "axon-serve.log", ports["axon serve"], axon_request),
                          "http": ServerLog(workdir / "nginx" / "access.log", ports["nginx"], nginx_request)}
        if s3:
            scratch = stack.enter_context(tempfile.TemporaryDirectory(prefix="axon-engines-weed-"))
            store = stack.enter_context(seaweed.running(Path(scratch)))
            upload(store, root, rels)
            targets["s3"] = store.port
            counters["s3"] = StoreMetrics(store)
        links = {way: stack.enter_context(relay.start(f"{HOST}:0", f"{HOST}:{port}", delay_ms,
                                                             connect_ms=connect_ms)).port
                 for way, port in targets.items()}
        yield {way: f"{HOST}:{port}" for way, port in links.items()}, counters


