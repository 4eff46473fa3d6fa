"""Signed requests over real sockets, under gunicorn (WSGI), uvicorn (ASGI) and Axon's own server,
each run with ``AXON_SECRET``: the client signs its own requests, ``axon sign`` mints URLs and
tokens, and anything unsigned, forged, expired or replayed elsewhere is refused as JSON.
"""

from __future__ import annotations

import argparse
import asyncio
import http.client
import json
import time
from pathlib import Path

import pytest
from live_server import LiveAxon

from axon.client import FetchError, afetch, cli_sign, fetch
from axon.signing import mint_token, sign_url

FILES = {"signed/a.bin": b"a" * 5000, "signed/b.bin": b"b" * 7000}


@pytest.fixture
def live(live_axon: LiveAxon) -> LiveAxon:
    for path, data in FILES.items():
        live_axon.put(path, data)
    return live_axon


def get(live: LiveAxon, target: str, **headers: str) -> tuple[int, dict[str, str], bytes]:
    host, port = live.url.removeprefix("http://").split(":")
    connection = http.client.HTTPConnection(host, int(port), timeout=10)
    try:
        connection.request("GET", target, headers=headers)
        response = connection.getresponse()
        return response.status, {k.lower(): v for k, v in response.getheaders()}, response.read()
    finally:
        connection.close()


def error_code(answer: tuple[int, dict[str, str], bytes]) -> tuple[int, str]:
    status, headers, body = answer
    assert headers["content-type"] == "application/json"
    return status, json.loads(body)["error"]["code"]


def test_the_client_signs_get_and_post(live: LiveAxon, tmp_path: Path) -> None:
    names = list(FILES)
    fetch(live.url, names, tmp_path / "get", secret=live.secret)
    fetch(live.url, names, tmp_path / "post", secret=live.secret, method="POST")
    asyncio.run(afetch(live.url, names, tmp_path / "async", secret=live.secret))
    for dest in ("get", "post", "async"):
        assert all((tmp_path / dest / p).read_bytes() == d for p, d in FILES.items())


def test_unsigned_and_wrongly_signed_fetches_are_refused(live: LiveAxon, tmp_path: Path) -> None:
    with pytest.raises(FetchError) as caught:
        fetch(live.url, list(FILES), tmp_path / "dest")
    assert (caught.value.status, caught.value.code) == (401, "unauthorized")
    with pytest.raises(FetchError) as caught:
        fetch(live.url, list(FILES), tmp_path / "dest", secret="not the secret")
    assert (caught.value.status, caught.value.code) == (403, "bad_signature")
    assert not (tmp_path / "dest").exists()


def test_signed_urls_on_the_wire(live: LiveAxon) -> None:
    soon = int(time.time()) + 60
    url = sign_url("/files/signed/a.bin", live.secret, soon)
    assert get(live, url)[::2] == (200, FILES["signed/a.bin"])
    assert error_code(get(live, url.replace("/a.bin", "/b.bin"))) == (403, "bad_signature")
    assert error_code(get(live, sign_url("/files/signed/a.bin", live.secret, int(time.time()) - 5))) == (
        403, "signature_expired",
    )
    assert error_code(get(live, url[:-2] + "xx")) == (403, "bad_signature")
    status, headers, _ = get(live, "/files/signed/a.bin")
    assert status == 401 and headers["www-authenticate"].startswith("Bearer")
    assert get(live, "/api/health")[0] == 200


def test_bearer_tokens_on_the_wire(live: LiveAxon, tmp_path: Path) -> None:
    token = mint_token(live.secret, int(time.time()) + 60)
    assert get(live, "/files/signed/b.bin", Authorization=f"Bearer {token}")[::2] == (200, FILES["signed/b.bin"])
    fetch(live.url, list(FILES), tmp_path / "dest", headers={"Authorization": f"Bearer {token}"})
    assert (tmp_path / "dest" / "signed/b.bin").read_bytes() == FILES["signed/b.bin"]
    expired = mint_token(live.secret, int(time.time()) - 5)
    assert error_code(get(live, "/files/signed/b.bin", Authorization=f"Bearer {expired}")) == (403, "token_expired")


def test_axon_sign_mints_a_working_batch_url(
    live: LiveAxon, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("AXON_SECRET", live.secret)
    parser = argparse.ArgumentParser(prog="axon")
    cli_sign.add_parser(parser.add_subparsers(dest="command", required=True))
    args = parser.parse_args(["sign", live.url, *FILES])
    assert args.func(args) == 0
    url = capsys.readouterr().out.strip()
    status, headers, body = get(live, url.removeprefix(live.url))
    assert status == 200 and headers["content-type"].startswith("multipart/mixed")
    assert all(data in body for data in FILES.values())


@pytest.mark.parametrize(("suffix", "media_type"), [(".zip", "application/zip"), (".tar", "application/x-tar")])
def test_axon_sign_mints_an_archive_batch_url_from_its_endpoint(
    live: LiveAxon, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], suffix: str, media_type: str,
) -> None:
    monkeypatch.setenv("AXON_SECRET", live.secret)
    parser = argparse.ArgumentParser(prog="axon")
    cli_sign.add_parser(parser.add_subparsers(dest="command", required=True))
    args = parser.parse_args(["sign", f"{live.url}/api/stream-files{suffix}", *FILES])
    assert args.func(args) == 0
    url = capsys.readouterr().out.strip()
    assert url.startswith(f"{live.url}/api/stream-files{suffix}?file1=")
    status, headers, body = get(live, url.removeprefix(live.url))
    assert status == 200 and headers["content-type"] == media_type
    assert all(data in body for data in FILES.values())
