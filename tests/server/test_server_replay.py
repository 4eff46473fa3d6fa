"""A repeated read answered again from its answer (axon.server.replay): only while every file it
holds is the version it was made from, only for what may be repeated, recorded as the App would."""

from __future__ import annotations

import os
import threading
import time
from pathlib import Path

import pytest
from conftest import Client, Resp, batch_target, counted, parse_multipart, slow_client

from axon.app import App, Request
from axon.response import Response
from axon.server.replay import Replay, Replays
from axon.storage.local import FileStore

SETTLED = time.time() - 10  # mtimes this old: a small file's bytes are kept in memory at once


def make_root(tmp_path: Path, files: dict[str, bytes]) -> Path:
    for name, data in files.items():
        path = tmp_path / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(data)
        os.utime(path, (SETTLED, SETTLED))
    return tmp_path


FILES = {"a.txt": b"alpha\n", "k64.bin": os.urandom(64 * 1024), "k20.bin": os.urandom(20 * 1024),
         "k200.bin": os.urandom(200 * 1024)}


@pytest.fixture
def tree(tmp_path: Path) -> Path:
    return make_root(tmp_path, FILES)


def read(target: str, extra: bytes = b"") -> bytes:
    return f"GET {target} HTTP/1.1\r\nHost: t\r\n".encode() + extra + b"\r\n"


def same_but_date(a: Resp, b: Resp) -> bool:
    strip = lambda r: [(k, v) for k, v in r.headers if k.lower() != "date"]  # noqa: E731
    return (a.status, strip(a), a.body) == (b.status, strip(b), b.body)


@pytest.mark.parametrize("target", ["/files/a.txt", "/files/k64.bin", "/files/k20.bin",
                                    batch_target(["a.txt", "k20.bin", "a.txt"]), "/api/stream-files.tar?f=k20.bin",
                                    "/api/stream-files.zip?f=a.txt&g=k20.bin"])
def test_a_read_seen_twice_is_answered_again_without_the_app(harness, tree, target) -> None:
    app = App(tree)
    called = counted(app)
    h = harness(app)
    data = read(target)
    h.feed(data, data)  # seen once, then twice: remembered with its answer
    assert len(called) == 2 and len(h.worker.replays) == 1
    h.proto.parser = None  # type: ignore[assignment]  # parsing it again would fail loudly
    h.feed(data, data, data)
    first, second, *again = h.responses()
    assert len(called) == 2 and len(again) == 3  # the App was not asked again
    assert all(same_but_date(first, r) for r in [second, *again])
    assert first.status == 200 and first.header("etag")


def test_only_what_may_be_repeated_is_remembered(harness, tree) -> None:
    app = App(tree)
    called = counted(app)

    @app.route("/now", blocking=False)
    def now(request: Request) -> str:  # a clock: not repeatable
        return str(time.monotonic_ns())

    h = harness(app)
    for data in [
        read("/now"),
        read("/files/nope"),  # a 404: no file holds it, one may appear
        b"HEAD /files/a.txt HTTP/1.1\r\n\r\n",
        b"GET /files/a.txt HTTP/1.0\r\nConnection: keep-alive\r\n\r\n",
        b"GET /files/a.txt HTTP/1.1\r\nContent-Length: 2\r\n\r\nhi",
        read("/files/a.txt", b"Expect: 100-continue\r\n"),  # a 100 Continue was written for it
        read("/files/a.txt") * 2,  # two requests in one read
    ]:
        h.feed(data, data, data)
        assert len(h.worker.replays) == 0, data
    assert len(called) == 3 * 8
    answers = h.responses(["GET"] * 6 + ["HEAD"] * 3 + ["GET"] * 15)
    assert len({r.body for r in answers[:3]}) == 3  # the clock moved: every /now was asked


def test_a_file_changed_is_answered_anew(harness, tree) -> None:
    app = App(tree)
    called = counted(app)
    h = harness(app)
    data = read("/files/k20.bin")
    h.feed(data, data, data)
    assert len(called) == 2
    new = os.urandom(20 * 1024)
    (tree / "k20.bin").write_bytes(new)  # in place, the same size: the ctime moved
    h.feed(data)
    assert len(called) == 3 and h.responses()[-1].body == new
    os.replace(tree / "a.txt", tree / "k20.bin")  # renamed over: another inode
    h.feed(data)
    assert len(called) == 4 and h.responses()[-1].body == FILES["a.txt"]
    (tree / "k20.bin").unlink()
    h.feed(data, data, data)
    assert [r.status for r in h.responses()[-3:]] == [404] * 3 and len(called) == 7
    assert len({r.header("etag") for r in h.responses()[:5]}) == 3


def test_a_path_repointed_is_seen_within_the_file_caches_validity(harness, tree) -> None:
    (tree / "link").symlink_to("a.txt")
    app = App(tree)
    called = counted(app)
    h = harness(app)
    clock = [0.0]
    h.worker.app.store._cache._clock = lambda: clock[0]  # the cache trusts a path 1 s
    data = read("/files/link")
    h.feed(data, data, data)
    (tree / "link").unlink()
    (tree / "link").symlink_to("k20.bin")  # the old file is still there, unchanged
    h.feed(data)
    assert h.responses()[-1].body == FILES["a.txt"] and len(called) == 2  # within validity
    clock[0] = 1.0
    h.feed(data)
    assert h.responses()[-1].body == FILES["k20.bin"] and len(called) == 3


def test_a_signed_request_is_never_answered_again(harness, tree) -> None:
    from axon.signing import sign_url

    app = App(tree, secret="s3cret")
    called = counted(app)
    h = harness(app)
    data = read(sign_url("/files/a.txt", "s3cret", int(time.time()) + 60))
    h.feed(data, data, data)
    assert len(called) == 3 and len(h.worker.replays) == 0


def test_a_route_may_declare_its_answers_repeatable(harness, tree) -> None:
    app = App(tree)

    @app.route("/mine/<path:path>", blocking=False, repeatable=True)
    def mine(request: Request) -> Response:
        return app.send_file(request, request.params["path"])

    called = counted(app)
    h = harness(app)
    data = read("/mine/a.txt")
    h.feed(data, data, data)
    assert len(called) == 2 and h.responses()[-1].body == FILES["a.txt"]


def test_replays_are_forgotten_when_a_route_is_added(harness, tree) -> None:
    app = App(tree)
    called = counted(app)
    h = harness(app)
    data = read("/files/a.txt")
    h.feed(data, data)
    assert len(h.worker.replays) == 1 and called == ["/files/a.txt"] * 2
    app.add_route("/files/<path:path>", lambda request: "mine", blocking=False)
    h.worker._sweep()  # within a tick
    h.feed(data)
    assert len(h.worker.replays) == 0 and h.responses()[-1].body == b"mine"


def test_replayed_requests_are_recorded_as_the_app_records_them(harness, tree) -> None:
    app = App(tree)
    seen: list[tuple] = []
    app.records.attach(type("Reader", (), {"read": lambda self, r: seen.extend(r), "flush": lambda self: None})())
    called = counted(app)
    h = harness(app)
    data = read(batch_target(["a.txt", "k20.bin"]), b"X-Forwarded-For: 10.1.2.3\r\n")
    h.feed(data, data, data, data)
    app.records.drain()
    assert len(called) == 2 and len(seen) == 4  # two answered by the App, two again
    assert {r[1:7] + r[8:10] for r in seen} == {seen[0][1:7] + seen[0][8:10]}  # the same fields
    # Each replayed record names the one record it repeats (what the log keeps its text by).
    assert [r[10] is None for r in seen] == [True, True, False, False] and seen[2][10] is seen[3][10]
    assert seen[2][10][1:7] + seen[2][10][8:10] == seen[0][1:7] + seen[0][8:10]
    method, path, query, status, nbytes, nfiles, client = seen[-1][1:7] + seen[-1][8:9]
    assert (method, path, status, nfiles, client) == ("GET", "/api/stream-files", 200, 2, "10.1.2.3")
    assert nbytes == len(h.responses()[-1].body) and seen[-1][0] > seen[0][0]
    assert app.records.begun_count() == 4
    (tree / "a.txt").write_bytes(b"changed")  # the replay is stale: the App answers, once counted
    h.feed(data)
    app.records.drain()
    assert len(called) == 3 and len(seen) == 5 and app.records.begun_count() == 5


def pinned(store, path: str) -> Replay:
    f = store.open(path)
    try:
        return Replay(b"HTTP/1.1 200 OK\r\n", [f.segment(0, f.size)], f.size, (f.pin(),))
    finally:
        f.close()


def test_a_table_of_replays_is_bounded_and_gives_every_descriptor_back(tree) -> None:
    store = FileStore(tree)
    store.enable_cache(8)
    table = Replays(size=4)
    replays = [pinned(store, "k20.bin") for _ in range(10)]
    for i, replay in enumerate(replays):
        table.remember(b"read %d" % i, replay)
    assert len(table) == 4  # the oldest went first, and gave their descriptors back
    assert [bool(r.pins) for r in replays] == [False] * 6 + [True] * 4
    entry = replays[-1].pins[0][0]
    assert entry.refs == 4  # one for each replay held; the cache's entry itself holds none
    table.clear()
    assert entry.refs == 0 and len(table) == 0


def test_a_descriptor_the_cache_let_go_stays_open_while_a_replay_holds_it(tree) -> None:
    store = FileStore(tree)
    store.enable_cache(1)
    table = Replays()
    table.remember(b"read", pinned(store, "k20.bin"))
    entry = table.answers[b"read"].pins[0][0]
    store.open("a.txt").close()  # the cache holds one file: k20.bin's entry is let go
    assert entry.dropped and os.fstat(entry.fd)  # but not closed: the replay may still read it
    assert not table.answers[b"read"].current()
    table.prune()  # the sweep: its files left the cache
    assert len(table) == 0
    with pytest.raises(OSError):
        os.fstat(entry.fd)


def test_seen_once_is_bounded(tree) -> None:
    table = Replays(size=3)
    assert [table.seen_before(b"%d" % i) for i in range(4)] == [False] * 4  # full at the 4th: emptied
    assert table.seen_before(b"3") and not table.seen_before(b"0")  # the others were forgotten
    assert not table.seen_before(b"3")  # seen twice: remembered by the caller, forgotten here


# -- over real sockets, with sendfile ------------------------------------------------------------


def test_replayed_answers_over_a_socket_match_the_files(serve, tree) -> None:
    server = serve(App(tree))
    targets = ["/files/k64.bin", batch_target(["k64.bin"]), batch_target(["k20.bin", "k20.bin"]), "/files/a.txt"]
    with Client(server.port) as c:
        for target in targets:
            answers = [c.get(target) for _ in range(4)]
            assert all(same_but_date(answers[0], r) for r in answers[1:])
            if target.startswith("/files/"):
                assert answers[-1].body == FILES[target[len("/files/"):]]
            else:
                assert [part for _, part in parse_multipart(answers[-1])] == [
                    FILES[p] for p in (["k64.bin"] if "k64" in target else ["k20.bin", "k20.bin"])
                ]
    assert len(server.worker.replays) == len(targets)


def test_a_file_replaced_while_a_client_repeats_never_mixes_versions(serve, tmp_path) -> None:
    # Two versions of one path of the same size, swapped by rename (an atomic deploy) while a
    # client asks again and again: every answer is one whole version with that version's ETag.
    versions = [os.urandom(64 * 1024), os.urandom(64 * 1024)]
    root = make_root(tmp_path, {"v.bin": versions[0]})
    server = serve(App(root))
    stop = threading.Event()

    def writer() -> None:
        i = 0
        while not stop.is_set():
            i += 1
            (root / "v.tmp").write_bytes(versions[i % 2])
            os.replace(root / "v.tmp", root / "v.bin")
            time.sleep(0.003)

    thread = threading.Thread(target=writer)
    thread.start()
    etags: dict[str, bytes] = {}
    try:
        with Client(server.port) as c:
            deadline = time.monotonic() + 2.0
            while time.monotonic() < deadline:
                resp = c.get("/files/v.bin")
                assert resp.status == 200 and resp.body in versions
                assert etags.setdefault(resp.header("etag"), resp.body) == resp.body
    finally:
        stop.set()
        thread.join()
    assert len(etags) > 2  # the server saw the changes


def test_switched_off_nothing_is_remembered(serve, tree, monkeypatch) -> None:
    monkeypatch.setenv("AXON_NO_REPLAY", "1")  # as `axon serve --no-replay` sets ServerConfig.replay
    app = App(tree)
    called = counted(app)
    server = serve(app)
    with Client(server.port) as c:
        answers = [c.get("/files/a.txt") for _ in range(3)] + [c.get("/api/health") for _ in range(3)]
    assert [r.status for r in answers] == [200] * 6 and answers[0].body == FILES["a.txt"]
    assert called == ["/files/a.txt"] * 3 and len(server.worker.replays) == 0


def test_more_than_one_chunk_to_read_is_never_remembered(serve, tree) -> None:
    # 200 KiB goes by the async sendfile path; on loopback it often finishes without waiting,
    # yet sending it again through the one-write path could hold it all for a slow reader.
    server = serve(App(tree))
    with Client(server.port) as c:
        answers = [c.get(t) for t in ["/files/k200.bin", batch_target(["k200.bin"])] for _ in range(3)]
    assert all(r.status == 200 for r in answers) and answers[-4].body == FILES["k200.bin"]
    assert len(server.worker.replays) == 0


def test_a_slow_reader_gets_replayed_answers_whole(serve, tree) -> None:
    # The client asks again and again without reading: the server's socket fills, a sendfile
    # sends part of a 64 KiB file, the rest is read and queued in the transport, the closing
    # boundary follows it in order, and the next reads are answered once it drained.
    server = serve(App(tree))
    c = slow_client(server.port, rcvbuf=4096)
    request = f"GET {batch_target(['k64.bin'])} HTTP/1.1\r\nHost: t\r\n\r\n".encode()
    asks = 120  # 7.5 MiB: more than the socket buffers hold
    try:
        for _ in range(asks):
            c.send(request)
            time.sleep(0.002)  # one request a read, as a client waiting on each would send them
        parts = [parse_multipart(c.response()) for _ in range(asks)]
    finally:
        c.close()
    assert all([part for _, part in p] == [FILES["k64.bin"]] for p in parts)
