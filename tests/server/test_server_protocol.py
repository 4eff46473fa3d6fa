"""The protocol's parsing and framing, driven in-process with raw bytes on a fake transport.

Everything that needs a socket (sendfile, flow control, timeouts, TLS) is in the other files,
over real connections.
"""

from __future__ import annotations

import asyncio
import json
import sys
import threading

import pytest
from conftest import FILES, counted

from axon.app import App, Request
from axon.response import Response, stream_response
from axon.server.reading import _target
from axon.server.state import State


def test_target_is_decoded_once() -> None:
    assert _target(b"/a%20b/c?x=%20&y=1") == ("/a b/c", "x=%20&y=1")
    assert _target(b"/%252e%252e") == ("/%2e%2e", "")
    assert _target(b"/caf%C3%A9") == ("/caf\xe9", "")
    assert _target(b"/a?b?c") == ("/a", "b?c")
    assert _target(b"/a#frag?x") == ("/a", "")
    assert _target(b"http://host:80/p%41th?q=1") == ("/pAth", "q=1")
    assert _target(b"*") == ("*", "")
    with pytest.raises(UnicodeDecodeError):
        _target(b"/%ff%fe")


def recording_app(root) -> tuple[App, list[Request]]:
    app = App(root)
    seen: list[Request] = []

    @app.route("/echo", methods=["GET", "POST", "PUT"], blocking=False)
    def echo(request: Request) -> Response:
        seen.append(request)
        return Response(200, [("Content-Type", "application/octet-stream")], [request.body])

    return app, seen


def test_request_fields(harness, root) -> None:
    app, seen = recording_app(root)
    h = harness(app)
    h.feed(b"POST /echo/../echo?a=%20b&c HTTP/1.1\r\nHost: t\r\nX-Dup: 1\r\nx-dup: 2\r\nContent-Length: 5\r\n\r\nhello")
    (resp,) = h.responses()
    # the path is the target as decoded, not normalised: "/echo/../echo" matches no route
    assert resp.status == 404
    h.feed(b"PUT /echo?a=%20b&c HTTP/1.1\r\nHost: t\r\nX-Dup: 1\r\nx-dup: 2\r\nContent-Length: 5\r\n\r\nhello")
    assert h.responses()[1].body == b"hello"
    req = seen[-1]
    assert (req.method, req.path, req.query_string) == ("PUT", "/echo", "a=%20b&c")
    assert req.headers == {"host": "t", "x-dup": "1, 2", "content-length": "5"}


def test_chunked_body_is_joined_and_trailers_ignored(harness, root) -> None:
    app, seen = recording_app(root)
    h = harness(app)
    h.feed(b"POST /echo HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nabc\r\n2;x=y\r\nde\r\n0\r\nX-Trailer: t\r\n\r\n")
    (resp,) = h.responses()
    assert resp.status == 200 and resp.body == b"abcde"
    assert "x-trailer" not in seen[0].headers


@pytest.mark.parametrize("pipelined", [False, True])
def test_a_trailer_that_says_close_closes(harness, root, pipelined) -> None:
    """Keep-alive is known at the end of the head, except for a chunked body, whose trailer may
    still say close (llhttp then reads nothing more): the answer says close, and the next
    request is not answered with a 400."""
    app, seen = recording_app(root)
    h = harness(app)
    chunked = b"POST /echo HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nabc\r\n0\r\nConnection: close\r\n\r\n"
    after = b"GET /api/health HTTP/1.1\r\n\r\n"
    h.receive(chunked + after if pipelined else chunked)
    if not pipelined and not h.closed:
        h.receive(after)
    assert [(r.status, r.header("connection")) for r in h.responses()] == [(200, "close")]
    assert h.closed


def test_a_trailer_is_bounded_as_a_head_is(harness, root) -> None:
    """httptools holds a trailer's value whole until its line ends: past the header budget (and
    a line per chunk), the request is refused while it arrives, not held."""
    app, seen = recording_app(root)
    h = harness(app)
    h.receive(b"POST /echo HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nabc\r\n0\r\nX-Long: ")
    for _ in range(8):  # 512 KiB of one trailer value, in reads of their own
        h.receive(b"a" * 65536)
    (resp,) = h.responses()
    assert resp.status == 431 and json.loads(resp.body)["error"]["code"] == "headers_too_large"
    assert not seen  # never handed to the App


def test_a_head_split_across_reads_owns_only_its_own_bytes(harness) -> None:
    """A read that ends a head begun before it, then carries many whole requests and the start
    of another, counts none of those against the new head: pipelined small requests are all
    answered, never a 431 because the read they came in was larger than the header budget."""
    h = harness()
    one = b"GET /files/a.txt HTTP/1.1\r\n\r\n"
    h.receive(b"GET /files/a.txt HTTP/1.1\r\nHo")
    h.receive(b"st: x\r\n\r\n" + one * 1000 + one[:10])  # some 30 KiB: past max_header_bytes
    h.receive(one[10:])
    h.pump()  # a thousand answers take a few turns of the loop (axon.pace)
    assert [r.status for r in h.responses()] == [200] * 1002


def test_a_head_begun_after_another_request_is_still_bounded(harness) -> None:
    h = harness()
    h.receive(b"GET /files/a.txt HTTP/1.1\r\n\r\nGET /files/a.txt HTTP/1.1\r\nX-Long: ")
    for _ in range(8):  # 512 KiB of one header value, in reads of their own
        h.receive(b"a" * 65536)
    assert [r.status for r in h.responses()] == [200, 431]


def test_a_chunked_body_after_another_is_counted_alone(harness, root) -> None:
    """The framing of a chunked body is counted for the request it belongs to: one that ends a
    large body and one that begins in the same read are both answered."""
    app, seen = recording_app(root)
    h = harness(app)
    big = b"x" * 100_000
    h.receive(b"POST /echo HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n%x\r\n" % len(big) + big)
    h.receive(b"\r\n0\r\n\r\nPOST /echo HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nabc\r\n")
    h.receive(b"0\r\n\r\n")
    assert [(r.status, len(r.body)) for r in h.responses()] == [(200, len(big)), (200, 3)]


def test_plain_handlers_answer_inline_without_a_task(harness) -> None:
    h = harness()
    h.receive(b"GET /api/health HTTP/1.1\r\n\r\nGET /files/a.txt HTTP/1.1\r\n\r\n")
    # no pump: written in the turn that read them (held to its end: outbox.py), and no task was made
    assert [r.status for r in h.responses()] == [200, 200]
    assert h.responses()[1].body == FILES["a.txt"]
    assert not [t for t in asyncio.all_tasks(h.loop) if not t.done()]
    assert h.proto.state is State.IDLE  # both answered: waiting for the next request


def gated_app(root) -> tuple[App, asyncio.Event]:
    """An app whose ``/slow`` answers "slow" only once the returned event is set."""
    app = App(root)
    gate = asyncio.Event()

    @app.route("/slow")
    async def slow(request: Request) -> str:
        await gate.wait()
        return "slow"

    return app, gate


def test_pipelined_answers_keep_order_and_reading_pauses_while_pending(harness, root) -> None:
    app, gate = gated_app(root)
    h = harness(app)
    h.receive(b"GET /slow HTTP/1.1\r\n\r\nGET /api/health HTTP/1.1\r\n\r\n")
    h.loop.run_until_complete(asyncio.sleep(0.01))
    assert h.transport.out == b"" and h.proto.state is State.ANSWER
    # more bytes while the response is pending: kept, not parsed; reading pauses
    h.receive(b"GET /files/a.txt HTTP/1.1\r\n\r\n")
    assert not h.transport.reading
    assert h.transport.out == b"" and h.proto.state is State.ANSWER  # nothing answered out of turn
    gate.set()
    h.pump()
    assert [r.status for r in h.responses()] == [200, 200, 200]
    assert [r.body for r in h.responses()] == [b"slow", b'{"status":"available"}', FILES["a.txt"]]
    assert h.transport.reading and not h.closed


def test_async_handlers_run_in_a_task_and_blocking_ones_in_the_pool(harness, root) -> None:
    app = App(root)
    seen: dict[str, object] = {}

    @app.route("/async")
    async def in_loop(request: Request) -> str:
        seen["task"] = asyncio.current_task()
        if sys.version_info >= (3, 11):
            async with asyncio.timeout(5):  # needs a current task
                await asyncio.sleep(0)
        return "a"

    @app.route("/sync")
    def in_pool(request: Request) -> str:
        seen["thread"] = threading.current_thread().name
        return "s"

    h = harness(app)
    h.feed(b"GET /async HTTP/1.1\r\n\r\nGET /sync HTTP/1.1\r\n\r\n")
    assert [r.body for r in h.responses()] == [b"a", b"s"]
    assert seen["task"] is not None
    assert str(seen["thread"]).startswith("axon-handler")


def test_expect_continue_waits_for_the_pending_response(harness, root) -> None:
    app, gate = gated_app(root)
    h = harness(app)
    body = b'{"files": ["a.txt"]}'
    h.receive(
        b"GET /slow HTTP/1.1\r\n\r\n"
        b"POST /api/stream-files HTTP/1.1\r\nExpect: 100-continue\r\nContent-Length: %d\r\n\r\n" % len(body)
    )
    h.loop.run_until_complete(asyncio.sleep(0.01))
    assert b"100 Continue" not in h.transport.out
    gate.set()
    h.pump()
    assert h.transport.out.count(b"HTTP/1.1 100 Continue\r\n\r\n") == 1
    assert h.transport.out.index(b"100 Continue") > h.transport.out.index(b"slow")
    h.feed(body)
    statuses = [r.status for r in h.responses()]
    assert statuses == [200, 200]
    assert h.responses()[1].interim == [100]


def test_expect_continue_is_not_sent_for_a_body_too_large(harness) -> None:
    h = harness()
    h.feed(b"POST /api/stream-files HTTP/1.1\r\nExpect: 100-continue\r\nContent-Length: 99999999\r\n\r\n")
    (resp,) = h.responses()
    assert resp.status == 413 and resp.interim == []
    assert h.closed


def test_eof_after_pipelined_requests_answers_then_closes(harness) -> None:
    h = harness()
    h.receive(b"GET /api/health HTTP/1.1\r\n\r\nGET /api/health HTTP/1.1\r\n\r\n")
    assert h.proto.eof_received() is None  # nothing pending: let the transport close
    assert len(h.responses()) == 2


def test_head_keeps_content_length_without_a_body(harness) -> None:
    h = harness()
    h.feed(b"HEAD /api/stream-files?f=a.txt HTTP/1.1\r\n\r\nGET /api/health HTTP/1.1\r\n\r\n")
    head, health = h.responses(["HEAD", "GET"])
    assert head.status == 200 and int(head.header("content-length")) > len(FILES["a.txt"])
    assert health.body == b'{"status":"available"}'


def streaming_app(root) -> App:
    app = App(root)

    @app.route("/gen")
    def gen(request: Request) -> Response:
        return stream_response(iter([b"one,", b"", b"two,", b"three"]))

    @app.route("/agen")
    async def agen(request: Request) -> Response:
        async def chunks():
            for part in (b"a", b"b", b"c"):
                await asyncio.sleep(0)
                yield part

        return stream_response(chunks())

    @app.route("/declared")
    def declared(request: Request) -> Response:
        n = int(request.arg("n", "3"))
        return Response(200, [("Content-Length", "3")], stream=iter([b"x" * n]))

    @app.route("/unsafe", blocking=False)
    def unsafe(request: Request) -> Response:
        return Response(200, [("X-Bad", "a\r\nSet-Cookie: evil=1")], [b"nope"])

    return app


def test_streams_are_chunked_on_http11(harness, root) -> None:
    h = harness(streaming_app(root))
    h.feed(b"GET /gen HTTP/1.1\r\n\r\nGET /agen HTTP/1.1\r\n\r\n")
    gen, agen = h.responses()
    assert gen.header("transfer-encoding") == "chunked" and gen.header("content-length") is None
    assert gen.body == b"one,two,three" and agen.body == b"abc"
    assert b"0\r\n\r\n" in h.transport.out and not h.closed


@pytest.mark.parametrize("kept", [b"Connection: keep-alive", b"Proxy-Connection: keep-alive"])
def test_streams_are_close_delimited_on_http10(harness, root, kept) -> None:
    # llhttp keeps an HTTP/1.0 request alive on either header: it is still 1.0, never chunked.
    h = harness(streaming_app(root))
    h.feed(b"GET /gen HTTP/1.0\r\n" + kept + b"\r\n\r\n")
    (resp,) = h.responses()
    assert resp.header("transfer-encoding") is None and resp.header("connection") == "close"
    assert resp.body == b"one,two,three"
    assert h.closed


@pytest.mark.parametrize("n", [2, 4])
def test_a_stream_must_deliver_its_declared_length(harness, root, n) -> None:
    h = harness(streaming_app(root))
    h.feed(b"GET /declared?n=%d HTTP/1.1\r\n\r\n" % n)
    assert h.transport.aborted  # the client sees a body cut short, never a wrong one
    assert b"x" * 4 not in h.transport.out  # never more than declared


def test_a_stream_of_its_declared_length_is_sent_as_is(harness, root) -> None:
    h = harness(streaming_app(root))
    h.feed(b"GET /declared?n=3 HTTP/1.1\r\n\r\n")
    (resp,) = h.responses()
    assert resp.body == b"xxx" and resp.header("transfer-encoding") is None and not h.transport.aborted


def test_an_unsafe_header_becomes_a_500_not_a_split_response(harness, root) -> None:
    h = harness(streaming_app(root))
    h.feed(b"GET /unsafe HTTP/1.1\r\n\r\n")
    (resp,) = h.responses()
    assert resp.status == 500 and b"evil" not in h.transport.out
    assert h.closed


def test_nothing_is_parsed_after_a_refusal(harness) -> None:
    h = harness()
    h.feed(b"GET / HTTP/1.1\r\nBad Header\r\n\r\n", b"GET /api/health HTTP/1.1\r\n\r\n")
    assert [r.status for r in h.responses()] == [400]
    assert h.closed


def test_a_small_response_longer_than_its_file_is_never_sent_short(harness, root) -> None:
    """The one-write path reads every slice before writing: a file shorter than the response
    claims (truncated after planning, or a handler's mistake) aborts the connection with
    nothing sent, and the descriptors are given back."""
    from axon.storage.local import FileStore
    from axon.http.segments import FileSlice

    app = App(root)
    store = FileStore(root)
    opened = []

    @app.route("/short", blocking=False)
    def short(request: Request) -> Response:
        f = store.open("a.txt")
        opened.append(f)
        return Response(200, [("Content-Type", "text/plain")], [b"head", FileSlice(f.fd, 0, f.size + 10)], files=[f])

    h = harness(app)
    h.feed(b"GET /short HTTP/1.1\r\n\r\n")
    assert h.transport.aborted and bytes(h.transport.out) == b""
    assert opened[0].fd == -1  # closed


# -- fixed responses (the health probe) answered from bytes ------------------------------------


def counting_app(root) -> tuple[App, list[str]]:
    """An App whose ``handle`` records each path it answers: what the fast path skips."""
    app = App(root)
    return app, counted(app)


def test_health_is_answered_from_bytes_exactly_as_the_app_would(harness, root) -> None:
    app, called = counting_app(root)
    fast = harness(app)
    fast.feed(b"GET /api/health HTTP/1.1\r\nHost: t\r\n\r\nHEAD /api/health HTTP/1.1\r\n\r\n")
    assert called == []  # the App was not asked
    observed, seen = counting_app(root)
    observed.records.attach(type("Reader", (), {"read": lambda *a: None, "flush": lambda *a: None})())
    slow = harness(observed)
    slow.worker.date_line = fast.worker.date_line
    slow.feed(b"GET /api/health HTTP/1.1\r\nHost: t\r\n\r\nHEAD /api/health HTTP/1.1\r\n\r\n")
    assert seen == ["/api/health", "/api/health"]  # observed: through the App, as always
    assert bytes(fast.transport.out) == bytes(slow.transport.out)
    get, head = fast.responses(["GET", "HEAD"])
    assert get.status == 200 and get.body == b'{"status":"available"}'
    assert head.header("content-length") == "22" and head.body == b""


def test_a_fixed_answer_carries_the_date_of_its_second(harness) -> None:
    from axon.server.wire import date_line

    h = harness()
    h.worker.date_line = date_line(784111777)
    h.feed(b"GET /api/health HTTP/1.1\r\n\r\nGET /api/health HTTP/1.1\r\n\r\n")
    h.worker.date_line = date_line(784111778)  # the worker's next second: a new line
    h.feed(b"GET /api/health HTTP/1.1\r\n\r\nHEAD /api/health HTTP/1.1\r\n\r\n")
    answers = h.responses(["GET", "GET", "GET", "HEAD"])
    assert [r.header("date")[-6:] for r in answers] == ["37 GMT", "37 GMT", "38 GMT", "38 GMT"]
    assert [r.body for r in answers] == [b'{"status":"available"}'] * 3 + [b""]


def test_fixed_answers_keep_their_place_in_a_pipeline(harness, root) -> None:
    app, called = counting_app(root)
    h = harness(app)
    h.feed(b"GET /files/a.txt HTTP/1.1\r\n\r\nGET /api/health HTTP/1.1\r\n\r\nGET /files/b.bin HTTP/1.1\r\n\r\n"
           b"GET /api/health HTTP/1.1\r\n\r\n")
    bodies = [r.body for r in h.responses()]
    assert bodies == [FILES["a.txt"], b'{"status":"available"}', FILES["b.bin"], b'{"status":"available"}']


def test_what_the_fast_path_does_not_take(harness, root) -> None:
    app, called = counting_app(root)
    h = harness(app)
    h.feed(b"GET /api/health HTTP/1.0\r\n\r\n")  # HTTP/1.0: its keep-alive rules, through the App
    assert called == ["/api/health"]
    h = harness(app)
    h.feed(b"GET /api/health HTTP/1.1\r\nConnection: close\r\n\r\n")
    assert called == ["/api/health"] * 2 and h.closed
    h = harness(app)
    h.feed(b"POST /api/health HTTP/1.1\r\nContent-Length: 0\r\n\r\n")
    assert h.responses()[0].status == 405


def test_fixed_answers_go_once_requests_are_observed(harness, root) -> None:
    app, called = counting_app(root)
    h = harness(app)
    h.feed(b"GET /api/health HTTP/1.1\r\n\r\n")
    assert called == []  # from the fixed table, past the App
    app.records.attach(type("Reader", (), {"read": lambda *a: None, "flush": lambda *a: None})())
    h.worker.shortcuts.refresh()  # as the next sweep does
    h.feed(b"GET /api/health HTTP/1.1\r\n\r\n")
    assert called == ["/api/health"] and [r.status for r in h.responses()] == [200, 200]


def test_a_route_of_your_own_replaces_the_fixed_answer(harness, root) -> None:
    app = App(root)

    @app.route("/api/health", blocking=False)
    def mine(request: Request) -> dict:
        return {"status": "mine"}

    h = harness(app)
    h.feed(b"GET /api/health HTTP/1.1\r\n\r\n")
    assert h.responses()[0].body == b'{"status":"mine"}'
