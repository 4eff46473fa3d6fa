"""The compiled reader of simple heads (axon/server/_simplehead.c) against llhttp, the parser it
stands in front of: it reads only what llhttp reads, reads it the same way, ends a head where
llhttp ends it, and a connection answers the same bytes with it and without it."""

from __future__ import annotations

import dataclasses
import os
import re
import shutil
import sysconfig

import httptools
import pytest
from conftest import Harness, head_reader_set
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from axon.app import App
from axon.errors import HTTPError
from axon.limits import Limits
from axon.runtime import FIELD_BYTES, check_head, fold_header
from axon.server import simplehead

parse = simplehead.parser()
needs_reader = pytest.mark.skipif(parse is None, reason="the compiled reader of simple heads is not built here")


def test_the_reader_is_built_where_it_can_be(monkeypatch) -> None:
    """Where a C compiler and Python's headers are (as scripts/setup.sh --all makes sure), the
    install builds the reader: a missing one would leave every test of it skipped."""
    if not shutil.which("gcc") or not os.path.exists(os.path.join(sysconfig.get_paths()["include"], "Python.h")):
        pytest.skip("no C compiler or Python headers: the reader is optional")
    monkeypatch.delenv("AXON_PURE_PYTHON", raising=False)
    assert simplehead.parser() is not None, "pip install -e . did not build axon/server/_simplehead.c"


def test_pure_python_turns_it_off(monkeypatch) -> None:
    monkeypatch.setenv("AXON_PURE_PYTHON", "1")
    assert simplehead.parser() is None
    assert "AXON_PURE_PYTHON=1" in simplehead.describe()
    monkeypatch.setenv("AXON_PURE_PYTHON", "maybe")
    with pytest.raises(ValueError, match="AXON_PURE_PYTHON"):
        simplehead.parser()


# --------------------------------------------------------------------------- llhttp's reading


class _Recorder:
    """What llhttp reports for the messages in some bytes (httptools' callbacks)."""

    def __init__(self) -> None:
        self.messages: list[dict] = []
        self.url = b""
        self.headers: dict[str, str] = {}
        self.fields = [0, 0]  # count, bytes of names and values
        self.body = b""

    def on_url(self, url: bytes) -> None:
        self.url += url

    def on_header(self, name: bytes, value: bytes) -> None:
        fold_header(self.headers, name, value)  # the one folding, as every head path does
        self.fields[0] += 1
        self.fields[1] += len(name) + len(value)

    def on_body(self, body: bytes) -> None:
        self.body += body

    def on_message_complete(self) -> None:
        self.messages.append({"url": self.url, "headers": self.headers, "body": self.body, "fields": tuple(self.fields)})
        self.url, self.headers, self.body, self.fields = b"", {}, b"", [0, 0]


def llhttp_reads(data: bytes) -> tuple[list[dict], str | None]:
    """The complete messages llhttp reads in ``data`` (method, version, keep-alive included), and
    its error if it refused them."""
    recorder = _Recorder()
    parser = httptools.HttpRequestParser(recorder)
    done = 0
    try:
        for i in range(len(data)):  # a byte at a time: what each message's end leaves is known
            parser.feed_data(data[i : i + 1])
            while done < len(recorder.messages):
                recorder.messages[done].update(
                    method=parser.get_method(), version=parser.get_http_version(),
                    keep_alive=parser.should_keep_alive(), end=i + 1,
                )
                done += 1
    except httptools.HttpParserUpgrade:
        return recorder.messages, "upgrade"
    except httptools.HttpParserError as exc:
        return recorder.messages, str(exc) or type(exc).__name__
    return recorder.messages, None


def assert_read_alike(data: bytes) -> tuple | None:
    """If the reader reads ``data``'s first head, llhttp reads the same request there."""
    found = parse(data, 0)
    if found is None:
        return None
    method, url, headers, end, count, field_bytes = found
    messages, _ = llhttp_reads(data)
    assert messages, f"the reader read a head llhttp refuses: {data!r}"
    first = messages[0]
    assert (first["method"], first["url"], first["headers"], first["end"]) == (method, url, headers, end), data
    assert first["fields"] == (count, field_bytes), data
    assert (first["version"], first["keep_alive"], first["body"]) == ("1.1", True, b""), data
    return found


# ------------------------------------------------------------------------------------ examples

CURL = b"GET /files/a.bin HTTP/1.1\r\nHost: 127.0.0.1:8000\r\nUser-Agent: curl/8.5.0\r\nAccept: */*\r\n\r\n"
WRK = b"GET /api/health HTTP/1.1\r\nHost: 127.0.0.1:8080\r\nX-Trace: 17\r\n\r\n"
BROWSER = (
    b"GET /browse/?sort=name HTTP/1.1\r\nHost: example.org\r\nConnection: keep-alive\r\n"
    b"Accept-Language: en-GB,en;q=0.9\r\nCookie: a=1; b=2\r\nUser-Agent: Mozilla/5.0 (X11; Linux) \xc3\xa9\r\n\r\n"
)
NGINX = (
    b"GET /api/stream-files?file1=a.bin&file2=b.bin HTTP/1.1\r\nHost: axon\r\nX-Real-IP: 10.0.0.1\r\n"
    b"X-Forwarded-For: 10.0.0.1\r\nX-Forwarded-Proto: http\r\n\r\n"
)


@needs_reader
@pytest.mark.parametrize("head", [CURL, WRK, BROWSER, NGINX, b"HEAD / HTTP/1.1\r\n\r\n"], ids=["curl", "wrk", "browser", "nginx", "bare-head"])
def test_what_clients_send_is_read(head) -> None:
    method, url, headers, end, _, _ = assert_read_alike(head + b"GET /next")
    assert end == len(head)
    assert method == head.split(b" ")[0]
    if head is BROWSER:
        assert headers["cookie"] == "a=1; b=2" and headers["user-agent"].endswith("\xc3\xa9")


@needs_reader
@pytest.mark.parametrize("head", [
    b"POST / HTTP/1.1\r\nContent-Length: 0\r\n\r\n",  # not GET or HEAD
    b"GET / HTTP/1.0\r\n\r\n",  # not 1.1: closes
    b"GET http://h/ HTTP/1.1\r\n\r\n",  # absolute form
    b"GET * HTTP/1.1\r\n\r\n",
    b"GET / HTTP/1.1\r\nContent-Length: 5\r\n\r\nhello",
    b"GET / HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n",
    b"GET / HTTP/1.1\r\nConnection: close\r\n\r\n",
    b"GET / HTTP/1.1\r\nConnection: Upgrade\r\nUpgrade: websocket\r\n\r\n",
    b"GET / HTTP/1.1\r\nUpgrade: h2c\r\n\r\n",
    b"GET / HTTP/1.1\r\nExpect: 100-continue\r\n\r\n",
    b"GET / HTTP/1.1\r\nProxy-Connection: keep-alive\r\n\r\n",
    b"GET / HTTP/1.1\nHost: a\n\n",  # bare LF
    b"GET / HTTP/1.1\r\nHost : a\r\n\r\n",  # space before the colon
    b"GET / HTTP/1.1\r\n Folded: a\r\n\r\n",  # obs-fold
    b"GET / HTTP/1.1\r\nX: a\x00b\r\n\r\n",
    b"GET /\x7f HTTP/1.1\r\n\r\n",
    b"GET / HTTP/1.1\r\nHost: a\r\n",  # not complete yet
    b"\r\nGET / HTTP/1.1\r\n\r\n",  # llhttp skips the empty line; so does the reader, by not reading it
    b"GE",
    b"",
    b"GET / HTTP/1.1\r\nCookie: a=1\r\ncookie: b=2\r\n\r\n",  # a name twice: folded on llhttp's path
], ids=lambda head: repr(head[:40]))
def test_anything_else_is_left_to_llhttp(head) -> None:
    assert parse(head, 0) is None


@needs_reader
def test_the_reader_reports_what_the_limits_are_checked_on() -> None:
    """The reader knows no limit: it reports the fields' count and bytes, and the connection
    hands them to the one check (axon.runtime.check_head) that llhttp's path calls per field."""
    url = b"/" + b"a" * 99
    head = b"GET " + url + b" HTTP/1.1\r\nAb: cd\r\nEf: gh\r\n\r\n"
    _, _, _, _, count, field_bytes = parse(head, 0)
    assert (count, field_bytes) == (2, 8)
    exact = Limits(max_url_bytes=100, max_headers=2, max_header_bytes=len(url) + 8 + 2 * FIELD_BYTES)
    check_head(len(url), count, field_bytes, exact)
    for over, status in (({"max_url_bytes": 99}, 414), ({"max_headers": 1}, 431), ({"max_header_bytes": exact.max_header_bytes - 1}, 431)):
        with pytest.raises(HTTPError) as refused:
            check_head(len(url), count, field_bytes, dataclasses.replace(exact, **over))
        assert refused.value.status == status


@needs_reader
def test_it_reads_from_where_it_is_told() -> None:
    two = WRK + CURL
    first = parse(two, 0)
    second = parse(two, first[3])
    assert second[1] == b"/files/a.bin" and second[3] == len(two)
    assert parse(two, len(two)) is None
    assert parse(two, len(two) + 1) is None and parse(two, -1) is None
    with pytest.raises(TypeError):
        parse("GET / HTTP/1.1\r\n\r\n", 0)


# ------------------------------------------------------------------------- generated, compared

_TCHARS = "!#$%&'*+-.^_`|~0123456789abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ"
_NAMES = st.one_of(
    st.sampled_from([
        b"Host", b"host", b"User-Agent", b"X-Trace", b"Accept", b"Cookie", b"X-Forwarded-For", b"Range",
        b"If-None-Match", b"Connection", b"Content-Length", b"Transfer-Encoding", b"Upgrade", b"Expect",
        b"Proxy-Connection", b"CONNECTION", b"Content-length",
    ]),
    st.text(alphabet=_TCHARS, min_size=1, max_size=8).map(str.encode),
)
_BAD_NAMES = st.sampled_from([b"Bad Name", b"Bad:Name", b"", b"\xe9", b"X\x00", b" X", b"X\t"])
_VALUES = st.one_of(
    st.sampled_from([b"a", b"keep-alive", b"Keep-Alive", b"close", b"5", b"chunked", b"websocket", b"100-continue", b""]),
    st.text(alphabet=" \t!~azAZ09\x80\xe9\xff,;=\"", max_size=12).map(lambda t: t.encode("latin-1")),
)
_BAD_VALUES = st.one_of(st.binary(max_size=12), st.sampled_from([b"a\x7fb", b"a\rb", b"a\nb", b"\x00"]))


@st.composite
def heads(draw) -> bytes:
    """Heads of the kind the reader reads (half of them), and the same with one part of it wrong."""
    wrong = draw(st.sampled_from([None] * 6 + ["method", "target", "version", "name", "separator", "value", "eol", "end"]))
    method = draw(st.sampled_from([b"POST", b"get", b"GE", b"PRI", b"OPTIONS"] if wrong == "method" else [b"GET", b"HEAD"]))
    target = draw(
        st.sampled_from([b"*", b"http://h/x", b"/a b", b"/\x7f", b"/\xe9", b"", b"a"]) if wrong == "target"
        else st.one_of(st.sampled_from([b"/", b"/api/health", b"/files/a%20b.bin?x=1#f", b"/?a=1&b=2"]),
                       st.text(alphabet="".join(map(chr, range(0x21, 0x7f))), max_size=12).map(lambda t: b"/" + t.encode()))
    )
    version = draw(st.sampled_from([b"HTTP/1.0", b"HTTP/2.0", b"http/1.1", b"HTTP/1.1 ", b"HTTP/1.10"] if wrong == "version" else [b"HTTP/1.1"]))
    lines = [method + b" " + target + b" " + version]
    count = draw(st.integers(1 if wrong in ("name", "separator", "value") else 0, 5))
    bad_at = draw(st.integers(0, count - 1)) if count else -1
    for i in range(count):
        bad = i == bad_at
        name = draw(_BAD_NAMES if bad and wrong == "name" else _NAMES)
        separator = draw(st.sampled_from([b" : ", b"", b";", b" :"] if bad and wrong == "separator" else [b": ", b":", b":\t", b":  "]))
        value = draw(_BAD_VALUES if bad and wrong == "value" else _VALUES)
        lines.append(name + separator + value)
    eol = draw(st.sampled_from([b"\n", b"\r", b"\n\r"])) if wrong == "eol" else b"\r\n"
    end = draw(st.sampled_from([b"", b"\r", b"\n", b"\r\r"])) if wrong == "end" else b"\r\n"
    head = eol.join(lines) + eol + end
    return head + draw(st.sampled_from([b"", b"GET / HTTP/1.1\r\n\r\n", b"hello", b"\r\n"]))


@needs_reader
@settings(max_examples=1500, deadline=None, database=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=heads())
def test_a_head_it_reads_is_read_by_llhttp_alike(data) -> None:
    assert_read_alike(data)


@needs_reader
@settings(max_examples=500, deadline=None, database=None)
@given(data=st.binary(max_size=200), start=st.integers(-5, 210))
def test_any_bytes_are_safe(data, start) -> None:
    if (found := parse(data, start)) is not None:
        assert 0 <= start < found[3] <= len(data)
        assert_read_alike(data[start:])


# --------------------------------------------------------------- one connection, both readers

STREAMS = [
    WRK * 3,
    CURL + BROWSER + NGINX,
    WRK + b"POST /api/health HTTP/1.1\r\nContent-Length: 3\r\n\r\nabc" + WRK,
    WRK + b"GET /api/health HTTP/1.0\r\n\r\n" + WRK,  # 1.0 without keep-alive closes: nothing after it
    WRK + b"GET / HTTP/1.1\r\nConnection: close\r\n\r\n" + WRK,
    WRK + b"GET /api/health HTTP/1.1\r\nHost: a\r\nBad Name: x\r\n\r\n" + WRK,  # refused: 400, then closed
    WRK + b"GET /api/health HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nabc\r\n0\r\n\r\n" + WRK,
    b"GET /files/missing.bin HTTP/1.1\r\n\r\n" + b"HEAD /api/health HTTP/1.1\r\n\r\n" + CURL,
    WRK + b"GET /" + b"a" * 17000 + b" HTTP/1.1\r\n\r\n" + WRK,  # 414
    WRK + b"GET / HTTP/1.1\r\n" + b"X: y\r\n" * 101 + b"\r\n" + WRK,  # 431: too many
    WRK + b"GET / HTTP/1.1\r\n" + b"X: " + b"y" * 17000 + b"\r\n\r\n" + WRK,  # 431: too long
    WRK + b"GET / HTTP/1.1\r\nCookie: a=1\r\nCookie: b=2\r\n\r\n" + WRK,  # folded
]


def _answers(kind: str, root, pieces: list[bytes]) -> bytes:
    with head_reader_set(kind):
        h = Harness(App(root))
    assert (h.proto._simple_head is None) == (kind == "pure")
    try:
        h.feed(*pieces)
        h.proto.eof_received()
        h.pump()
        return re.sub(rb"\r\nDate: [^\r]*", b"", bytes(h.transport.out))
    finally:
        h.finish()


def _cuts(data: bytes, points: list[int]) -> list[bytes]:
    points = sorted({p for p in points if 0 < p < len(data)})
    return [data[a:b] for a, b in zip([0, *points], [*points, len(data)])]


@needs_reader
@pytest.mark.parametrize("stream", STREAMS, ids=range(len(STREAMS)))
def test_a_connection_answers_alike_with_and_without_it(root, stream) -> None:
    whole = _answers("pure", root, [stream])
    assert whole.startswith(b"HTTP/1.1 ")
    assert _answers("compiled", root, [stream]) == whole
    for at in (1, 2, 20, len(WRK) - 1, len(WRK) + 2, len(stream) - 3):  # a method, a head, a body cut in two
        assert _answers("compiled", root, _cuts(stream, [at])) == _answers("pure", root, _cuts(stream, [at])), at


@needs_reader
@settings(max_examples=60, deadline=None, database=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(picks=st.lists(st.sampled_from(STREAMS[:4] + [STREAMS[7]]), min_size=1, max_size=3),
       points=st.lists(st.integers(1, 600), max_size=4))
def test_cut_anywhere_the_answers_are_the_same(root, picks, points) -> None:
    stream = b"".join(picks)
    pieces = _cuts(stream, points)
    assert _answers("compiled", root, pieces) == _answers("pure", root, pieces)


@needs_reader
def test_a_method_begun_in_one_read_is_not_read_again(root) -> None:
    """llhttp holds "GE" from the end of a read with no callback: the next read must go to
    llhttp too, which sees "GEGET /" (a 400), not to the reader, which would read "GET /"."""
    pieces = [WRK + b"GE", b"GET /api/health HTTP/1.1\r\n\r\n"]
    compiled = _answers("compiled", root, pieces)
    assert compiled == _answers("pure", root, pieces)
    assert compiled.count(b"HTTP/1.1 200 ") == 1 and b"HTTP/1.1 400 " in compiled


@needs_reader
def test_an_exception_of_the_answer_is_answered_alike(root) -> None:
    """A bug of ours while answering (here: the file cache's sync fails) is a 400 and a close on
    both paths, as httptools makes it of a callback's exception; the worker goes on."""
    def answers(kind: str) -> bytes:
        with head_reader_set(kind):
            h = Harness(App(root))

        def broken() -> None:
            raise OSError("a bug")

        h.proto._sync_files = broken
        try:
            h.feed(b"GET /files/missing.bin HTTP/1.1\r\n\r\n" + WRK)
            return re.sub(rb"\r\nDate: [^\r]*", b"", bytes(h.transport.out))
        finally:
            h.finish()

    compiled = answers("compiled")
    assert compiled == answers("pure")
    assert compiled.startswith(b"HTTP/1.1 400 ") and b"callback error" in compiled
