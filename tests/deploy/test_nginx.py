"""Axon behind nginx, with the very site deploy/install.sh writes: batches, ranges, 304, errors,
a 1 GiB batch at constant memory, a slow client's back-pressure reaching Axon, upstream
keep-alive, and the metrics endpoint (open to loopback only)."""

from __future__ import annotations

import email.parser
import email.policy
import http.client
import json
import os
import socket
import subprocess
import threading
import time
from pathlib import Path

import psutil
import pytest
from deploy_rig import HOST, GiB, KiB, MiB, Stack, _start, _stop, free_port, nginx_binary, run_install

from axon.limits import DEFAULT_LIMITS

pytestmark = pytest.mark.slow  # real deployments: containers, installs, nginx in front


def request(stack: Stack, method: str, target: str, body: bytes | None = None, headers: dict | None = None,
            conn: http.client.HTTPConnection | None = None, source: str | None = None):
    own = conn is None
    if own:
        conn = http.client.HTTPConnection(HOST, stack.install.listen, timeout=30,
                                          source_address=(source, 0) if source else None)
    try:
        conn.request(method, target, body=body, headers=headers or {})
        response = conn.getresponse()
        return response.status, response.headers, response.read()
    finally:
        if own:
            conn.close()


def multipart(headers, body: bytes):
    raw = b"Content-Type: " + headers["Content-Type"].encode() + b"\r\n\r\n" + body
    message = email.parser.BytesParser(policy=email.policy.HTTP).parsebytes(raw)
    assert message.is_multipart() and not message.defects
    return [(part["Content-Location"] or part["Content-Range"], part.get_payload(decode=True)) for part in message.iter_parts()]


def tree(pid: int) -> list[psutil.Process]:
    top = psutil.Process(pid)
    return [top, *top.children(recursive=True)]


def tree_rss(pid: int) -> int:
    return sum(p.memory_info().rss for p in tree(pid))


def tree_read_bytes(pid: int) -> int:
    """Bytes the processes read from files and sockets (read, pread, sendfile): /proc/PID/io rchar."""
    total = 0
    for p in tree(pid):
        with open(f"/proc/{p.pid}/io") as f:
            total += int(next(line for line in f if line.startswith("rchar:")).split()[1])
    return total


def test_health_and_upstream_keepalive(stack: Stack):
    conn = http.client.HTTPConnection(HOST, stack.install.listen, timeout=10)
    for _ in range(20):
        status, headers, body = request(stack, "GET", "/api/health", conn=conn)
        assert (status, json.loads(body)) == (200, {"status": "available"})
        assert headers["Server"].startswith("nginx")
    conn.close()
    # nginx keeps its connections to Axon open between requests (upstream keepalive): after
    # twenty requests, one or two idle ones remain, not twenty closed ones.
    upstream = [c for p in tree(stack.nginx.pid) for c in p.net_connections("tcp")
                if c.raddr and c.raddr.port == stack.install.port and c.status == psutil.CONN_ESTABLISHED]
    assert 1 <= len(upstream) <= 4, upstream


def test_batch(stack: Stack):
    a = (stack.install.root / "data/a.bin").read_bytes()
    status, headers, body = request(stack, "GET", "/api/stream-files?f1=data/a.bin&f2=examples/hello.txt&f3=data/a.bin")
    assert status == 200
    assert int(headers["Content-Length"]) == len(body)  # not re-chunked by nginx
    assert "Transfer-Encoding" not in headers and "Content-Encoding" not in headers
    assert multipart(headers, body) == [
        ("/files/data/a.bin", a), ("/files/examples/hello.txt", b"Hello from Axon.\n"), ("/files/data/a.bin", a)
    ]


def test_post_batch_and_body_limit(stack: Stack):
    names = ["examples/hello.txt"] * DEFAULT_LIMITS.max_files
    status, headers, body = request(stack, "POST", "/api/stream-files", json.dumps({"files": names}).encode(),
                                    {"Content-Type": "application/json"})
    assert status == 200 and len(multipart(headers, body)) == len(names)
    too_big = json.dumps({"files": ["x" * 100] * (DEFAULT_LIMITS.max_body_bytes // 100)}).encode()
    assert len(too_big) > DEFAULT_LIMITS.max_body_bytes
    status, headers, body = request(stack, "POST", "/api/stream-files", too_big, {"Content-Type": "application/json"})
    assert status == 413  # nginx's client_max_body_size, before Axon, in Axon's JSON shape
    assert headers["Content-Type"] == "application/json" and json.loads(body)["error"]["code"] == "body_too_large"


def _raw(stack: Stack, head: bytes) -> tuple[int, dict, bytes]:
    for _ in range(5):
        # nginx answers an over-long head before reading all of it, then closes; the unread
        # rest can turn the close into a reset that takes the answer with it. Ask again then.
        data = b""
        try:
            with socket.create_connection((HOST, stack.install.listen), timeout=10) as sock:
                sock.sendall(head)
                while chunk := sock.recv(65536):
                    data += chunk
        except (ConnectionResetError, BrokenPipeError):
            pass
        if b"\r\n\r\n" in data:
            break
    top, _, body = data.partition(b"\r\n\r\n")
    lines = top.decode("latin-1").split("\r\n")
    headers = dict(line.split(": ", 1) for line in lines[1:])
    return int(lines[0].split()[1]), headers, body


@pytest.mark.parametrize("head, status, code", [
    (b"GET /files/../../etc/passwd HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n", 400, "bad_request"),
    (b"GET /api/stream-files?f=" + b"x" * 40000 + b" HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n", 414, "uri_too_long"),
    (b"GET /api/health HTTP/1.1\r\nHost: x\r\nX-Big: " + b"x" * 40000 + b"\r\nConnection: close\r\n\r\n", 431, "headers_too_large"),
])  # fmt: skip
def test_nginx_refusals_are_json_too(stack: Stack, head: bytes, status: int, code: str):
    """Errors are JSON, says the wire contract: also the ones nginx decides before Axon."""
    got, headers, body = _raw(stack, head)
    assert got == status and headers["Content-Type"] == "application/json"
    assert json.loads(body)["error"]["code"] == code


def test_long_query_reaches_axon(stack: Stack):
    # 600 names, ~12 KiB of query: past nginx's default 8k buffers, within Axon's 16 KiB.
    query = "&".join(f"f{i}=examples/hello.txt" for i in range(600))
    assert 8 * KiB < len(query) < DEFAULT_LIMITS.max_url_bytes
    status, headers, body = request(stack, "GET", f"/api/stream-files?{query}")
    assert status == 200 and len(multipart(headers, body)) == 600
    # Past Axon's limit, it is still Axon that answers, with its JSON 414.
    status, headers, body = request(stack, "GET", "/api/stream-files?f=" + "a" * (DEFAULT_LIMITS.max_url_bytes + 10))
    assert status == 414 and json.loads(body)["error"]["code"] == "uri_too_long"


def test_ranges(stack: Stack):
    a = (stack.install.root / "data/a.bin").read_bytes()
    status, headers, body = request(stack, "GET", "/files/data/a.bin", headers={"Range": "bytes=100-199"})
    assert (status, body, headers["Content-Range"]) == (206, a[100:200], f"bytes 100-199/{len(a)}")
    status, headers, body = request(stack, "GET", "/files/data/a.bin", headers={"Range": "bytes=0-9,-10"})
    assert status == 206 and headers["Content-Type"].startswith("multipart/byteranges")
    assert [data for _, data in multipart(headers, body)] == [a[:10], a[-10:]]
    # If-Range with a stale validator: the whole file.
    status, _, body = request(stack, "GET", "/files/data/a.bin", headers={"Range": "bytes=0-9", "If-Range": '"stale"'})
    assert (status, body) == (200, a)
    status, headers, _ = request(stack, "GET", "/files/data/a.bin", headers={"Range": f"bytes={len(a)}-"})
    assert status == 416 and headers["Content-Range"] == f"bytes */{len(a)}"


def test_conditional_requests(stack: Stack):
    status, headers, _ = request(stack, "HEAD", "/files/data/a.bin")
    assert status == 200 and int(headers["Content-Length"]) == 300 * KiB
    etag, modified = headers["ETag"], headers["Last-Modified"]
    status, headers, body = request(stack, "GET", "/files/data/a.bin", headers={"If-None-Match": etag})
    assert (status, body, headers["ETag"]) == (304, b"", etag)
    status, _, body = request(stack, "GET", "/files/data/a.bin", headers={"If-Modified-Since": modified})
    assert (status, body) == (304, b"")
    status, _, _ = request(stack, "GET", "/files/data/a.bin", headers={"If-Match": '"other"'})
    assert status == 412


@pytest.mark.parametrize("method, target, status, code", [
    ("GET", "/files/data/missing.bin", 404, "not_found"),
    ("GET", "/api/stream-files?f=../../../../etc/passwd", 403, "outside_root"),
    ("GET", "/api/stream-files", 400, "no_files"),
    ("DELETE", "/api/health", 405, "method_not_allowed"),
    ("GET", "/nowhere", 404, "no_route"),
])  # fmt: skip
def test_errors_are_axons_json(stack: Stack, method: str, target: str, status: int, code: str):
    got, headers, body = request(stack, method, target)
    assert got == status and headers["Content-Type"] == "application/json"
    assert json.loads(body)["error"]["code"] == code


def test_forwarded_headers(stack: Stack):
    status, _, body = request(stack, "GET", "/test/headers", headers={"Connection": "close", "X-Forwarded-For": "203.0.113.9"})
    seen = json.loads(body)
    assert status == 200
    assert seen["x-forwarded-for"] == f"203.0.113.9, {HOST}"
    assert seen["x-real-ip"] == HOST and seen["x-forwarded-proto"] == "http"
    assert seen.get("connection", "") != "close"  # the client's close is not passed upstream


def _metrics(stack: Stack, source: str | None = None) -> tuple[int, dict[str, float]]:
    status, _, body = request(stack, "GET", "/metrics", source=source)
    values = {}
    if status == 200:
        for line in body.decode().splitlines():
            if line and not line.startswith("#"):
                key, _, number = line.rpartition(" ")
                values[key] = float(number)
    return status, values


def test_metrics_through_nginx_loopback_only(stack: Stack):
    status, before = _metrics(stack)
    assert status == 200
    for _ in range(5):
        request(stack, "GET", "/api/stream-files?f1=examples/hello.txt&f2=data/a.bin")
    request(stack, "GET", "/files/data/missing.bin")
    ok = 'axon_requests_total{method="GET",status="200"}'
    missing = 'axon_errors_total{status="404",code="not_found"}'
    deadline = time.monotonic() + 3
    while True:  # with several workers, the others' counts reach a scrape within PUBLISH_INTERVAL
        status, after = _metrics(stack)
        deltas = (after[ok] - before.get(ok, 0), after.get(missing, 0) - before.get(missing, 0),
                  after["axon_files_total"] - before["axon_files_total"])
        if deltas == (5, 1, 10) or time.monotonic() > deadline:
            break
        time.sleep(0.1)
    assert deltas == (5, 1, 10)
    # From any other address, nginx refuses it; the rest of the site stays open.
    status, headers, body = request(stack, "GET", "/metrics", source="127.0.0.2")
    assert status == 403 and json.loads(body)["error"]["code"] == "forbidden"
    assert request(stack, "GET", "/api/health", source="127.0.0.2")[0] == 200


def test_gigabyte_batch_streams_at_constant_memory(stack: Stack):
    """1 GiB through nginx: every byte arrives, and neither Axon nor nginx holds on to it."""
    request(stack, "GET", "/api/stream-files?f=data/a.bin")  # warm up the path
    axon_base, nginx_base = tree_rss(stack.axon.pid), tree_rss(stack.nginx.pid)
    peak = {"axon": axon_base, "nginx": nginx_base}
    done = threading.Event()

    def sample():
        while not done.wait(0.05):
            peak["axon"] = max(peak["axon"], tree_rss(stack.axon.pid))
            peak["nginx"] = max(peak["nginx"], tree_rss(stack.nginx.pid))

    sampler = threading.Thread(target=sample)
    sampler.start()
    conn = http.client.HTTPConnection(HOST, stack.install.listen, timeout=60)
    try:
        conn.request("GET", "/api/stream-files?f=data/big.bin")
        response = conn.getresponse()
        assert response.status == 200
        length = int(response.headers["Content-Length"])
        assert length > GiB
        received, buffer = 0, bytearray(MiB)
        while n := response.readinto(buffer):
            received += n
    finally:
        done.set()
        sampler.join()
        conn.close()
    assert received == length
    assert peak["axon"] - axon_base < 32 * MiB, peak
    assert peak["nginx"] - nginx_base < 32 * MiB, peak


def test_slow_client_back_pressure_reaches_axon(stack: Stack):
    """With proxy_buffering off, a client that stops reading stops Axon: nginx does not read
    the rest of the batch ahead into memory or a temporary file."""
    sock = socket.create_connection((HOST, stack.install.listen), timeout=30)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 64 * KiB)
    try:
        start = tree_read_bytes(stack.axon.pid)
        sock.sendall(f"GET /api/stream-files?f=data/big.bin HTTP/1.1\r\nHost: {HOST}\r\n\r\n".encode())
        got = 0
        while got < 4 * MiB:
            got += len(sock.recv(256 * KiB))
        # The client stops reading. The socket buffers on the way fill up (the kernel grows them
        # for a while), then Axon must stop: wait for its reads to stand still for half a second.
        history = [tree_read_bytes(stack.axon.pid)]
        deadline = time.monotonic() + 6
        while not (len(history) > 2 and history[-1] - history[-3] < 256 * KiB):
            assert time.monotonic() < deadline, "Axon kept reading while nobody took the data"
            time.sleep(0.25)
            history.append(tree_read_bytes(stack.axon.pid))
        ahead = history[-1] - start
        assert ahead < 128 * MiB, f"{ahead / MiB:.0f} MiB read ahead of a stalled client"
    finally:
        sock.close()
    # Axon is still well, and the connection it served is gone.
    assert request(stack, "GET", "/api/health")[0] == 200


def test_nginx_kept_no_error(stack: Stack):
    log = stack.install.prefix / "var/log/nginx/error.log"
    text = log.read_text() if log.exists() else ""
    bad = [line for line in text.splitlines() if "[emerg]" in line or "[alert]" in line or "[crit]" in line]
    assert not bad, "\n".join(bad)


def test_process_files_are_where_the_prefix_says(stack: Stack):
    pid_file = stack.install.prefix / "run/nginx.pid"
    assert pid_file.exists() and int(pid_file.read_text()) == stack.nginx.pid
    assert Path(f"/proc/{stack.nginx.pid}").exists() and os.path.exists(stack.install.prefix / "var/log/nginx/access.log")


def test_nginx_json_access_log(stack: Stack):
    """nginx's own access log, one JSON object a line: the bytes really sent, the whole time."""
    target = f"/api/stream-files?f1=data/a.bin&marker{time.monotonic_ns()}=examples/hello.txt"  # unique
    status, _, body = request(stack, "GET", target, headers={"User-Agent": 'quote " and \\ slash'})
    assert status == 200
    log = stack.install.prefix / "var/log/nginx/axon.access.log"
    deadline = time.monotonic() + 5  # written in 32k buffers, flushed every second
    while True:
        lines = [json.loads(line) for line in (log.read_text().splitlines() if log.exists() else [])]
        mine = [entry for entry in lines if entry["uri"] == target]
        if mine or time.monotonic() > deadline:
            break
        time.sleep(0.2)
    assert len(mine) == 1, lines[-3:]
    (entry,) = mine
    assert (entry["method"], entry["status"], entry["bytes"]) == ("GET", 200, len(body))
    assert entry["client"] == HOST and entry["upstream_status"] == "200"
    assert entry["user_agent"] == 'quote " and \\ slash' and entry["seconds"] >= 0


def try_it(install_output: str) -> list[str]:
    """The commands the script's summary offers under "Try it ...:"."""
    lines = install_output.split("\nTry it", 1)[1].splitlines()[1:]
    commands = []
    for line in lines:
        if not line.startswith("  curl "):
            break
        commands.append(line.strip())
    assert len(commands) == 2, install_output
    return commands


def check_try_it(commands: list[str]) -> None:
    health, batch = (subprocess.run(["bash", "-c", f"{command} --max-time 20 --silent --show-error"],
                                    capture_output=True, text=True, timeout=30) for command in commands)
    assert health.returncode == 0 and json.loads(health.stdout) == {"status": "available"}, (commands[0], health)
    assert batch.returncode == 0 and batch.stdout.startswith("HTTP/1.1 200"), (commands[1], batch.stdout[:500])


def listening(port: int) -> bool:
    with socket.socket() as sock:
        return sock.connect_ex((HOST, port)) == 0


def test_the_summarys_try_it_commands_work(stack: Stack):
    check_try_it(try_it(stack.install.first.stdout))


def test_a_named_sites_try_it_commands_pass_debians_default_site(stack: Stack, tmp_path: Path):
    """With --server-name, nginx answers that name only; Debian's default site takes every other
    request to the port. The summary's commands must ask for the name (before DNS names the host)."""
    listen = free_port()
    done = run_install("--prefix", str(tmp_path), "--no-venv", "--server-name", "files.example.org",
                       "--listen", f"{HOST}:{listen}", "--port", str(stack.install.port), "--root", str(stack.install.root))
    # As Debian's own site: the port's default server, which knows nothing of /api/.
    (tmp_path / "etc/nginx/sites-enabled/default").write_text(
        f"server {{ listen {HOST}:{listen} default_server; server_name _; return 404; }}\n")
    log = tmp_path / "nginx.log"
    front = _start([nginx_binary(), "-c", str(tmp_path / "etc/nginx/nginx.conf"), "-g", "daemon off;"], log)
    try:
        deadline = time.monotonic() + 20
        while not listening(listen):
            assert front.poll() is None and time.monotonic() < deadline, log.read_text()
            time.sleep(0.05)
        check_try_it(try_it(done.stdout))
    finally:
        _stop(front)
