"""``/api/health`` of an object-store root, on every runtime over real sockets against a real
SeaweedFS: a 503 naming the store's failure once requests fail (a load balancer takes the node
out), "available" again once the store answers (checked in the background, since such a node
gets no requests), and never a request to the store per probe."""

from __future__ import annotations

import json
import time
import uuid

import pytest

from conftest import HOST, RUNTIMES, get, serve

pytestmark = pytest.mark.slow  # a store paused past the source's timeout, on each runtime

pytest.importorskip("obstore")


@pytest.fixture(scope="module")
def prefix(weed) -> str:
    name = f"health-{uuid.uuid4().hex[:8]}"
    weed.put(f"{name}/a.txt", b"hello\n")
    return name


@pytest.mark.parametrize("runtime", sorted(RUNTIMES))
def test_health_says_the_store_failed_and_recovered(weed, prefix, tmp_path, runtime):
    served = serve(runtime, weed.url(prefix), weed, tmp_path)
    try:
        assert get(served.port, "/api/health")[::2] == (200, b'{"status":"available"}')
        weed.pause()
        try:
            assert get(served.port, "/files/a.txt")[0] == 503
            status, headers, body = get(served.port, "/api/health")
        finally:
            weed.resume()
        answer = json.loads(body)
        assert (status, headers["content-type"], answer["status"]) == (503, "application/json", "unavailable")
        assert answer["error"]["code"] == "store_unavailable" and "did not answer" in answer["error"]["message"]
        assert headers["cache-control"] == "no-store"
        deadline = time.monotonic() + 20  # the note is checked again once older than object_health.FRESH
        while (status := get(served.port, "/api/health")[0]) != 200 and time.monotonic() < deadline:
            time.sleep(0.5)
        assert status == 200, "health did not say the store answers again"
    finally:
        served.stop()


def test_probes_do_not_ask_the_store_each_time(weed, prefix, tmp_path):
    served = serve("native", weed.url(prefix), weed, tmp_path)
    try:
        get(served.port, "/files/a.txt")  # a request the store answered: a fresh note
        before = weed.requests().get("GET", 0)
        for _ in range(50):
            assert get(served.port, "/api/health")[0] == 200
        time.sleep(0.2)  # the store counts a request once its answer is written
        asked = weed.requests().get("GET", 0) - before
    finally:
        served.stop()
    assert asked <= 1  # at most the one background check of a note that grew old
