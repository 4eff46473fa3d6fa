"""How ``axon serve s3://...`` authenticates, with the real command: no credentials in the
environment is a usage error at start that names the variables to set, and the cloud's instance
metadata service is asked only when the user says so (``AXON_INSTANCE_CREDENTIALS=1``). The
metadata service here is a small one on loopback (``AWS_METADATA_ENDPOINT``), which counts what
it is asked and, when asked, hands out SeaweedFS's keys as an instance role would."""

from __future__ import annotations

import contextlib
import http.client
import json
import os
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from conftest import HOST, serve

pytest.importorskip("obstore")

#: The AWS_* variables a test's environment starts without (the suite's own may set some).
_CLEARED = ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN", "AWS_SKIP_SIGNATURE",
            "AWS_WEB_IDENTITY_TOKEN_FILE", "AWS_ROLE_ARN", "AWS_CONTAINER_CREDENTIALS_RELATIVE_URI",
            "AWS_CONTAINER_CREDENTIALS_FULL_URI", "AXON_INSTANCE_CREDENTIALS", "AWS_PROFILE")


@contextlib.contextmanager
def metadata_service(keys: tuple[str, str]) -> Iterator[tuple[str, list[str]]]:
    """An instance metadata service (IMDSv2's three requests) on loopback: its URL, and the
    requests it was asked (method and path)."""
    asked: list[str] = []
    access, secret = keys

    class Handler(BaseHTTPRequestHandler):
        def _answer(self, body: bytes) -> None:
            asked.append(f"{self.command} {self.path}")
            self.send_response(200)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def do_PUT(self) -> None:  # noqa: N802 - the token
            self._answer(b"a-token")

        def do_GET(self) -> None:  # noqa: N802 - the role, then its keys
            if self.path.endswith("/security-credentials/"):
                self._answer(b"axon-role")
                return
            expires = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(time.time() + 3600))
            # SeaweedFS knows no sessions: an empty token is sent as none.
            self._answer(json.dumps({"AccessKeyId": access, "SecretAccessKey": secret, "Token": "",
                                     "Expiration": expires}).encode())

        def log_message(self, *args: object) -> None:
            pass

    server = ThreadingHTTPServer((HOST, 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://{HOST}:{server.server_address[1]}", asked
    finally:
        server.shutdown()
        server.server_close()


def _environment(weed, **extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in _CLEARED}
    env.update(AWS_ENDPOINT_URL=weed.endpoint, AWS_REGION="us-east-1", AWS_ALLOW_HTTP="true", **extra)
    return env


def test_no_credentials_is_a_usage_error_and_the_instance_is_not_asked(weed):
    import seaweed

    with metadata_service((seaweed.ACCESS_KEY, seaweed.SECRET_KEY)) as (endpoint, asked):
        argv = [sys.executable, "-m", "axon.cli", "serve", weed.url("x"), "--port", "0", "--workers", "1"]
        try:
            done = subprocess.run(argv, env=_environment(weed, AWS_METADATA_ENDPOINT=endpoint), capture_output=True,
                                  text=True, timeout=20, stdin=subprocess.DEVNULL)
        except subprocess.TimeoutExpired:
            pytest.fail("axon serve started without credentials")
    assert done.returncode == 2, done.stderr
    for named in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SKIP_SIGNATURE", "AXON_INSTANCE_CREDENTIALS"):
        assert named in done.stderr
    assert "Traceback" not in done.stderr and asked == []


def test_one_key_of_the_pair_says_which_is_missing(weed):
    argv = [sys.executable, "-m", "axon.cli", "serve", weed.url("x"), "--port", "0", "--workers", "1"]
    done = subprocess.run(argv, env=_environment(weed, AWS_ACCESS_KEY_ID="k"), capture_output=True, text=True,
                          timeout=20, stdin=subprocess.DEVNULL)
    assert done.returncode == 2 and "AWS_ACCESS_KEY_ID is set but not its pair" in done.stderr


@pytest.mark.slow  # a server started and a store asked
def test_instance_credentials_when_asked_for_serve_the_bucket(weed, tmp_path):
    """The role the metadata service names signs the requests: the files are served."""
    import seaweed

    weed.put("instance/a.txt", b"from the instance's role\n")
    with metadata_service((seaweed.ACCESS_KEY, seaweed.SECRET_KEY)) as (endpoint, asked):
        # serve() starts from os.environ and the store's keys: those left out
        env = {**dict.fromkeys(_CLEARED), "AXON_INSTANCE_CREDENTIALS": "1", "AWS_METADATA_ENDPOINT": endpoint}
        served = serve("native", weed.url("instance"), weed, tmp_path, **env)
        try:
            conn = http.client.HTTPConnection(HOST, served.port, timeout=10)
            conn.request("GET", "/files/a.txt")
            response = conn.getresponse()
            assert (response.status, response.read()) == (200, b"from the instance's role\n")
        finally:
            served.stop()
    assert "PUT /latest/api/token" in asked


def test_unsigned_requests_need_no_credentials(weed):
    """AWS_SKIP_SIGNATURE=true: a public bucket's reader; the store decides (SeaweedFS here
    refuses anonymous reads, which is a 403, not a start-up error)."""
    from axon.config import object_store_environment
    from axon.storage.objects import ObjectSource

    env = object_store_environment(_environment(weed, AWS_SKIP_SIGNATURE="true"))
    source = ObjectSource(weed.url("x"), env=env, timeout=5)
    assert source.root == weed.url("x")
