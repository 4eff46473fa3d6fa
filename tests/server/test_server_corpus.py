"""A corpus of raw requests, valid and invalid, replayed whole, byte by byte and in random splits
(as gunicorn's ``tests/requests`` and h11's ``test_io`` do): the answer must not depend on how
the bytes were cut. The same corpus goes over a real socket too."""

from __future__ import annotations

import json
import random
import socket
import time
from dataclasses import dataclass

import pytest
from conftest import FILES, HEAD_READERS, Client, Closed, Resp, head_reader_set

#: Both readers in the fast loop too: this corpus is what shows that they answer alike.
pytestmark = pytest.mark.both_head_readers

ANY_4XX = 0  # in ``statuses``: any 4xx


@dataclass(frozen=True)
class Case:
    name: str
    raw: bytes
    statuses: tuple[int, ...]
    closed: bool  # the server closes (or half-closes) the connection after answering
    methods: tuple[str, ...] = ()


def post(body: bytes, *extra: str) -> bytes:
    head = "POST /api/stream-files HTTP/1.1\r\nHost: t\r\nContent-Type: application/json\r\n"
    return (head + "".join(e + "\r\n" for e in extra)).encode() + b"\r\n" + body


FILES_JSON = json.dumps({"files": ["a.txt", "sub/c.json"]}).encode()
CHUNKED = b"".join(b"%x;ext=1\r\n%s\r\n" % (len(p), p) for p in (FILES_JSON[:5], FILES_JSON[5:])) + b"0\r\nX-Trailer: 1\r\n\r\n"

CORPUS = [
    # ---- valid
    Case("get", b"GET /api/health HTTP/1.1\r\nHost: t\r\n\r\n", (200,), False),
    Case("http10", b"GET /api/health HTTP/1.0\r\n\r\n", (200,), True),
    Case("http10-keepalive", b"GET /api/health HTTP/1.0\r\nConnection: keep-alive\r\n\r\n", (200,), False),
    Case("connection-close", b"GET /api/health HTTP/1.1\r\nConnection: close\r\n\r\n", (200,), True),
    Case("pipelined", b"GET /api/health HTTP/1.1\r\n\r\nGET /nope HTTP/1.1\r\n\r\nHEAD /files/a.txt HTTP/1.1\r\n\r\n"
         b"GET /files/a.txt HTTP/1.1\r\nRange: bytes=0-4\r\n\r\n", (200, 404, 200, 206), False, ("GET", "GET", "HEAD", "GET")),
    Case("post-length", post(FILES_JSON, f"Content-Length: {len(FILES_JSON)}"), (200,), False),
    Case("post-chunked", post(CHUNKED, "Transfer-Encoding: chunked"), (200,), False),
    Case("post-chunked-upper", post(CHUNKED, "Transfer-Encoding: Chunked"), (200,), False),
    Case("expect-continue", post(FILES_JSON, f"Content-Length: {len(FILES_JSON)}", "Expect: 100-continue"), (200,), False),
    Case("absolute-form", b"GET http://t/api/health?x=1 HTTP/1.1\r\n\r\n", (200,), False),
    Case("leading-crlf", b"\r\n\r\nGET /api/health HTTP/1.1\r\n\r\n", (200,), False),
    Case("percent-path", b"GET /files/sub%2Fc.json HTTP/1.1\r\n\r\n", (200,), False),
    Case("decoded-once", b"GET /files/%252e%252e/a.txt HTTP/1.1\r\n\r\n", (404,), False),
    Case("query-utf8", b"GET /api/stream-files?f=%61.txt&g=sub/c.json HTTP/1.1\r\n\r\n", (200,), False),
    Case("get-with-body", b"GET /api/health HTTP/1.1\r\nContent-Length: 3\r\n\r\nabc", (200,), False),
    Case("fragment", b"GET /api/health#frag HTTP/1.1\r\n\r\n", (200,), False),
    Case("tab-in-value", b"GET /api/health HTTP/1.1\r\nX-A: a\tb\r\n\r\n", (200,), False),
    Case("upgrade", b"GET /api/health HTTP/1.1\r\nConnection: Upgrade\r\nUpgrade: websocket\r\n\r\n"
         b"GET /api/health HTTP/1.1\r\n\r\n", (200,), True),
    Case("bad-utf8-path-kept-open", b"GET /files/%ff HTTP/1.1\r\n\r\nGET /api/health HTTP/1.1\r\n\r\n", (400, 200), False),
    Case("method-not-allowed", b"DELETE /api/health HTTP/1.1\r\n\r\n", (405,), False),
    # ---- invalid framing: 4xx, then closed
    Case("cl-and-te", post(b"0\r\n\r\n", "Content-Length: 5", "Transfer-Encoding: chunked"), (400,), True),
    Case("te-and-cl", post(b"0\r\n\r\n", "Transfer-Encoding: chunked", "Content-Length: 5"), (400,), True),
    Case("duplicate-cl", post(b"abcd", "Content-Length: 3", "Content-Length: 4"), (400,), True),
    Case("same-duplicate-cl", post(b"abc", "Content-Length: 3", "Content-Length: 3"), (400,), True),
    Case("negative-cl", post(b"abc", "Content-Length: -3"), (400,), True),
    Case("cl-with-space", post(b"abc", "Content-Length: 3 3"), (400,), True),
    Case("bad-chunk-size", post(b"zz\r\nabc\r\n0\r\n\r\n", "Transfer-Encoding: chunked"), (400,), True),
    Case("chunk-size-overflow", post(b"fffffffffffffffffff\r\nabc\r\n0\r\n\r\n", "Transfer-Encoding: chunked"), (400,), True),
    Case("chunk-missing-crlf", post(b"3\r\nabcX\r\n0\r\n\r\n", "Transfer-Encoding: chunked"), (400,), True),
    Case("te-gzip", post(b"abc", "Transfer-Encoding: gzip"), (501,), True),
    Case("te-gzip-chunked", post(b"3\r\nabc\r\n0\r\n\r\n", "Transfer-Encoding: gzip, chunked"), (501,), True),
    Case("te-twice", post(b"3\r\nabc\r\n0\r\n\r\n", "Transfer-Encoding: chunked", "Transfer-Encoding: identity"), (ANY_4XX,), True),
    Case("te-http10", b"POST /api/stream-files HTTP/1.0\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nabc\r\n0\r\n\r\n", (400,), True),
    Case("bare-lf", b"GET /api/health HTTP/1.1\nHost: t\n\n", (400,), True),
    Case("obs-fold", b"GET /api/health HTTP/1.1\r\nX-A: a\r\n b\r\n\r\n", (400,), True),
    Case("space-before-colon", b"GET /api/health HTTP/1.1\r\nHost : t\r\n\r\n", (400,), True),
    Case("no-colon", b"GET /api/health HTTP/1.1\r\nHost\r\n\r\n", (400,), True),
    Case("nul-in-header", b"GET /api/health HTTP/1.1\r\nX-A: a\x00b\r\n\r\n", (400,), True),
    Case("ctl-in-url", b"GET /api/\x01health HTTP/1.1\r\n\r\n", (400,), True),
    Case("raw-utf8-in-url", "GET /files/é HTTP/1.1\r\n\r\n".encode(), (400,), True),
    Case("unknown-method", b"BREW /api/health HTTP/1.1\r\n\r\n", (400,), True),
    Case("lowercase-method", b"get /api/health HTTP/1.1\r\n\r\n", (400,), True),
    Case("binary-garbage", b"\x16\x03\x01\x02\x00\x01\x00\x01\xfc\x03\x03" + bytes(range(40)) + b"\r\n\r\n", (400,), True),
    Case("http2-preface", b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n", (ANY_4XX,), True),
    Case("http20", b"GET /api/health HTTP/2.0\r\n\r\n", (505,), True),
    Case("http09", b"GET /api/health\r\n\r\n", (505,), True),
    Case("connect", b"CONNECT example.com:443 HTTP/1.1\r\n\r\n", (ANY_4XX,), True),
    Case("valid-then-invalid", b"GET /api/health HTTP/1.1\r\n\r\nGET /api/health HTTP/1.1\r\nX-A: a\r\n b\r\n\r\n", (200, 400), True),
    # ---- limits
    Case("url-too-long", b"GET /files/" + b"a" * 17000 + b" HTTP/1.1\r\n\r\n", (414,), True),
    Case("header-too-large", b"GET /api/health HTTP/1.1\r\nX-Big: " + b"b" * 17000 + b"\r\n\r\n", (431,), True),
    Case("headers-too-large-total", b"GET /api/health HTTP/1.1\r\n" + b"".join(b"X-%02d: %s\r\n" % (i, b"v" * 400) for i in range(45)) + b"\r\n", (431,), True),
    Case("too-many-headers", b"GET /api/health HTTP/1.1\r\n" + b"".join(b"X-%d: y\r\n" % i for i in range(101)) + b"\r\n", (431,), True),
    Case("body-too-large", post(b"x" * 100, "Content-Length: 1048577"), (413,), True),
    Case("chunked-body-too-large", post(b"".join(b"10000\r\n" + b"x" * 0x10000 + b"\r\n" for _ in range(17)) + b"0\r\n\r\n",
                                        "Transfer-Encoding: chunked"), (413,), True),
]


def check(case: Case, responses: list[Resp], closed: bool) -> None:
    got = [r.status for r in responses]
    assert len(got) == len(case.statuses), f"{case.name}: statuses {got}, expected {case.statuses}"
    for status, expected in zip(got, case.statuses):
        if expected == ANY_4XX:
            assert 400 <= status < 500, f"{case.name}: {got}"
        else:
            assert status == expected, f"{case.name}: statuses {got}, expected {case.statuses}"
    for resp in responses:
        if resp.status >= 400:
            assert json.loads(resp.body)["error"]["status"] == resp.status
        assert resp.header("date") and resp.header("server") == "axon"
    if case.name == "expect-continue":
        assert responses[0].interim == [100]
    if case.name in ("get", "pipelined"):
        assert responses[0].body == b'{"status":"available"}'
    if case.name == "pipelined":
        assert responses[3].body == FILES["a.txt"][:5]
    assert closed == case.closed, f"{case.name}: closed={closed}"
    if closed:
        assert responses[-1].header("connection") == "close"


def splits(raw: bytes, how: str, rnd: random.Random) -> list[bytes]:
    if how == "whole":
        return [raw]
    if how == "bytes":
        return [raw[i : i + 1] for i in range(len(raw))]
    cuts = sorted(rnd.sample(range(1, len(raw)), min(len(raw) - 1, rnd.randint(1, 12)))) if len(raw) > 1 else []
    return [raw[a:b] for a, b in zip([0, *cuts], [*cuts, len(raw)])]


@pytest.mark.parametrize("how", ["whole", "bytes", "random"])
@pytest.mark.parametrize("case", CORPUS, ids=[c.name for c in CORPUS])
def test_corpus_fake_transport(harness, case: Case, how: str) -> None:
    rnd = random.Random(f"{case.name}-{how}")
    for _ in range(3 if how == "random" else 1):
        pieces = splits(case.raw, how, rnd)
        if how == "bytes" and len(pieces) > 5000:  # a large body: the head byte by byte, then 4 KiB reads
            rest = case.raw[5000:]
            pieces = pieces[:5000] + [rest[i : i + 4096] for i in range(0, len(rest), 4096)]
        h = harness()
        h.feed(*pieces)
        check(case, h.responses(list(case.methods) or None), h.closed)


def _read_all(client: Client, case: Case) -> tuple[list[Resp], bool]:
    responses = []
    methods = list(case.methods) or ["GET"] * len(case.statuses)
    for method in methods[: len(case.statuses)]:
        try:
            responses.append(client.response(method))
        except Closed:
            return responses, True
    if case.closed:
        return responses, client.is_closed()
    # Kept open: proven by the next request's answer, not by waiting for an EOF that never comes.
    try:
        probe = client.get("/api/health")
    except Closed:
        return responses, True
    assert probe.status == 200, f"{case.name}: the next request got {probe.status}"
    return responses, False


@pytest.mark.parametrize("how", ["whole", "random"])
@pytest.mark.parametrize("case", CORPUS, ids=[c.name for c in CORPUS])
def test_corpus_socket(socket_server, case: Case, how: str) -> None:
    rnd = random.Random(f"{case.name}-{how}-socket")
    with Client(socket_server.port, timeout=5) as client:
        for piece in splits(case.raw, how, rnd):
            client.send(piece)
            if how == "random":
                time.sleep(0.001)
        responses, closed = _read_all(client, case)
    check(case, responses, closed)


@pytest.fixture(scope="module", params=HEAD_READERS)
def socket_server(root, request):
    from axon.app import App
    from axon.server.config import ServerConfig
    from axon.server.worker import ThreadServer

    with head_reader_set(request.param):
        server = ThreadServer(App(root), ServerConfig(port=0)).start()
    yield server
    server.stop()


def test_server_survives_the_corpus(serve) -> None:
    server = serve()
    for case in CORPUS:
        with socket.create_connection(("127.0.0.1", server.port)) as s:
            s.sendall(case.raw)
    with Client(server.port) as c:
        assert c.get("/api/health").status == 200
