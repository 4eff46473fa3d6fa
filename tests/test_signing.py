"""Signed requests: signed URLs and bearer tokens, checked in-process (axon.signing and App).

Over real sockets, under gunicorn, uvicorn and the native server: tests/client/test_client_signing.py.
"""

from __future__ import annotations

import argparse
import hmac
import time
from urllib.parse import parse_qsl, unquote, urlsplit

import pytest

from axon import signing
from axon.app import App, Request
from axon.client import cli_sign
from axon.errors import Forbidden, Unauthorized
from axon.signing import Verifier, mint_token, sign_url, verify

SECRET = "correct horse battery staple"
NOW = 1_700_000_000
LATER = NOW + 60


def request_for(target: str, method: str = "GET", body: bytes = b"", **headers: str) -> Request:
    url = urlsplit(target)
    return Request(method, unquote(url.path), url.query, {k.lower(): v for k, v in headers.items()}, body)


def code_of(target: str, method: str = "GET", body: bytes = b"", now: float = NOW, **headers: str) -> str:
    try:
        verify(request_for(target, method, body, **headers), SECRET, now)
    except (Unauthorized, Forbidden) as exc:
        return f"{exc.status} {exc.code}"
    return "ok"


# -- signed URLs


def test_a_signed_url_verifies_and_its_reserved_parameters_are_dropped():
    target = sign_url("/api/stream-files?file1=a.bin&file2=d%C3%A9j%C3%A0/b+c.bin", SECRET, LATER)
    query = dict(parse_qsl(urlsplit(target).query))
    assert query["expires"] == str(LATER) and len(query["signature"]) == 43  # 256 bits, base64url
    remaining = verify(request_for(target), SECRET, NOW)
    assert remaining == [("file1", "a.bin"), ("file2", "déjà/b c.bin")]
    assert code_of(target, "HEAD") == "ok"  # HEAD is GET without a body


def test_a_full_url_keeps_its_origin_and_a_pathless_one_gets_a_slash():
    signed = sign_url("http://host:8000/files/a.bin", SECRET, LATER)
    assert signed.startswith("http://host:8000/files/a.bin?expires=")
    assert code_of(signed[len("http://host:8000"):]) == "ok"
    assert sign_url("http://host:8000", SECRET, LATER).startswith("http://host:8000/?expires=")


def test_the_signature_binds_the_body_of_a_post():
    body = b'{"files": ["a.bin"]}'
    target = sign_url("/api/stream-files", SECRET, LATER, method="POST", body=body)
    assert code_of(target, "POST", body) == "ok"
    assert code_of(target, "POST", b'{"files": ["secret.bin"]}') == "403 bad_signature"
    # A GET link cannot be turned into a POST naming other files.
    get_link = sign_url("/api/stream-files?file1=a.bin", SECRET, LATER)
    assert code_of(get_link, "POST", body) == "403 bad_signature"


@pytest.mark.parametrize(
    "tamper",
    [
        lambda t: t.replace("/files/a.bin", "/files/b.bin"),  # replayed on another path
        lambda t: t.replace("/files/a.bin?", "/files/a.bin?file9=x&"),  # another query
        lambda t: t.replace(f"expires={LATER}", f"expires={LATER + 10**6}"),  # a longer life
        lambda t: t[:-1] + ("A" if t[-1] != "A" else "B"),  # one character of the MAC
        lambda t: t + "&signature=AAAA",  # a second signature
        lambda t: t.rsplit("=", 1)[0] + "=not*base64",
        lambda t: t.rsplit("=", 1)[0] + "=",
    ],
    ids=["other-path", "other-query", "later-expiry", "forged", "two-signatures", "garbage", "empty"],
)
def test_a_tampered_url_is_403(tamper):
    target = sign_url("/files/a.bin", SECRET, LATER)
    assert code_of(target) == "ok"
    assert code_of(tamper(target)) == "403 bad_signature"


def test_an_expired_url_is_403_and_another_secret_is_403():
    target = sign_url("/files/a.bin", SECRET, NOW - 1)
    assert code_of(target) == "403 signature_expired"
    assert code_of(sign_url("/files/a.bin", SECRET, NOW)) == "ok"  # valid through its last second
    assert code_of(sign_url("/files/a.bin", "another secret", LATER)) == "403 bad_signature"


def test_no_credentials_is_401_with_a_challenge():
    with pytest.raises(Unauthorized) as caught:
        verify(request_for("/files/a.bin"), SECRET, NOW)
    assert caught.value.status == 401 and ("WWW-Authenticate", 'Bearer realm="axon"') in caught.value.headers
    assert code_of("/files/a.bin", authorization="Basic dXNlcjpwYXNz") == "401 unauthorized"
    assert code_of("/files/a.bin?expires=9999999999") == "403 bad_signature"  # half a signature


def test_sign_url_refuses_reserved_names():
    with pytest.raises(ValueError):
        sign_url("/files/a.bin?signature=x", SECRET, LATER)
    with pytest.raises(ValueError):
        sign_url("/files/a.bin", "", LATER)


def test_comparisons_are_constant_time(monkeypatch):
    calls = []
    real = hmac.compare_digest
    monkeypatch.setattr(signing.hmac, "compare_digest", lambda a, b: calls.append(1) or real(a, b))
    code_of(sign_url("/files/a.bin", SECRET, LATER))
    code_of("/files/a.bin?expires=1&signature=AAAA")
    code_of("/files/a.bin", authorization="Bearer " + mint_token(SECRET, LATER))
    code_of("/files/a.bin", authorization="Bearer junk")
    assert len(calls) == 4


# -- bearer tokens


def test_bearer_tokens():
    token = mint_token(SECRET, LATER)
    assert token.startswith("axon1.")
    assert code_of("/files/anything", authorization=f"Bearer {token}") == "ok"
    assert code_of("/files/anything", authorization=f"bearer  {token} ") == "ok"
    assert code_of("/files/x", authorization=f"Bearer {mint_token(SECRET, NOW - 1)}") == "403 token_expired"
    for bad in [mint_token("other", LATER), token.replace(str(LATER), str(LATER + 1)), "axon2" + token[5:], "x", ""]:
        assert code_of("/files/x", authorization=f"Bearer {bad}") == "403 bad_token", bad


def test_a_url_mac_is_not_a_token_mac():
    # Separate keys per use: a signature lifted from a URL does not make a token.
    target = sign_url("/", SECRET, LATER)
    mac = dict(parse_qsl(urlsplit(target).query))["signature"]
    assert code_of("/x", authorization=f"Bearer axon1.{LATER}.{mac}") == "403 bad_token"


# -- in the App: before routing, so nothing is opened


@pytest.fixture
def guarded(root, monkeypatch):
    app = App(root, secret=SECRET)
    opened = []
    real_open = app.store.open
    monkeypatch.setattr(app.store, "open", lambda path: opened.append(path) or real_open(path))
    return app, opened


def status_of(app: App, target: str, method: str = "GET", body: bytes = b"", **headers: str):
    response = app.handle(request_for(target, method, body, **headers))
    response.close()
    return response.status, dict(response.headers)


@pytest.mark.parametrize(
    "target",
    [
        "/files/a.txt",
        "/api/stream-files?file1=a.txt",
        "/no/such/route",
        "/files/a.txt?expires=9999999999&signature=" + "A" * 43,
        "/files/a.txt?expires=1&signature=x",
    ],
)
def test_refused_requests_open_no_file(guarded, open_fds, target):
    app, opened = guarded
    before = open_fds()
    status, headers = status_of(app, target)
    assert status in (401, 403) and headers["Content-Type"] == "application/json"
    assert opened == [] and open_fds() <= before  # (the collector may close an unrelated one)


def test_signed_and_token_requests_are_served(guarded):
    app, opened = guarded
    assert status_of(app, sign_url("/files/a.txt", SECRET, time.time() + 60))[0] == 200
    batch = sign_url("/api/stream-files?file1=a.txt&file2=sub/c.json", SECRET, time.time() + 60)
    response = app.handle(request_for(batch))
    response.close()
    assert response.status == 200 and opened == ["a.txt", "a.txt", "sub/c.json"]  # no "expires" file
    token = mint_token(SECRET, int(time.time()) + 60)
    assert status_of(app, "/files/sub/c.json", authorization=f"Bearer {token}")[0] == 200
    # A batch URL that still carries reserved names under a token: they never become file names.
    assert status_of(app, "/api/stream-files?file1=a.txt&expires=1", authorization=f"Bearer {token}")[0] == 200


def test_health_stays_open(guarded):
    assert status_of(guarded[0], "/api/health")[0] == 200


def test_the_secret_comes_from_the_environment_unless_given(root, monkeypatch):
    monkeypatch.setenv("AXON_SECRET", SECRET)
    assert status_of(App(root), "/files/a.txt")[0] == 401
    assert status_of(App(root, secret=""), "/files/a.txt")[0] == 200  # "" turns signing off
    monkeypatch.delenv("AXON_SECRET")
    assert status_of(App(root), "/files/a.txt")[0] == 200


def test_verifier_matches_verify():
    target = sign_url("/files/a.bin", SECRET, LATER)
    assert Verifier(SECRET).verify(request_for(target), NOW) == verify(request_for(target), SECRET, NOW) == []


# -- axon sign


def run_sign(*argv: str) -> int:
    parser = argparse.ArgumentParser(prog="axon")
    cli_sign.add_parser(parser.add_subparsers(dest="command", required=True))
    args = parser.parse_args(["sign", *argv])
    return args.func(args)


def test_axon_sign(monkeypatch, capsys):
    monkeypatch.setenv("AXON_SECRET", SECRET)
    assert run_sign("files/a.bin", "--expires-in", "60") == 0
    url = capsys.readouterr().out.strip()
    assert url.startswith("/files/a.bin?expires=") and code_of(url, now=time.time()) == "ok"
    future = int(time.time()) + 600  # --expires-at refuses a time already past
    assert run_sign("http://h:1/base", "a b.bin", "dir/c.bin", "--expires-at", str(future)) == 0
    url = capsys.readouterr().out.strip()
    assert url.startswith("http://h:1/base/api/stream-files?file1=a+b.bin&file2=dir/c.bin&expires=")
    assert verify(request_for(url[len("http://h:1"):]), SECRET, future - 60) == [("file1", "a b.bin"), ("file2", "dir/c.bin")]
    assert run_sign("--token", "--expires-in", "60") == 0
    token = capsys.readouterr().out.strip()
    assert code_of("/x", now=time.time(), authorization=f"Bearer {token}") == "ok"
    monkeypatch.delenv("AXON_SECRET")
    assert run_sign("/files/a.bin") == 2 and "AXON_SECRET" in capsys.readouterr().err
    assert run_sign("/files/a.bin", "--secret", SECRET) == 0
