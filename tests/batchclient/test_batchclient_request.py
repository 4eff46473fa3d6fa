"""Requests as plain data, refusals read back, and the verdict on a resumed answer: no socket."""

from __future__ import annotations

import json
from email.message import Message

import pytest

from axon.batchclient.request import build_post, build_request
from axon.batchclient.resume import Saved, Verdict, judge, keeps_saved_after, resume_headers


def test_fetch_asks_with_get_on_a_connection_of_its_own():
    request = build_request("http://h:8000/prefix/", ["a.bin", "d/b c.bin"])
    assert (request.method, request.origin) == ("GET", "http://h:8000")
    assert request.target == "/prefix/api/stream-files?file1=a.bin&file2=d/b+c.bin"
    assert dict(request.headers)["Connection"] == "close"


def test_axon_urls_post_slices_on_a_pooled_connection():
    items = ["a.bin", {"path": "b.bin", "offset": 3, "length": 2}]
    request = build_post("https://[::1]:8443", items, {"Authorization": "Bearer t"})
    assert (request.method, request.url) == ("POST", "https://[::1]:8443/api/stream-files")
    assert json.loads(request.body) == {"files": items} and b" " not in request.body
    headers = dict(request.headers)
    assert headers["Authorization"] == "Bearer t" and headers["Content-Type"] == "application/json"
    assert "Connection" not in headers and "Host" not in headers  # the pool's to set


SAVED = Saved('"etag"', "multipart/mixed; boundary=b1", 1000, 400)


def headers(**values: str) -> Message:
    message = Message()
    for name, value in values.items():
        message[name.replace("_", "-")] = value
    return message


@pytest.mark.parametrize("status, given, length, saved, verdict", [
    (200, headers(), None, None, Verdict.FRESH),
    (206, headers(), None, None, Verdict.UNUSABLE),
    (200, headers(), None, SAVED, Verdict.START_OVER),
    (206, headers(Content_Range="bytes 400-999/1000", ETag='"etag"'), 600, SAVED, Verdict.CONTINUE),
    (206, headers(Content_Range="bytes 401-999/1000"), None, SAVED, Verdict.UNUSABLE),
    (206, headers(Content_Range="bytes 400-999/1000", ETag='"other"'), None, SAVED, Verdict.UNUSABLE),
    (206, headers(Content_Range="bytes 400-999/1000", Content_Type="multipart/mixed; boundary=b2"), None, SAVED,
     Verdict.UNUSABLE),
])  # fmt: skip
def test_the_verdict_on_a_resumed_answer(status, given, length, saved, verdict):
    assert judge(status, given, length, saved)[0] is verdict


def test_resuming_asks_for_the_rest_if_it_is_the_same_batch():
    assert resume_headers(SAVED) == {"Range": "bytes=400-", "If-Range": '"etag"'}
    assert keeps_saved_after(404) and not keeps_saved_after(416)


def test_the_blocking_client_needs_nothing_but_the_standard_library():
    """aiohttp (the async transport) is imported only when ``afetch`` runs."""
    import subprocess
    import sys

    code = "import sys, axon.client, axon.client.cli, axon.batchclient.reader; print(sorted({'aiohttp', 'yarl'} & set(sys.modules)))"
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=True)
    assert done.stdout.strip() == "[]"
