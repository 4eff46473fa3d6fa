"""The memory proof: a 1 GiB batch streams through every runtime at constant memory.

The batch names one 256 MiB sparse file four times. The client reads the response in 64 KiB
chunks and discards them while a thread samples the RSS of the server's whole process tree
every 50 ms. Growth over the RSS after a warm-up request must stay under 32 MiB, and exactly
1 GiB of file bytes (all zeros) plus the framing (no zero byte in it) must arrive.
"""

from __future__ import annotations

import time

import pytest

from e2e_wire import (
    BIG_SIZE,
    GiB,
    KiB,
    MiB,
    RssSampler,
    batch_target,
    build_request,
    check_batch,
    content_type_of,
)

pytestmark = pytest.mark.slow  # every runtime over real sockets

MAX_GROWTH = 32 * MiB
CHUNK = 64 * KiB


@pytest.mark.timeout(120)
def test_one_gib_batch_in_constant_memory(server, served_root):
    # Warm-up: the same code path on a small batch, so imports and caches are in the baseline.
    warm = ["examples/b.bin", "examples/a.bin"]
    check_batch(server.get(batch_target(warm)), warm, served_root)
    time.sleep(0.2)
    baseline = server.rss()

    paths = ["examples/big.bin"] * 4
    buf = bytearray(CHUNK)
    view = memoryview(buf)
    with server.connect(timeout=30) as conn, RssSampler(server.pid) as sampler:
        started = time.monotonic()
        conn.send_raw(build_request("GET", batch_target(paths), conn.host, close=True))
        head = conn.read("HEAD", timeout=30)  # status line and headers only; the body follows
        assert head.status == 200, head.describe()
        length = int(head.header("content-length"))
        boundary = content_type_of(head.header("content-type")).get_boundary().encode()
        # What the reader buffered past the headers counts as body.
        first = bytes(conn.reader.buf)
        received, zeros = len(first), first.count(0)
        opening = first[:200]
        tail = first[-200:]
        sock = conn.sock
        while True:
            n = sock.recv_into(buf, CHUNK)
            if not n:
                break
            received += n
            zeros += buf.count(0, 0, n)
            if len(opening) < 200:
                opening += bytes(view[: min(n, 200)])
            tail = (tail + bytes(view[max(0, n - 200) : n]))[-200:]
        elapsed = time.monotonic() - started

    growth = sampler.peak - baseline
    rate = received / elapsed / MiB
    print(
        f"{server.name}: {received} bytes in {elapsed:.2f}s ({rate:.0f} MiB/s); RSS baseline "
        f"{baseline / MiB:.1f} MiB, peak {sampler.peak / MiB:.1f} MiB, growth {growth / MiB:.1f} MiB "
        f"({sampler.samples} samples)"
    )
    assert received == length, f"Content-Length {length} but {received} bytes arrived"
    assert zeros == 4 * BIG_SIZE == GiB, f"{zeros} file bytes arrived, expected exactly 1 GiB"
    framing = received - zeros
    assert 0 < framing < 4 * KiB, f"{framing} bytes of framing"
    assert opening.startswith(b"--" + boundary + b"\r\n"), opening[:80]
    assert tail.rstrip(b"\r\n").endswith(b"--" + boundary + b"--"), tail[-80:]
    assert sampler.samples >= 3, f"only {sampler.samples} RSS samples: the stream was too short to judge"
    assert growth < MAX_GROWTH, (
        f"{server.name}: server RSS grew by {growth / MiB:.1f} MiB while streaming 1 GiB "
        f"(baseline {baseline / MiB:.1f} MiB, peak {sampler.peak / MiB:.1f} MiB)"
    )
    server.assert_alive()
