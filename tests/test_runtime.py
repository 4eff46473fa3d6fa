"""What the runtimes do alike (axon.runtime): headers folded, a body read within the limits, the
App built on first use."""

from __future__ import annotations

import http.client
import json
import os
import signal
import socket
import subprocess
import sys
import time

import pytest

from axon.errors import HTTPError
from axon.limits import Limits
from axon.runtime import BodyReader, Lazy, check_head, checked_from, declared_length, fold_headers

LIMITS = Limits(max_body_bytes=10)


def test_headers_are_folded_in_order_with_lower_case_names():
    fields = [(b"Accept", b"a"), (b"X-Tag", b"1"), (b"accept", b"b"), (b"X-Name", "é".encode("latin-1"))]
    assert fold_headers(fields) == {"accept": "a, b", "x-tag": "1", "x-name": "é"}


@pytest.mark.parametrize("text, status", [("-1", 400), (" 1", 400), ("1_0", 400), ("²", 400), ("", 400), ("11", 413)])
def test_a_declared_length_that_is_not_a_size_within_the_limit_is_refused(text, status):
    with pytest.raises(HTTPError) as refused:
        declared_length(text, LIMITS)
    assert refused.value.status == status


def test_a_declared_length_within_the_limit_is_its_size():
    assert declared_length("10", LIMITS) == 10 and declared_length(None, LIMITS) is None


def test_a_body_is_refused_as_soon_as_its_pieces_pass_the_limit():
    body = BodyReader(LIMITS)
    body.add(b"12345")
    assert body.body() == b"12345"  # one piece: as it came
    body.add(b"67890")
    assert body.body() == b"1234567890" and body.size == 10
    with pytest.raises(HTTPError) as refused:
        body.add(b"!")
    assert refused.value.status == 413


@pytest.mark.parametrize("limits", [
    Limits(), Limits(max_headers=3, max_header_bytes=200, max_url_bytes=100), Limits(max_headers=1),
    Limits(max_url_bytes=50, max_header_bytes=10_000), Limits(max_header_bytes=10),
])
def test_within_the_sizes_checked_from_gives_check_head_refuses_no_head(limits):
    """checked_from asks check_head: a head of at most ``fields`` fields and ``size`` bytes,
    whatever its target, count and bytes, passes; one field or one byte more may not."""
    fields, size = checked_from(limits)
    for target in {0, size // 2, size}:
        for count in {0, fields // 2, fields}:
            for field_bytes in {0, size - target, size}:
                check_head(target, count, field_bytes, limits)
    with pytest.raises(HTTPError):
        check_head(size + 1, fields, size + 1, limits)
    with pytest.raises(HTTPError):
        check_head(0, fields + 1, 0, limits)


def test_the_lazy_app_is_built_once_on_first_use():
    built: list[int] = []
    lazy = Lazy(lambda: built.append(1) or object())
    assert built == []
    first = lazy()
    assert lazy() is first and built == [1]


# -- an App that cannot be built, under real servers ---------------------------------------------------

MISSING_ROOT = "/nonexistent-axon-root"
SAID = f"root is not a directory: {MISSING_ROOT}"


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _start(argv: list[str], **env: str) -> subprocess.Popen:
    environ = {k: v for k, v in os.environ.items() if not k.startswith("AXON_")}
    return subprocess.Popen([sys.executable, "-m", *argv], env={**environ, "AXON_ROOT": MISSING_ROOT, **env},
                            stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                            start_new_session=True)


def _stop(proc: subprocess.Popen) -> str:
    if proc.poll() is None:
        os.killpg(proc.pid, signal.SIGTERM)
    try:
        out, _ = proc.communicate(timeout=10)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        out, _ = proc.communicate(timeout=10)
    return out


def _health(port: int, proc: subprocess.Popen) -> tuple[int, str, bytes]:
    deadline = time.monotonic() + 20
    while True:
        try:
            connection = http.client.HTTPConnection("127.0.0.1", port, timeout=5)
            connection.request("GET", "/api/health")
            answer = connection.getresponse()
            return answer.status, answer.getheader("Content-Type", ""), answer.read()
        except OSError:
            if proc.poll() is not None or time.monotonic() > deadline:
                raise AssertionError(f"the server did not answer: {_stop(proc)}") from None
            time.sleep(0.1)


@pytest.mark.slow  # a server process
def test_uvicorn_fails_its_startup_saying_the_root_is_missing():
    proc = _start(["uvicorn", "axon.asgi:application", "--port", str(_free_port())])
    try:
        proc.wait(timeout=20)
    finally:
        said = _stop(proc)
    assert proc.returncode != 0 and SAID in said and "Traceback" not in said
    assert "startup complete" not in said.lower()


@pytest.mark.slow  # a server process
@pytest.mark.parametrize("argv", [
    ["uvicorn", "axon.asgi:application", "--lifespan", "off"],  # no lifespan: built on a first request
    ["gunicorn", "--workers", "1", "axon.wsgi:application"],
], ids=["uvicorn-no-lifespan", "gunicorn"])
def test_without_a_startup_event_each_request_gets_a_json_503_saying_why(argv):
    port = _free_port()
    proc = _start([*argv, "--bind" if argv[0] == "gunicorn" else "--port",
                   f"127.0.0.1:{port}" if argv[0] == "gunicorn" else str(port)])
    try:
        status, media_type, body = _health(port, proc)
        again = _health(port, proc)
    finally:
        said = _stop(proc)
    assert (status, media_type) == (503, "application/json") and again[0] == 503
    error = json.loads(body)["error"]
    assert error["code"] == "cannot_serve" and SAID in error["message"]
    assert said.count(SAID) == 1 and "Traceback" not in said  # the server's log says why, once
