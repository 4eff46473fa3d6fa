"""What axon serve sends past the App (server/shortcuts.py): remembered heads of repeatable
routes, by target and Accept, with their files opened anew; over real sockets."""

from __future__ import annotations

import os
import shutil
import time
from pathlib import Path

import pytest
from conftest import FILES, Client, batch_target, counted, parse_multipart, wait_for, shared_app

from axon import App, Request
from axon.server.config import ServerConfig
from axon.server.shortcuts import Remembered
from axon.response import Response


@pytest.fixture
def tree(tmp_path: Path) -> Path:
    root = tmp_path / "root"
    root.mkdir()
    for name in ("a.txt", "b.bin", "small/f01.bin", "small/f02.bin"):
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_bytes(FILES[name])
    return root


def _asked(c: Client, target: str, n: int, **headers: str) -> list:
    """``n`` GETs of ``target``, each with a header that changes (as real clients' do)."""
    return [c.get(target, {"X-Request-Id": f"{time.monotonic_ns()}-{i}", **headers}) for i in range(n)]


def test_a_file_asked_again_with_other_headers_is_sent_past_the_app(serve, tree) -> None:
    app = shared_app(tree)
    called = counted(app)
    server = serve(app)
    with Client(server.port) as c:
        answers = _asked(c, "/files/a.txt", 5)
    assert [r.body for r in answers] == [FILES["a.txt"]] * 5
    assert called == ["/files/a.txt"] * 2  # the second sight remembers; the rest go past the App
    first = answers[0]
    for r in answers[1:]:
        assert r.status == 200 and r.header("ETag") == first.header("ETag")
        assert r.header("Content-Length") == str(len(FILES["a.txt"]))
        assert r.header("Last-Modified") == first.header("Last-Modified")


def test_a_batch_is_remembered_by_target_and_accept(serve, tree) -> None:
    app = shared_app(tree)
    called = counted(app)
    server = serve(app)
    target = batch_target(["small/f01.bin", "small/f02.bin", "small/f01.bin"])
    with Client(server.port) as c:
        mixed = _asked(c, target, 4)
        tars = _asked(c, target, 4, Accept="application/x-tar")
    for r in mixed:
        assert [body for _, body in parse_multipart(r)] == [FILES["small/f01.bin"], FILES["small/f02.bin"],
                                                             FILES["small/f01.bin"]]
    assert {r.header("Content-Type") for r in tars} == {"application/x-tar"}
    assert len({r.body for r in tars}) == 1 and FILES["small/f02.bin"] in tars[0].body
    assert len(called) == 4  # two sights of each (target, Accept)


def test_a_changed_file_is_answered_anew(serve, tree) -> None:
    app = shared_app(tree)
    called = counted(app)
    server = serve(app)
    with Client(server.port) as c:
        _asked(c, "/files/a.txt", 3)
        (tree / "a.txt").write_bytes(b"changed in place, same path\n")  # in place: the fstat sees it
        after = _asked(c, "/files/a.txt", 3)
        os.replace(tree / "b.bin", tree / "a.txt")  # renamed over
        renamed = _asked(c, "/files/a.txt", 1)
        os.remove(tree / "a.txt")
        gone = _asked(c, "/files/a.txt", 1)
    assert [r.body for r in after] == [b"changed in place, same path\n"] * 3
    assert renamed[0].body == FILES["b.bin"]
    assert gone[0].status == 404
    assert len(called) >= 3 + 2  # each change was the App's to answer


def test_ranges_and_preconditions_are_the_apps(serve, tree) -> None:
    app = shared_app(tree)
    called = counted(app)
    server = serve(app)
    with Client(server.port) as c:
        etag = _asked(c, "/files/b.bin", 3)[0].header("ETag")
        before = len(called)
        ranged = c.get("/files/b.bin", {"Range": "bytes=0-9"})
        fresh = c.get("/files/b.bin", {"If-None-Match": etag})  # type: ignore[dict-item]
        head = c.request("HEAD", "/files/b.bin")
    assert (ranged.status, ranged.body) == (206, FILES["b.bin"][:10])
    assert fresh.status == 304 and fresh.body == b""
    assert head.status == 200 and head.body == b""
    assert called[before:] == ["/files/b.bin"] * 3


def test_only_get_is_remembered_a_post_calls_its_handler_every_time(serve, tree) -> None:
    app = shared_app(tree)
    calls: list[str] = []

    @app.route("/mine", methods=["GET", "POST", "DELETE"], blocking=False, repeatable=True)
    def mine(request: Request) -> Response:
        calls.append(request.method)
        return app.send_file(request, "a.txt")

    server = serve(app)
    with Client(server.port) as c:
        for _ in range(4):
            assert c.request("POST", "/mine").body == FILES["a.txt"]
            assert c.request("DELETE", "/mine").body == FILES["a.txt"]
        assert [r.body for r in _asked(c, "/mine", 4)] == [FILES["a.txt"]] * 4
    assert calls == ["POST", "DELETE"] * 4 + ["GET"] * 2


def test_what_goes_past_the_app_is_counted_and_recorded_as_the_app_would(serve, tree) -> None:
    app = shared_app(tree)
    seen: list[tuple] = []
    app.records.attach(type("Reader", (), {"read": lambda self, r: seen.extend(r), "flush": lambda self: None})())
    called = counted(app)
    server = serve(app)
    with Client(server.port) as c:
        _asked(c, "/files/a.txt?v=1", 4, **{"X-Forwarded-For": "203.0.113.9"})
    # Recorded right after the answer is written: the client may read it first.
    assert wait_for(lambda: (app.records.drain(), len(seen) == 4)[1])
    assert called == ["/files/a.txt"] * 2  # two by the App, two past it
    fields = [(r[1], r[2], r[3], r[4], r[5], r[6], r[8], r[9]) for r in seen]
    assert fields == [("GET", "/files/a.txt", "v=1", 200, len(FILES["a.txt"]), 1, "203.0.113.9", None)] * 4
    assert all(0 <= r[7] < 1 for r in seen)


def test_nothing_goes_past_the_app_while_a_handler_wants_each_request(serve, tree) -> None:
    import logging

    app = shared_app(tree)
    handler = logging.Handler()
    handler.emit = lambda record: None  # type: ignore[method-assign]
    access = logging.getLogger("axon.access")
    level = access.level
    access.setLevel(logging.INFO)
    access.addHandler(handler)
    try:
        called = counted(app)
        server = serve(app)
        with Client(server.port) as c:
            _asked(c, "/files/a.txt", 4)
    finally:
        access.removeHandler(handler)
        access.setLevel(level)
    assert called == ["/files/a.txt"] * 4


def test_a_route_added_while_serving_forgets_what_was_remembered(serve, tree) -> None:
    app = shared_app(tree)
    server = serve(app)
    with Client(server.port) as c:
        _asked(c, "/files/a.txt", 3)
        app.add_route("/files/a.txt", lambda request: "mine", blocking=False)
        server.call(server.worker._sweep)
        assert c.get("/files/a.txt").body == b"mine"


def test_a_flood_of_distinct_targets_stays_within_the_bounds(serve, tree) -> None:
    """Many distinct batches, each asked twice: heads stay within their count and bytes, and the
    worker holds no more descriptors than its open-file cache's bound."""
    pool = tree / "pool"
    pool.mkdir()
    for i in range(300):
        (pool / f"{i}.bin").write_bytes(b"%d" % i)
    app = shared_app(tree, ServerConfig(file_cache=64))
    server = serve(app, file_cache=64)
    remembered = server.worker.shortcuts.remembered
    remembered.size, remembered.budget = 50, 40_000
    before = len(os.listdir("/proc/self/fd"))
    with Client(server.port) as c:
        for n in range(120):
            target = batch_target([f"pool/{(n * 7 + k) % 300}.bin" for k in range(16)])
            for _ in range(2):
                assert c.get(target, {"X-Request-Id": str(n)}).status == 200
    assert len(remembered) <= 50 and remembered.cost <= 40_000
    assert len(os.listdir("/proc/self/fd")) - before <= 64 + 8  # the cache's bound, and a few of the test's


def test_the_remembered_table_evicts_by_count_and_bytes(tree) -> None:
    app = shared_app(tree)
    table = Remembered(size=3, budget=10_000)

    def remember(target: bytes) -> None:
        for _ in range(2):  # remembered on the second sight
            response = app.send_file(Request("GET", "/files/a.txt"), "a.txt")
            table.remember((target, None), response, "/files/a.txt", "")
            response.close()

    for i in range(5):
        remember(b"/t%d" % i)
    assert [key[0] for key in table.heads] == [b"/t2", b"/t3", b"/t4"]
    table.budget = table.cost - 1
    remember(b"/t5")
    assert len(table) == 2 and table.cost <= table.budget


def test_a_remembered_head_leaves_the_collector_nothing_to_walk(tree) -> None:
    """A worker keeps thousands of heads, which each full collection would walk: a head is kept
    untracked (axon.untracked), and its paths, versions and template are tuples the collector
    stops tracking by itself."""
    import gc

    app = shared_app(tree)
    table = Remembered()
    for target, files in ((b"/one", ["a.txt"]), (b"/two", ["a.txt", "b.bin"])):
        for _ in range(2):
            response = app.send_batch(Request("GET", "/api/stream-files"), files) if len(files) > 1 else (
                app.send_file(Request("GET", "/files/a.txt"), "a.txt"))
            table.remember((target, None), response, target.decode(), "")
            response.close()
    assert len(table) == 2
    for _ in range(2):  # a tuple of tuples: the inner ones are untracked first
        gc.collect()
    for head in table.heads.values():
        assert not any(map(gc.is_tracked, (head, head.paths, head.versions, head.template))), head.paths


def test_a_recalled_head_moves_up_the_order_once_a_second(tree, monkeypatch) -> None:
    """The LRU order is kept to a second (REORDER_SECONDS): a head recalled again within a second
    of its last move stays where it is; one recalled later goes to the recent end."""
    from axon.server import shortcuts

    now = [1000.0]
    monkeypatch.setattr(shortcuts, "monotonic", lambda: now[0])
    app = shared_app(tree)
    table = Remembered(size=3, budget=10_000)

    def remember(target: bytes) -> None:
        for _ in range(2):
            response = app.send_file(Request("GET", "/files/a.txt"), "a.txt")
            table.remember((target, None), response, "/files/a.txt", "")
            response.close()

    def recall(target: bytes) -> None:
        found = table.recall((target, None), app.store.open, lambda paths: [None] * len(paths))
        assert found is not None
        for f in found[1].files:
            f.close()

    for target in (b"/t0", b"/t1", b"/t2"):
        remember(target)
    recall(b"/t0")  # within the second it was made: not moved
    assert [key[0] for key in table.heads] == [b"/t0", b"/t1", b"/t2"]
    now[0] += shortcuts.REORDER_SECONDS
    recall(b"/t0")  # a second later: the most recent
    assert [key[0] for key in table.heads] == [b"/t1", b"/t2", b"/t0"]
    remember(b"/t3")  # the least recently used goes
    assert [key[0] for key in table.heads] == [b"/t2", b"/t0", b"/t3"]


def test_an_answer_of_trusted_files_is_made_once_while_they_stay_the_same(tree) -> None:
    """A remembered head of one file the shared files trust (its bytes in memory) is answered by
    the answer made last of that file's version, which the version's object keeps (it goes with
    the version); another object makes it anew, another version forgets the head."""
    import zlib

    from axon.storage.local import TrustedFile

    app = shared_app(tree)
    table = Remembered()
    key = (b"/files/a.txt", None)
    for _ in range(2):  # remembered on the second sight
        response = app.send_file(Request("GET", "/files/a.txt"), "a.txt")
        table.remember(key, response, "/files/a.txt", "")
        response.close()
    data = FILES["a.txt"]
    version = (*table.heads[key].versions[0][:5], zlib.crc32(data))
    table.heads[key].versions = (version,)  # as remembered from the trusted file's bytes

    def trusted(token: tuple = version) -> TrustedFile:
        return TrustedFile("a.txt", token, data, "a.txt", "text/plain")

    same = trusted()
    first = table.recall(key, app.store.open, lambda paths: [same])
    again = table.recall(key, app.store.open, lambda paths: [same])
    assert first is not None and again is not None
    assert first[1].files == [] and data in first[1].body
    assert again[1] is first[1]  # made once
    assert same.answer == (table.heads[key], first[1])  # kept by the version's object
    other = table.recall(key, app.store.open, lambda paths: [trusted()])  # an equal version, another object
    assert other is not None and other[1] is not first[1] and other[1].body == first[1].body
    changed = trusted((*version[:5], version[5] ^ 1))
    assert table.recall(key, app.store.open, lambda paths: [changed]) is None
    assert len(table) == 0 and changed.answer is None  # forgotten, nothing made of the new version


def test_an_answer_of_several_trusted_files_is_made_once_while_they_stay_the_same(tree) -> None:
    """A head of several trusted files keeps the answer made last (one for the table) while the
    shared files give the same objects; another object of any of them makes it anew."""
    import zlib

    from axon.storage.local import TrustedFile

    app = shared_app(tree)
    table = Remembered()
    paths = ["a.txt", "small/f01.bin"]
    key = (b"/api/stream-files?file1=a.txt&file2=small/f01.bin", None)
    for _ in range(2):  # remembered on the second sight
        response = app.send_batch(Request("GET", "/api/stream-files"), paths)
        table.remember(key, response, "/api/stream-files", "")
        response.close()
    head = table.heads[key]
    made = []
    for i, path in enumerate(paths):
        data = FILES[path]
        version = (*head.versions[i][:5], zlib.crc32(data))  # as from the trusted file's bytes
        head.versions = (*head.versions[:i], version, *head.versions[i + 1:])
        made.append(TrustedFile(path, version, data, path, "text/plain"))
    first = table.recall(key, app.store.open, lambda p: list(made))
    again = table.recall(key, app.store.open, lambda p: list(made))
    assert first is not None and again is not None and again[1] is first[1] and first[1].files == []
    made[1] = TrustedFile(paths[1], head.versions[1], FILES[paths[1]], paths[1], "text/plain")
    other = table.recall(key, app.store.open, lambda p: list(made))
    assert other is not None and other[1] is not first[1] and other[1].body == first[1].body


def test_a_copy_of_the_tree_is_a_new_version(serve, tree) -> None:
    """Same bytes, same size, another inode and mtime: the App answers it with its own ETag."""
    app = shared_app(tree)
    server = serve(app)
    with Client(server.port) as c:
        tags = {r.header("ETag") for r in _asked(c, "/files/a.txt", 3)}
        shutil.copy(tree / "a.txt", tree / "a.copy")
        os.replace(tree / "a.copy", tree / "a.txt")
        tags_after = {r.header("ETag") for r in _asked(c, "/files/a.txt", 3)}
    assert len(tags) == 1 and len(tags_after) == 1 and tags != tags_after


def test_what_is_not_sent_at_once_or_has_no_version_or_a_long_key_is_not_remembered(serve, tree) -> None:
    (tree / "big.bin").write_bytes(b"x" * 300_000)  # more to read than one write takes
    app = shared_app(tree)
    called = counted(app)
    server = serve(app)
    with Client(server.port) as c:
        assert [len(r.body) for r in _asked(c, "/files/big.bin", 3)] == [300_000] * 3
        long = "/files/a.txt?" + "q" * 2000  # /files/ ignores the query: any public file, any key
        assert [r.body for r in _asked(c, long, 3)] == [FILES["a.txt"]] * 3
    assert called == ["/files/big.bin"] * 3 + ["/files/a.txt"] * 3
    assert len(server.worker.shortcuts.remembered) == 0


def test_a_source_whose_files_have_no_version_is_answered_by_the_app(tree) -> None:
    class Unversioned:  # a File of a source that cannot vouch for its version (an object store's)
        path, size, data, version = "a.txt", 3, b"abc", None

        def segment(self, start: int, stop: int) -> bytes:
            return self.data[start:stop]

        def close(self) -> None:
            pass

    table = Remembered()
    for _ in range(2):
        response = Response(200, [("Content-Type", "text/plain")], [b"abc"], files=[Unversioned()])
        table.remember((b"/x", None), response, "/x", "")
    assert len(table) == 0
