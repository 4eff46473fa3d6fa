"""``axon serve s3://... --object-disk-cache DIR`` against a real SeaweedFS: cold then warm (the
store sees no GET for warm objects, by its own counters), a restart served from the tier, an
overwrite between two batches, a server killed mid-fill, 50 requests at once for a cold object,
the bound under a flood, and a full disk."""

from __future__ import annotations

import hashlib
import http.client
import os
import signal
import time
import uuid
from concurrent.futures import ThreadPoolExecutor

import pytest

from conftest import HOST, RUNTIMES, get, serve

pytestmark = pytest.mark.slow  # SeaweedFS and axon serve over sockets

pytest.importorskip("obstore")

KiB, MiB = 1024, 1 << 20
#: Enough keys for a batch to be listed (object_listing.LIST_MIN).
COUNT = 20


def content(prefix: str, i: int, size: int) -> bytes:
    return hashlib.sha256(f"{prefix}/{i}".encode()).digest() * (size // 32) + b"\n" * (size % 32)


@pytest.fixture
def objects(weed) -> tuple[str, dict[str, bytes]]:
    """A prefix of COUNT objects, small (kept in memory without the tier) and larger alike."""
    prefix = f"tier-{uuid.uuid4().hex[:8]}"
    kept = {}
    for i in range(COUNT):
        data = content(prefix, i, 3 * KiB if i % 2 else 100 * KiB + i)
        weed.put(f"{prefix}/o/{i:02d}.bin", data)
        kept[f"o/{i:02d}.bin"] = data
    return prefix, kept


def started(weed, prefix, tmp_path, cache_dir, *flags, runtime="native"):
    logs = tmp_path / f"{runtime}-{uuid.uuid4().hex[:6]}"
    logs.mkdir()
    if runtime != "native":  # the variables the flags stand for
        return serve(runtime, weed.url(prefix), weed, logs, AXON_OBJECT_DISK_CACHE=str(cache_dir), AXON_OBJECT_CACHE="0")
    return serve(runtime, weed.url(prefix), weed, logs, "--object-disk-cache", str(cache_dir), "--object-cache", "0",
                 *flags)


def batch(port: int, names: list[str], parse_multipart) -> list[bytes]:
    status, headers, body = get(port, "/api/stream-files?" + "&".join(f"f={n}" for n in names))
    assert status == 200, body[:300]
    assert int(headers["content-length"]) == len(body)
    return [p.get_payload(decode=True) for p in parse_multipart(headers["content-type"], body)]


def gets(weed, settle: float = 0.3) -> int:
    """The store's GETs once their count has stood still for ``settle`` seconds: the store
    counts a request once its answer is written, and a fill's GET may end after the response
    the test read (at most 10 s)."""
    deadline = time.monotonic() + 10
    count = weed.requests().get("GET", 0)
    while time.monotonic() < deadline:
        time.sleep(settle)
        now = weed.requests().get("GET", 0)
        if now == count:
            break
        count = now
    return count


def quiet(weed) -> int:
    """The store's GETs once the server's start (its health check, in the background) is over."""
    return gets(weed, settle=0.5)


def kept_files(cache_dir) -> list[str]:
    return sorted(f for _, _, fs in os.walk(cache_dir) for f in fs if "." not in f)


def wait_for_files(cache_dir, count: int, timeout: float = 10.0) -> None:
    deadline = time.monotonic() + timeout
    while len(kept_files(cache_dir)) < count and time.monotonic() < deadline:
        time.sleep(0.02)
    assert len(kept_files(cache_dir)) == count


def test_cold_then_warm_then_a_restart(weed, objects, tmp_path, parse_multipart):
    prefix, data = objects
    names = sorted(data)
    cache_dir = tmp_path / "tier"
    server = started(weed, prefix, tmp_path, cache_dir, "--metrics")
    try:
        before = quiet(weed)
        assert batch(server.port, names, parse_multipart) == [data[n] for n in names]
        assert gets(weed) - before == COUNT  # one GET per object: the fill, or the opening that brought it whole
        wait_for_files(cache_dir, COUNT)
        before = gets(weed)
        assert batch(server.port, names, parse_multipart) == [data[n] for n in names]
        assert gets(weed) - before == 0  # warm: every object from its file
        _, _, scraped = get(server.port, "/metrics")
        counted = dict(line.rsplit(" ", 1) for line in scraped.decode().splitlines() if line.startswith("axon_object"))
        assert counted == {"axon_object_disk_hits_total": str(COUNT), "axon_object_disk_misses_total": str(COUNT),
                           "axon_object_disk_bytes_filled_total": str(sum(map(len, data.values()))),
                           "axon_object_disk_evictions_total": "0", "axon_object_disk_fill_failures_total": "0"}
        status, _, body = get(server.port, f"/files/{names[0]}")  # one key, a range too
        assert status == 200 and body == data[names[0]]
    finally:
        server.stop()
    again = started(weed, prefix, tmp_path, cache_dir)
    try:
        before = quiet(weed)
        assert batch(again.port, names, parse_multipart) == [data[n] for n in names]
        assert gets(weed) - before == 0  # the first batch after a restart, from the tier
        status, headers, body = get(again.port, "/api/stream-files.tar?" + "&".join(f"f={n}" for n in names))
        assert status == 200 and int(headers["content-length"]) == len(body)
        assert gets(weed) - before == 0
        assert "objects kept on disk in" in again.log_text()  # the start line names the tier
    finally:
        again.stop()


def test_within_the_listing_window_a_warm_batch_asks_the_store_nothing(weed, objects, tmp_path, parse_multipart):
    """``--object-listing-valid``: objects kept on disk are sent under the listing entry of the
    batch before, so a warm batch costs the store no LIST and no GET."""
    prefix, data = objects
    names = sorted(data)
    cache_dir = tmp_path / "tier"
    server = started(weed, prefix, tmp_path, cache_dir, "--object-listing-valid", "60")
    try:
        quiet(weed)
        assert batch(server.port, names, parse_multipart) == [data[n] for n in names]
        wait_for_files(cache_dir, COUNT)
        before = weed.requests()
        assert batch(server.port, names, parse_multipart) == [data[n] for n in names]
        time.sleep(0.2)  # the store counts a request once its answer is written
        after = weed.requests()
        assert {kind: after.get(kind, 0) - before.get(kind, 0) for kind in ("GET", "LIST")} == {"GET": 0, "LIST": 0}
    finally:
        server.stop()


def store_sent(weed) -> int:
    """The bytes the store has sent (its own metrics)."""
    import urllib.request

    with urllib.request.urlopen(weed.metrics_url, timeout=5) as answer:
        for line in answer.read().decode().splitlines():
            if line.startswith("SeaweedFS_s3_bucket_traffic_sent_bytes_total{") and f'bucket="{weed.bucket}"' in line:
                return int(float(line.rsplit(" ", 1)[1]))
    return 0


def held_files(pid: int, cache_dir) -> list[str]:
    """What the descriptors of ``pid``'s workers name under ``cache_dir``."""
    names = []
    with open(f"/proc/{pid}/task/{pid}/children") as f:
        workers = [int(p) for p in f.read().split()]
    for worker in workers:
        for fd in os.listdir(f"/proc/{worker}/fd"):
            try:
                target = os.readlink(f"/proc/{worker}/fd/{fd}")
            except OSError:
                continue
            if target.startswith(str(cache_dir)):
                names.append(target)
    return names


def test_a_single_key_on_disk_costs_the_store_a_304(weed, objects, tmp_path):
    prefix, data = objects
    name = "o/00.bin"  # larger than the opening read
    cache_dir = tmp_path / "tier"
    server = started(weed, prefix, tmp_path, cache_dir)
    try:
        assert get(server.port, f"/files/{name}")[2] == data[name]
        before, sent = quiet(weed), store_sent(weed)
        status, headers, body = get(server.port, f"/files/{name}", {"Range": "bytes=10-99"})
        assert status == 206 and body == data[name][10:100]
        assert gets(weed) - before == 1 and store_sent(weed) == sent  # If-None-Match: the store's 304
        data[name] = b"new:" + data[name][4:]
        weed.put(f"{prefix}/{name}", data[name])
        assert get(server.port, f"/files/{name}")[2] == data[name]  # the new version, opened as before
        assert gets(weed) - before == 3  # its opening (not a 304), and its fill
    finally:
        server.stop()


@pytest.mark.parametrize("runtime", sorted(set(RUNTIMES) - {"native"}))
def test_kept_objects_are_sent_as_files_by_the_other_runtimes(runtime, weed, objects, tmp_path, parse_multipart):
    prefix, data = objects
    names = sorted(data)
    cache_dir = tmp_path / "tier"
    server = started(weed, prefix, tmp_path, cache_dir, runtime=runtime)
    try:
        assert batch(server.port, names, parse_multipart) == [data[n] for n in names]
        wait_for_files(cache_dir, COUNT)
        before = gets(weed)
        assert batch(server.port, names, parse_multipart) == [data[n] for n in names]
        status, headers, body = get(server.port, "/api/stream-files.zip?" + "&".join(f"f={n}" for n in names))
        assert status == 200 and int(headers["content-length"]) == len(body)
        import io
        import zipfile

        with zipfile.ZipFile(io.BytesIO(body)) as z:
            assert z.testzip() is None and [z.read(n) for n in names] == [data[n] for n in names]
        assert gets(weed) - before == 0
    finally:
        server.stop()


def test_an_overwrite_between_two_batches(weed, objects, tmp_path, parse_multipart):
    prefix, data = objects
    names = sorted(data)
    cache_dir = tmp_path / "tier"
    server = started(weed, prefix, tmp_path, cache_dir)
    try:
        batch(server.port, names, parse_multipart)
        wait_for_files(cache_dir, COUNT)
        assert batch(server.port, names, parse_multipart) == [data[n] for n in names]
        assert len(held_files(server.proc.pid, cache_dir)) >= COUNT  # kept open for the next hits
        old_files = set(kept_files(cache_dir))
        for name in names[:2]:  # one large, one small
            data[name] = b"new:" + data[name][4:]
            weed.put(f"{prefix}/{name}", data[name])
        before = gets(weed)
        assert batch(server.port, names, parse_multipart) == [data[n] for n in names]
        assert gets(weed) - before == 2  # only the overwritten ones are fetched again
        wait_for_files(cache_dir, COUNT)
        assert len(old_files - set(kept_files(cache_dir))) == 2  # their old files are gone
        time.sleep(1.5)  # a sweep: no descriptor of a deleted file stays open
        assert [f for f in held_files(server.proc.pid, cache_dir) if f.endswith("(deleted)")] == []
        assert batch(server.port, names, parse_multipart) == [data[n] for n in names]
    finally:
        server.stop()


def test_fifty_requests_at_once_for_a_cold_object_fetch_it_once(weed, objects, tmp_path, parse_multipart):
    prefix, data = objects
    names = sorted(data)
    big = f"o/big-{uuid.uuid4().hex[:6]}.bin"
    data[big] = os.urandom(3 * MiB)
    weed.put(f"{prefix}/{big}", data[big])
    cache_dir = tmp_path / "tier"
    server = started(weed, prefix, tmp_path, cache_dir, "--workers", "2")
    try:
        batch(server.port, names, parse_multipart)  # the others warm: only the big one is cold
        wait_for_files(cache_dir, COUNT)
        asked = [*names, big]
        before = gets(weed)
        with ThreadPoolExecutor(50) as pool:
            answers = list(pool.map(lambda _: batch(server.port, asked, parse_multipart), range(50)))
        assert all(a == [data[n] for n in asked] for a in answers)
        assert gets(weed) - before == 1
    finally:
        server.stop()


def test_a_large_object_is_filled_by_ranged_gets(weed, objects, tmp_path):
    from axon.storage.object_tiered import FILL_PIECE

    prefix, _ = objects
    name = f"o/large-{uuid.uuid4().hex[:6]}.bin"
    payload = os.urandom(2 * FILL_PIECE + 12345)
    weed.put(f"{prefix}/{name}", payload)
    cache_dir = tmp_path / "tier"
    server = started(weed, prefix, tmp_path, cache_dir)
    try:
        before = quiet(weed)
        status, _, body = get(server.port, f"/files/{name}")
        assert status == 200 and body == payload
        # The opening asks for the first piece and the fill goes on with it: then two pieces.
        assert gets(weed) - before == 1 + 2
        status, _, body = get(server.port, f"/files/{name}", {"Range": f"bytes={FILL_PIECE - 10}-{FILL_PIECE + 9}"})
        assert status == 206 and body == payload[FILL_PIECE - 10 : FILL_PIECE + 10]
        assert gets(weed) - before == 1 + 2 + 1  # a kept object costs its opening only
    finally:
        server.stop()


def test_a_cold_object_past_the_opening_read_costs_one_get(weed, objects, tmp_path):
    """A single object longer than the opening's read and shorter than a piece: the opening asks
    for the piece and the fill keeps what it brings, so the store sees one GET, not two."""
    prefix, data = objects
    name = "o/00.bin"  # 100 KiB
    cache_dir = tmp_path / "tier"
    server = started(weed, prefix, tmp_path, cache_dir)
    try:
        before = quiet(weed)
        assert get(server.port, f"/files/{name}")[2] == data[name]
        assert gets(weed) - before == 1
        wait_for_files(cache_dir, 1)
        assert get(server.port, f"/files/{name}")[2] == data[name]  # from its file: the opening's 304
        assert gets(weed) - before == 2
    finally:
        server.stop()


def test_within_the_window_requests_at_once_for_a_cold_object_open_it_once(weed, objects, tmp_path):
    """``/files/KEY`` of a cold large object asked 20 times at once: within a listing window the
    store sees one opening and the fill's ranged GETs; the requests that came while the opening was
    under way read behind its fill."""
    from axon.storage.object_tiered import FILL_PIECE

    prefix, _ = objects
    name = f"o/large-{uuid.uuid4().hex[:6]}.bin"
    payload = os.urandom(2 * FILL_PIECE + 12345)
    weed.put(f"{prefix}/{name}", payload)
    server = started(weed, prefix, tmp_path, tmp_path / "tier", "--object-listing-valid", "60")
    try:
        before = quiet(weed)
        with ThreadPoolExecutor(20) as pool:
            answers = list(pool.map(lambda _: get(server.port, f"/files/{name}"), range(20)))
        assert all(status == 200 and body == payload for status, _, body in answers)
        assert gets(weed) - before == 1 + 2  # one opening (the first piece), then two pieces
    finally:
        server.stop()


def test_a_server_killed_mid_fill_leaves_nothing_served(weed, tmp_path, parse_multipart):
    prefix = f"tier-kill-{uuid.uuid4().hex[:6]}"
    names = [f"k/{i:02d}.bin" for i in range(COUNT)]
    data = {n: content(prefix, i, 8 * MiB if i == 0 else 70 * KiB) for i, n in enumerate(names)}
    for name, payload in data.items():
        weed.put(f"{prefix}/{name}", payload)
    cache_dir = tmp_path / "tier"
    server = started(weed, prefix, tmp_path, cache_dir)
    conn = http.client.HTTPConnection(HOST, server.port, timeout=30)
    try:
        conn.request("GET", f"/files/{names[0]}")
        deadline = time.monotonic() + 10
        while not any(f.endswith(".tmp") for _, _, fs in os.walk(cache_dir) for f in fs):
            assert time.monotonic() < deadline, "no fill began"
            time.sleep(0.001)
        weed.pause()  # the fill stops where it is
        os.killpg(server.proc.pid, signal.SIGKILL)
        server.proc.wait(10)
    finally:
        weed.resume()
        conn.close()
        server.stop()
    assert kept_files(cache_dir) == []  # nothing whole: nothing named
    again = started(weed, prefix, tmp_path, cache_dir)
    try:
        assert not any(f.endswith(".tmp") for _, _, fs in os.walk(cache_dir) for f in fs)  # cleaned at start
        assert batch(again.port, names, parse_multipart) == [data[n] for n in names]
        status, _, body = get(again.port, f"/files/{names[0]}")
        assert status == 200 and body == data[names[0]]
    finally:
        again.stop()


def test_a_flood_of_distinct_objects_stays_within_the_bound(weed, tmp_path, parse_multipart):
    prefix = f"tier-flood-{uuid.uuid4().hex[:6]}"
    names = [f"f/{i:03d}.bin" for i in range(60)]
    data = {n: content(prefix, i, 90 * KiB) for i, n in enumerate(names)}
    for name, payload in data.items():
        weed.put(f"{prefix}/{name}", payload)
    cache_dir = tmp_path / "tier"
    bound = 1 * MiB
    server = started(weed, prefix, tmp_path, cache_dir, "--object-disk-size", "1M", "--workers", "2")
    try:
        for start in range(0, 60, 20):
            chunk = names[start : start + 20]
            assert batch(server.port, chunk, parse_multipart) == [data[n] for n in chunk]
            on_disk = sum(os.lstat(os.path.join(d, f)).st_blocks * 512 for d, _, fs in os.walk(cache_dir)
                          for f in fs if not f.startswith("."))
            assert on_disk <= bound
        assert 0 < len(kept_files(cache_dir)) <= bound // (90 * KiB)
    finally:
        server.stop()


def test_a_full_disk_serves_from_the_store(weed, tmp_path, small_disk, parse_multipart):
    cache_dir = small_disk
    prefix = f"tier-full-{uuid.uuid4().hex[:6]}"
    names = [f"full/{i:02d}.bin" for i in range(COUNT)]
    data = {n: content(prefix, i, 300 * KiB) for i, n in enumerate(names)}
    for name, payload in data.items():
        weed.put(f"{prefix}/{name}", payload)
    server = started(weed, prefix, tmp_path, cache_dir, "--object-disk-size", "100M")
    try:
        for _ in range(2):
            assert batch(server.port, names, parse_multipart) == [data[n] for n in names]
        assert "no space left on the device" in server.log_text()
    finally:
        server.stop()
