"""A constant-rate load with every response checked: what the failover test runs through nginx.

Request ``k`` is due at ``start + k / rate``, whatever happened to the ones before it (an open
model, as wrk2's ``-R``): a stalled response does not hold the next ones back, and each latency
is measured from when its request was due, so a stall shows in the percentiles instead of being
hidden by a client that waited (coordinated omission). A pool of threads, each with one
keep-alive connection, takes the requests in order.

A response is good when its status is the one expected and its body's SHA-256 is the expected
one. A body cut after its headers (the node behind nginx died mid-response: nginx cannot retry
once bytes reached the client) is resumed the way ``axon fetch`` resumes one, ``Range`` from
what arrived with ``If-Range`` of the ETag that came with it, and counted as resumed when the
two pieces are the expected bytes. Anything else is a failure, recorded with its reason.
"""

from __future__ import annotations

import hashlib
import http.client
import itertools
import threading
import time
from dataclasses import dataclass, field


@dataclass(frozen=True)
class Probe:
    """One kind of request and what its answer must be."""

    method: str
    target: str
    sha256: str  # of the whole body
    body: bytes | None = None
    headers: tuple[tuple[str, str], ...] = ()
    status: int = 200


@dataclass
class Outcome:
    due: float  # seconds after the start at which the request was due
    latency: float  # seconds from due to the last byte checked
    ok: bool
    resumed: bool = False
    error: str = ""


@dataclass
class Report:
    outcomes: list[Outcome] = field(default_factory=list)

    @property
    def failed(self) -> list[Outcome]:
        return [o for o in self.outcomes if not o.ok]

    @property
    def resumed(self) -> int:
        return sum(o.resumed for o in self.outcomes)

    def latencies(self, start: float = 0.0, stop: float = float("inf")) -> list[float]:
        return sorted(o.latency for o in self.outcomes if start <= o.due < stop)

    def percentile(self, q: float, start: float = 0.0, stop: float = float("inf")) -> float:
        values = self.latencies(start, stop)
        if not values:
            return float("nan")
        return values[min(len(values) - 1, int(q / 100 * len(values)))]


def run(host: str, port: int, probes: list[Probe], rate: float, duration: float, threads: int = 16,
        timeout: float = 15.0) -> Report:  # fmt: skip
    """Send ``rate`` requests a second for ``duration`` seconds, cycling through ``probes``."""
    total = int(rate * duration)
    counter = itertools.count()
    report = Report()
    lock = threading.Lock()
    start = time.monotonic() + 0.05

    def worker() -> None:
        conn: http.client.HTTPConnection | None = None
        while True:
            k = next(counter)
            if k >= total:
                break
            due = start + k / rate
            delay = due - time.monotonic()
            if delay > 0:
                time.sleep(delay)
            probe = probes[k % len(probes)]
            if conn is None:
                conn = http.client.HTTPConnection(host, port, timeout=timeout)
            try:
                resumed = fetch(conn, probe)
                outcome = Outcome(due - start, time.monotonic() - due, True, resumed)
            except Exception as exc:  # noqa: BLE001 - every failure is recorded, not raised
                outcome = Outcome(due - start, time.monotonic() - due, False, error=f"{probe.target}: {exc!r}")
                conn.close()
                conn = None
            else:
                if conn.sock is None:  # closed by the exchange (a cut body, Connection: close)
                    conn = None
            with lock:
                report.outcomes.append(outcome)
        if conn is not None:
            conn.close()

    pool = [threading.Thread(target=worker, daemon=True) for _ in range(threads)]
    for t in pool:
        t.start()
    for t in pool:
        t.join()
    report.outcomes.sort(key=lambda o: o.due)
    return report


class Mismatch(AssertionError):
    pass


def fetch(conn: http.client.HTTPConnection, probe: Probe) -> bool:
    """Send ``probe`` on ``conn`` and check the answer; True if it had to be resumed."""
    conn.request(probe.method, probe.target, body=probe.body, headers=dict(probe.headers))
    response = conn.getresponse()
    if response.status != probe.status:
        raise Mismatch(f"status {response.status}: {response.read()[:200]!r}")
    body, complete = read_body(response)
    if not complete:
        conn.close()
        body += resume(conn, probe, len(body), response.getheader("ETag"))
    _check(probe, body)
    return not complete


def read_body(response: http.client.HTTPResponse) -> tuple[bytes, bool]:
    """What arrived of the body, and whether it is all that its Content-Length promised."""
    parts: list[bytes] = []
    try:
        while chunk := response.read(1 << 16):
            parts.append(chunk)
    except http.client.IncompleteRead as cut:
        parts.append(cut.partial)
    except OSError:  # reset: what arrived before it is kept
        pass
    body = b"".join(parts)
    length = response.getheader("Content-Length")
    return body, length is not None and len(body) == int(length)


def resume(conn: http.client.HTTPConnection, probe: Probe, have: int, etag: str | None) -> bytes:
    """The rest of a body cut after ``have`` bytes, asked with Range and If-Range."""
    if etag is None:
        raise Mismatch("a cut body without an ETag cannot be resumed")
    headers = {**dict(probe.headers), "Range": f"bytes={have}-", "If-Range": etag}
    conn.request(probe.method, probe.target, body=probe.body, headers=headers)
    response = conn.getresponse()
    rest = response.read()
    if response.status != 206:
        raise Mismatch(f"the resume got {response.status}, not 206")
    return rest


def _check(probe: Probe, body: bytes) -> None:
    digest = hashlib.sha256(body).hexdigest()
    if digest != probe.sha256:
        raise Mismatch(f"corrupt body: {len(body)} bytes, sha256 {digest[:16]}, expected {probe.sha256[:16]}")
