"""App: handler results, errors, HEAD, threads, descriptors, signing, what a server asks of it
(routing: test_routing.py; the built-in endpoints: test_endpoints.py)."""

from __future__ import annotations

import asyncio
import json
import logging
import threading
from urllib.parse import unquote, urljoin, urlsplit

import pytest

from axon.app import App, Request, Response, json_response, stream_response
from hypothesis import given, settings
from hypothesis import strategies as st

from axon.errors import HTTPError, NotFound
from axon.limits import Limits


@pytest.fixture(params=["sync", "async"])
def call(request):
    """Run a request through App.handle or App.handle_async (the same contract)."""

    def run(app: App, method: str, target: str, headers: dict | None = None, body: bytes = b""):
        path, _, query = target.partition("?")
        req = Request(method, path, query, headers or {}, body)
        if request.param == "sync":
            return app.handle(req)
        return asyncio.run(app.handle_async(req))

    run.mode = request.param
    return run


@pytest.fixture
def app(root):
    return App(root)


def _json(response) -> dict:
    assert dict(response.headers)["Content-Type"] == "application/json"
    return json.loads(b"".join(response.body))


def _body(response, render) -> bytes:
    try:
        return render(response.body)
    finally:
        response.close()



# -- HEAD -------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "target, headers",
    [("/files/b.bin", {}), ("/files/b.bin", {"range": "bytes=0-9,20-29"}), ("/api/stream-files?f=a.txt&g=b.bin", {}),
     ("/api/health", {}), ("/files/missing", {})],
)
def test_head(app, call, render, open_fds, target, headers):
    get = call(app, "GET", target, headers)
    get_length = len(render(get.body))
    get.close()
    before = open_fds()
    head = call(app, "HEAD", target, headers)
    assert head.status == get.status
    assert head.body == [] and head.stream is None and head.files == ()
    assert dict(head.headers)["Content-Length"] == str(get_length)
    assert open_fds() <= before  # the files were closed at once


def test_head_closes_a_stream(root, call):
    closed = []

    def gen():
        try:
            yield b"x"
        finally:
            closed.append(True)

    app = App(root)
    stream = gen()
    next(stream)
    app.add_route("/s", lambda r: stream_response(stream))
    r = call(app, "HEAD", "/s")
    assert r.status == 200 and r.stream is None and closed == [True]


# -- what handlers return -------------------------------------------------------------------


@pytest.mark.parametrize(
    "result, ctype, body",
    [
        ({"a": 1}, "application/json", b'{"a":1}'),
        ([1, "x"], "application/json", b'[1,"x"]'),
        ("héllo", "text/plain; charset=utf-8", "héllo".encode()),
        (b"\x00\xff", "application/octet-stream", b"\x00\xff"),
        (json_response({"z": 0}, status=201), "application/json", b'{"z":0}'),
    ],
)
def test_handler_results(root, call, render, result, ctype, body):
    app = App(root)
    app.add_route("/r", lambda r: result)
    r = call(app, "GET", "/r")
    assert dict(r.headers)["Content-Type"] == ctype
    assert dict(r.headers)["Content-Length"] == str(len(body))
    assert _body(r, render) == body
    assert r.status == (201 if isinstance(result, Response) else 200)


def test_handler_http_error(root, call):
    app = App(root)

    def refuse(request):
        raise HTTPError("go away", status=418, code="teapot", headers=[("Retry-After", "5")])

    app.add_route("/r", refuse)
    r = call(app, "GET", "/r")
    assert r.status == 418 and ("Retry-After", "5") in r.headers
    assert _json(r) == {"error": {"status": 418, "code": "teapot", "message": "go away"}}


SECRET = "secret-detail-/etc/shadow-password=hunter2"


@pytest.mark.parametrize(
    "handler",
    [
        lambda r: 1 / 0,
        lambda r: {}["missing"],
        lambda r: (_ for _ in ()).throw(RuntimeError(SECRET)),
        lambda r: None,  # not a valid result: TypeError
        lambda r: 42,
    ],
    ids=["zero", "keyerror", "runtime", "none", "int"],
)
def test_unexpected_exception_leaks_nothing(root, call, caplog, handler, open_fds):
    app = App(root)
    app.add_route("/boom", handler)
    before = open_fds()
    with caplog.at_level(logging.ERROR, logger="axon"):
        r = call(app, "GET", "/boom")
    assert r.status == 500
    assert _json(r) == {"error": {"status": 500, "code": "internal_error", "message": "internal server error"}}
    text = b"".join(r.body).decode()
    assert SECRET not in text and "Traceback" not in text and "Error" not in text
    records = [rec for rec in caplog.records if rec.name == "axon" and rec.levelno == logging.ERROR]
    assert len(records) == 1
    assert records[0].exc_info is not None
    assert "/boom" in records[0].getMessage()
    assert open_fds() <= before


def test_handler_raising_after_opening_a_file(root, call, open_fds):
    app = App(root)

    def careful(request):
        response = app.send_file(request, "b.bin")
        response.close()
        raise NotFound("changed my mind")

    app.add_route("/careful", careful)
    before = open_fds()
    r = call(app, "GET", "/careful")
    assert r.status == 404
    assert open_fds() <= before


def test_async_handler(root, call, render):
    app = App(root)

    async def handler(request):
        await asyncio.sleep(0)
        return {"async": True, "q": request.arg("q")}

    app.add_route("/a", handler)
    assert _json(call(app, "GET", "/a?q=1")) == {"async": True, "q": "1"}


def test_async_handler_error(root, call, caplog):
    app = App(root)

    async def handler(request):
        raise RuntimeError(SECRET)

    app.add_route("/a", handler)
    with caplog.at_level(logging.ERROR, logger="axon"):
        r = call(app, "GET", "/a")
    assert r.status == 500 and SECRET.encode() not in b"".join(r.body)


def test_threads(root):
    """handle_async: plain functions run in the executor, unless blocking=False; async inline."""
    app = App(root)
    seen = {}

    def blocking(request):
        seen["blocking"] = threading.current_thread().name
        return "x"

    def quick(request):
        seen["quick"] = threading.current_thread().name
        return "x"

    async def coro(request):
        seen["coro"] = threading.current_thread().name
        return "x"

    app.add_route("/blocking", blocking)
    app.add_route("/quick", quick, blocking=False)
    app.add_route("/coro", coro)

    async def main():
        for path in ("/blocking", "/quick", "/coro"):
            (await app.handle_async(Request("GET", path))).close()
        return threading.current_thread().name

    loop_thread = asyncio.run(main())
    assert seen["blocking"].startswith("axon-handler")
    assert seen["quick"] == loop_thread and seen["coro"] == loop_thread
    app.handle(Request("GET", "/blocking")).close()  # sync: the caller's thread
    assert seen["blocking"] == threading.current_thread().name
    app.executor.shutdown()


def test_request_helpers():
    r = Request("GET", "/x", "a=1&b=&a=2&c")
    assert r.query == [("a", "1"), ("b", ""), ("a", "2"), ("c", "")]
    assert r.arg("a") == "1" and r.arg("b") == "" and r.arg("zz", "d") == "d"
    assert Request("POST", "/", body=b'{"x": [1]}').json() == {"x": [1]}
    with pytest.raises(HTTPError) as info:
        Request("POST", "/", body=b"{").json()
    assert info.value.status == 400
    r = Request("GET", "/")
    assert r.headers == {} and r.body == b"" and r.params == {}


def test_app_root_from_environment(root, monkeypatch, call, render):
    monkeypatch.setenv("AXON_ROOT", str(root))
    assert _body(call(App(), "GET", "/files/a.txt"), render) == b"hello, axon\n"


def test_app_with_store_and_hidden(root, call, render):
    from axon.storage.local import FileStore

    assert call(App(root), "GET", "/files/.hidden").status == 403
    assert _body(call(App(root, allow_hidden=True), "GET", "/files/.hidden"), render) == b"hidden\n"
    app = App(store=FileStore(root / "sub"))
    assert _body(call(app, "GET", "/files/c.json"), render) == b'{"c": 3}\n'


def test_send_batch_and_send_file_from_user_routes(root, call, render, parse_multipart):
    app = App(root, builtins=False, limits=Limits(max_files=2))
    app.add_route("/bundle", lambda r: app.send_batch(r, ["a.txt", "sub/c.json"]))
    app.add_route("/too-many", lambda r: app.send_batch(r, ["a.txt"] * 3))
    app.add_route("/one/<path:p>", lambda r: app.send_file(r, r.params["p"]))
    r = call(app, "GET", "/bundle")
    parts = parse_multipart(dict(r.headers)["Content-Type"], _body(r, render))
    assert len(parts) == 2
    assert call(app, "GET", "/too-many").status == 413
    assert _body(call(app, "GET", "/one/sub/deeper/d.txt"), render) == b"d" * 1000


# -- no descriptor survives an error path ---------------------------------------------------------

ERROR_REQUESTS = [
    ("GET", "/files/missing", {}, b""),
    ("GET", "/files/../outside.txt", {}, b""),
    ("GET", "/files/b.bin", {"range": "bytes=5-1"}, b""),
    ("GET", "/files/b.bin", {"range": "bytes=" + ",".join(["0-0"] * 100)}, b""),
    ("GET", "/files/b.bin", {"if-match": '"x"'}, b""),
    ("GET", "/files/b.bin", {"if-none-match": "*"}, b""),
    ("GET", "/api/stream-files?a=a.txt&b=b.bin&c=missing", {}, b""),
    ("GET", "/api/stream-files?a=a.txt&b=sub&c=.hidden", {}, b""),
    ("GET", "/api/stream-files?" + "&".join(["f=a.txt"] * 1001), {}, b""),
    ("POST", "/api/stream-files", {}, b'{"files": ["a.txt", "nope"]}'),
    ("POST", "/api/stream-files", {}, b"{"),
    ("PUT", "/files/a.txt", {}, b""),
    ("GET", "/nowhere", {}, b""),
    ("GET", "/api/stream-files?f=%ff", {}, b""),
]


def test_no_descriptor_leaks_on_error_paths(root, call, open_fds):
    app = App(root, limits=Limits(max_batch_bytes=10_000))
    call(app, "GET", "/api/health").close()  # warm up (lazy imports, caches)
    before = open_fds()
    for method, target, headers, body in ERROR_REQUESTS:
        r = call(app, method, target, headers, body)
        assert r.status >= 300, (method, target)
        assert r.files in ((), []), (method, target)
        r.close()
    r = call(app, "GET", "/api/stream-files?a=a.txt&b=b.bin")  # over max_batch_bytes
    assert r.status == 413
    assert open_fds() <= before


# -- signed requests (App(secret=...)): checked before routing ---------------------------------------


def test_signing_gate(root, call, render, open_fds, monkeypatch):
    import time

    from axon.signing import mint_token, sign_url

    monkeypatch.delenv("AXON_SECRET", raising=False)
    app = App(root, secret="s3cret")
    assert call(app, "GET", "/api/health").status == 200  # public: load balancers probe it
    before = open_fds()
    r = call(app, "GET", "/files/a.txt")
    assert r.status == 401 and ("WWW-Authenticate", 'Bearer realm="axon"') in r.headers
    r = call(app, "GET", "/no/such/endpoint")
    assert r.status == 401  # refused before routing: endpoints are not revealed
    assert open_fds() <= before
    later = int(time.time()) + 60
    target = sign_url("/api/stream-files?f=a.txt&g=sub/c.json", "s3cret", later)
    r = call(app, "GET", target)
    assert r.status == 200
    assert len(render(r.body).split(b"Content-Location: ")) == 3  # expires/signature are no files
    r.close()
    tampered = target.replace("f=a.txt", "f=b.bin")
    assert call(app, "GET", tampered).status == 403
    expired = sign_url("/files/a.txt", "s3cret", int(time.time()) - 1)
    assert call(app, "GET", expired).status == 403
    token = mint_token("s3cret", later)
    r = call(app, "GET", "/files/a.txt", {"authorization": f"Bearer {token}"})
    assert r.status == 200 and _body(r, render) == b"hello, axon\n"
    r = call(app, "GET", "/files/a.txt", {"authorization": "Bearer axon1.9999999999.AAAA"})
    assert r.status == 403


@given(st.text(alphabet="ab=&;%+é \x00", max_size=40))
@settings(max_examples=300, deadline=None)
def test_query_fast_path_agrees_with_parse_qsl(query):
    from urllib.parse import parse_qsl

    raw = query.encode("utf-8").decode("latin-1")  # what a runtime hands over
    try:
        expected = parse_qsl(query, keep_blank_values=True, errors="strict")
    except UnicodeDecodeError:
        expected = None
    try:
        got = Request("GET", "/", raw).query
    except HTTPError:
        got = None
    assert got == expected


# -- what a server asks of the App (axon.server.served) -----------------------------------------


def test_fixed_answers_only_while_nothing_observes(root):
    app = App(root)
    assert app.fixed_answers() == {"/api/health": app.fixed["/api/health"]}
    read = App(root)
    read.records.attach(type("R", (), {"read": lambda self, records: None, "flush": lambda self: None})())
    assert read.fixed_answers() == {}
    access = logging.getLogger("axon.access")
    level = access.level
    access.setLevel(logging.INFO)  # someone reads the access log
    try:
        assert App(root).fixed_answers() == {}
    finally:
        access.setLevel(level)


def test_fixed_answers_need_no_signature(root):
    app = App(root, secret="s3cret")
    app.fixed["/private"] = json_response({"ok": True})
    assert set(app.fixed_answers()) == {"/api/health"}  # public: probed unsigned


def test_close_stops_the_pool_and_a_later_request_starts_another(root):
    app = App(root)

    @app.route("/where")
    def where(request):
        return threading.current_thread().name

    def ask() -> bytes:
        return b"".join(asyncio.run(app.handle_async(Request("GET", "/where"))).body)

    assert ask().startswith(b"axon-handler")
    pool = app.executor
    app.close()
    with pytest.raises(RuntimeError):  # shut down: it takes no more work
        pool.submit(int)
    assert ask().startswith(b"axon-handler") and app.executor is not pool
    app.close()
    app.close()  # twice, and with no pool: nothing to do


# -- GET /api/limits: what a client sizes its batches by -------------------------------------------


class ThreadNotingStore:
    """The App's real store, noting the thread of every CRC-32 read from disk."""

    def __init__(self, store) -> None:
        self.store, self.read_in = store, []

    def __getattr__(self, name):
        return getattr(self.store, name)

    def crc32s(self, files, read=True):
        for f in files:
            if read and self.store.crcs.known((f.device, f.inode, f.size, f.mtime_ns, f.ctime_ns)) is None:
                self.read_in.append(threading.current_thread().name)
        return self.store.crc32s(files, read)


@pytest.mark.parametrize("runtime", ["asgi", "native"])
def test_a_cold_zip_called_on_the_loop_reads_its_crcs_in_the_pool(root, render, runtime):
    import io
    import os
    import zipfile

    from axon.plan.batch import INLINE_READ_BYTES

    data = os.urandom(INLINE_READ_BYTES * 2)
    (root / "big.bin").write_bytes(data)
    app = App(root)
    app.store = noting = ThreadNotingStore(app.store)
    target = "/api/stream-files.zip"

    async def serve(query: str) -> Response:
        request = Request("GET", target, query)
        if runtime == "asgi":  # as axon.asgi calls it
            return await app.handle_async(request)
        answer = app.handle_on_loop(request)  # as axon serve calls it
        return await answer if asyncio.iscoroutine(answer) else answer

    loop_thread = threading.current_thread().name
    try:
        response = asyncio.run(serve("f=big.bin&g=a.txt"))
        assert response.status == 200
        assert noting.read_in and all(name.startswith("axon-handler") for name in noting.read_in)
        with zipfile.ZipFile(io.BytesIO(render(response.body))) as archive:
            assert archive.read("big.bin") == data and archive.testzip() is None
        # A small cold file is read right there, on the loop's thread: cheaper than the pool.
        noting.read_in.clear()
        assert asyncio.run(serve("f=sub/c.json")).status == 200
        assert noting.read_in == [loop_thread]
        # Where blocking is fine (WSGI), it is read in the caller's thread, whatever its size.
        noting.read_in.clear()
        (root / "big2.bin").write_bytes(data)
        assert app.handle(Request("GET", target, "f=big2.bin")).status == 200
        assert noting.read_in == [loop_thread]
    finally:
        app.close()


def test_a_handler_that_would_block_on_the_loop_runs_again_in_the_pool(root, caplog):
    from axon.errors import WouldBlock

    app = App(root)
    calls = []

    @app.route("/work", blocking=False)
    def work(request):
        calls.append((request.on_loop, threading.current_thread().name))
        if request.on_loop:
            raise WouldBlock("a long read")
        return "done"

    @app.route("/stubborn", blocking=False)
    def stubborn(request):
        raise WouldBlock("always")  # a handler's bug: it would block even where it may

    async def on_loop(path: str) -> Response:
        answer = app.handle_on_loop(Request("GET", path))  # as axon serve calls it
        return await answer if asyncio.iscoroutine(answer) else answer

    try:
        for answer in (asyncio.run(app.handle_async(Request("GET", "/work"))), asyncio.run(on_loop("/work"))):
            assert answer.status == 200 and b"".join(answer.body) == b"done"
        assert [on for on, _ in calls] == [True, False, True, False]
        assert all(name.startswith("axon-handler") for on, name in calls if not on)
        assert app.records.begun_count() == 2  # each request counted once, retried or not
        with caplog.at_level(logging.ERROR, logger="axon"):
            assert asyncio.run(app.handle_async(Request("GET", "/stubborn"))).status == 500
            assert asyncio.run(on_loop("/stubborn")).status == 500
            assert app.handle(Request("GET", "/stubborn")).status == 500  # WSGI: no loop to leave
    finally:
        app.close()


@pytest.mark.parametrize("runtime", ["asgi", "native"])
def test_a_large_batch_called_on_the_loop_is_planned_between_turns_to_the_same_answer(root, render, runtime):
    from axon.pace import pace_of
    from axon.plan.batch import SLICE_FILES

    names = [f"many/{i:03d}.bin" for i in range(100)]
    (root / "many").mkdir()
    for i, name in enumerate(names):
        (root / name).write_bytes(bytes([i]) * 100)
    app = App(root)
    query = "&".join(f"f={name}" for name in names)
    turns = []

    async def serve(query: str) -> Response:
        request = Request("GET", "/api/stream-files", query)
        if runtime == "asgi":  # as axon.asgi calls it
            return await app.handle_async(request)
        answer = app.handle_on_loop(request)  # as axon serve calls it
        return await answer if asyncio.iscoroutine(answer) else answer

    async def counted(query: str) -> Response:
        async def tick() -> None:  # counts the loop's turns while the batch is planned
            while True:
                turns.append(1)
                await asyncio.sleep(0)

        # A budget of nothing: each slice of the plan waits for a turn of its own.
        pace_of(asyncio.get_running_loop()).budget = 0.0
        ticker = asyncio.ensure_future(tick())
        try:
            return await serve(query)
        finally:
            ticker.cancel()

    try:
        at_once = app.handle(Request("GET", "/api/stream-files", query))  # WSGI: in one go
        between = asyncio.run(counted(query))
        assert between.status == at_once.status == 200
        assert between.headers == at_once.headers  # the same ETag, boundary and Vary
        assert render(between.body) == render(at_once.body)
        assert len(turns) >= 2 * 100 // SLICE_FILES  # the loop ran between two slices of the plan
        refused = asyncio.run(serve(query + "&f=missing.bin"))
        assert refused.status == 404 and ("Vary", "Accept") in refused.headers
    finally:
        app.close()


# -- portable identities (several nodes serving copies of one tree) ---------------------------


def test_portable_identity_needs_a_shared_key(root, monkeypatch) -> None:
    for name in ("AXON_SECRET", "AXON_IDENTITY_SECRET", "AXON_PORTABLE_IDENTITY"):
        monkeypatch.delenv(name, raising=False)
    with pytest.raises(ValueError, match="AXON_IDENTITY_SECRET"):
        App(root, portable_identity=True)
    from axon.storage.local import FileStore

    with pytest.raises(ValueError, match="portable_identity=True"):
        App(store=FileStore(root), portable_identity=True, identity_secret="s")


def test_the_identity_secret_keys_batches_without_signing(root, monkeypatch, tmp_path) -> None:
    for name in ("AXON_SECRET", "AXON_IDENTITY_SECRET"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("AXON_PORTABLE_IDENTITY", "1")
    monkeypatch.setenv("AXON_IDENTITY_SECRET", "shared")
    app = App(root)
    assert app.store.portable_identity and app.verifier is None
    # The key is the secret's alone: another root (another host's path) gets the same one.
    other = tmp_path / "elsewhere"
    other.mkdir()
    assert App(other).batch_key == app.batch_key != App(root, portable_identity=False, identity_secret="").batch_key
    status = app.handle(Request("GET", "/api/stream-files", "f=a.txt")).status
    assert status == 200


def test_a_handler_with_two_long_plans_on_the_loop_is_answered(tmp_path, open_fds):
    # One plan is stepped between turns and kept for the handler's next run; a second long plan
    # in that run is made in the pool, not stepped again (which ran the handler without end).
    for i in range(1, 41):
        (tmp_path / f"f{i}").write_text(str(i))
    app = App(str(tmp_path))
    runs = []

    @app.route("/two", blocking=False)
    def two(request):
        runs.append(request.on_loop)
        app.send_batch(request, [f"f{i}" for i in range(1, 40)]).close()
        return app.send_batch(request, [f"f{i}" for i in range(2, 41)])

    before = open_fds()

    async def ask() -> Response:
        return await asyncio.wait_for(app.handle_async(Request("GET", "/two", "", {}, b"")), 20)

    response = asyncio.run(ask())
    assert response.status == 200 and runs == [True, True, False]
    response.close()
    assert open_fds() <= before


def test_a_file_planned_before_a_long_plan_on_the_loop_is_not_left_open(tmp_path, open_fds):
    # Review: a batch of more than INLINE_FILES files raises WouldBlock out of the handler on the
    # loop; a response the handler planned before it (closed by the handler on its normal path)
    # is dropped with its descriptors open, on each run that is cut short so.
    for i in range(1, 41):
        (tmp_path / f"f{i}").write_text(str(i))
    app = App(str(tmp_path))

    @app.route("/first-then-many", blocking=False)
    def first_then_many(request):
        first = app.send_file(request, "f1")
        many = app.send_batch(request, [f"f{i}" for i in range(1, 41)])
        first.close()
        return many

    before = open_fds()

    async def ask() -> Response:
        return await asyncio.wait_for(app.handle_async(Request("GET", "/first-then-many", "", {}, b"")), 20)

    response = asyncio.run(ask())
    assert response.status == 200
    response.close()
    app.close()
    import gc

    gc.collect()  # not the collector's to close: no finaliser closes a dropped OpenFile
    assert open_fds() <= before


def test_a_plan_made_in_steps_is_given_only_to_the_same_call(tmp_path, open_fds):
    # The plan stepped for a tar of 40 files is not what a multipart of the same 40 files gets when
    # the handler, run again, asks for that instead: a plan is matched on paths, format and slices.
    for i in range(1, 41):
        (tmp_path / f"f{i}").write_text(str(i))
    app = App(str(tmp_path))
    formats = iter(["tar", "multipart", "multipart"])

    @app.route("/changing", blocking=False)
    def changing(request):
        return app.send_batch(request, [f"f{i}" for i in range(1, 41)], next(formats))

    before = open_fds()

    async def ask() -> Response:
        return await asyncio.wait_for(app.handle_async(Request("GET", "/changing", "", {}, b"")), 20)

    response = asyncio.run(ask())
    assert response.status == 200
    assert dict(response.headers)["Content-Type"].startswith("multipart/mixed")
    response.close()
    assert open_fds() <= before
