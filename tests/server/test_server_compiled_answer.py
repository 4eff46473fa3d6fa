"""The compiled answer (``simplehead.answerer``) against the pure path, over real sockets.

Two servers over one root, one with the compiled module (the reader and the answer) and one
without (``AXON_PURE_PYTHON=1``), are asked the same requests in the same order; their answers
must be the same bytes but the ``Date`` line. ``answered_in_c`` counts the requests the compiled
one answered without the Python path (``_complete`` not called), so that a test also fails when
the compiled answer never answers. The open-file cache keeps a file's bytes once its ctime is
``SETTLED_NS`` old; the tests make every file settled, so that a file just written is trusted at once (what
two seconds of waiting would give).
"""

from __future__ import annotations

import os
import re
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest
from conftest import Client, Resp, head_reader_set, shared_app, wait_for
from test_server_freshness import VALID, mapped, rewrite

from axon.server import reading, simplehead
from axon.server.config import ServerConfig
from axon.server.worker import ThreadServer
from axon.storage import FILE_CACHE_VALID, file_cache

pytestmark = [
    pytest.mark.both_head_readers,
    pytest.mark.skipif(simplehead.parser() is None, reason="the compiled module is not built here"),
]

FILES = {"a.bin": os.urandom(4096), "b.bin": os.urandom(8192), "c.bin": os.urandom(4096), "d.bin": os.urandom(4096),
         "e.bin": os.urandom(64 * 1024)}
TARGETS = ["/files/{}", "/api/stream-files?file1={}"]
#: Enough requests of one target that the last ones find it remembered and trusted (a settled
#: file's one-file head: from the third, see the test below).
WARM = 8


@pytest.fixture
def served(request: pytest.FixtureRequest, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[tuple[Path, dict[str, ThreadServer], list]]:
    monkeypatch.setattr(file_cache, "SETTLED_NS", -(10**18))  # settled at once (test_server_freshness's)
    for name, data in FILES.items():
        (tmp_path / name).write_bytes(data)
    python_answers: list = []  # the worker of each request the Python path answered
    complete = reading.RequestReading._complete

    def counted(self, ex, method):  # noqa: ANN001, ANN202
        python_answers.append(self.worker)
        return complete(self, ex, method)

    monkeypatch.setattr(reading.RequestReading, "_complete", counted)
    valid = getattr(request, "param", FILE_CACHE_VALID)
    with servers(tmp_path, valid) as both:
        yield tmp_path, both, python_answers


@contextmanager
def servers(root: Path, valid: float) -> Iterator[dict[str, ThreadServer]]:
    made: dict[str, ThreadServer] = {}
    try:
        for kind in ("compiled", "pure"):
            with head_reader_set(kind):  # read when the worker is made
                config = ServerConfig(port=0, file_cache_valid=valid)
                made[kind] = ThreadServer(shared_app(root, config), config).start()
        assert made["compiled"].worker.answer is not None and made["pure"].worker.answer is None
        yield made
    finally:
        for server in made.values():
            server.stop()


def _bytes(resp: Resp) -> tuple:
    return resp.status, [(k, v) for k, v in resp.headers if k.lower() != "date"], resp.body


class Pair:
    """One connection to each server; ``ask`` sends both the same request and checks that the
    answers are alike (Date aside), and says how many the compiled one answered in C."""

    def __init__(self, both: dict[str, ThreadServer], python_answers: list) -> None:
        self.clients = {kind: Client(server.port) for kind, server in both.items()}
        self.worker = both["compiled"].worker
        self.python_answers = python_answers
        self.in_c = 0

    def ask(self, target: str, headers: dict[str, str] | None = None, method: str = "GET") -> Resp:
        before = self.python_answers.count(self.worker)
        compiled = self.clients["compiled"].request(method, target, headers)
        self.in_c += self.python_answers.count(self.worker) == before
        pure = self.clients["pure"].request(method, target, headers)
        assert _bytes(compiled) == _bytes(pure), target
        return compiled

    def warm(self, target: str) -> int:
        """Ask ``target`` ``WARM`` times; how many the compiled answer took."""
        before = self.in_c
        for _ in range(WARM):
            self.ask(target)
        return self.in_c - before

    def close(self) -> None:
        for client in self.clients.values():
            client.close()


@contextmanager
def pair(both: dict[str, ThreadServer], python_answers: list) -> Iterator[Pair]:
    made = Pair(both, python_answers)
    try:
        yield made
    finally:
        made.close()


@pytest.mark.parametrize("target", TARGETS)
def test_a_trusted_file_is_answered_alike(served, target) -> None:
    _root, both, python_answers = served
    with pair(both, python_answers) as p:
        assert p.warm(target.format("a.bin")) >= 1  # the last ones: remembered and trusted
        before = p.in_c
        for name in ("a.bin", "b.bin", "a.bin", "e.bin"):  # e.bin: a body past one write_chunk (T3)
            assert p.warm(target.format(name)) >= 1
        resp = p.ask(target.format("b.bin"))
        assert resp.status == 200 and FILES["b.bin"] in resp.body
        assert p.in_c - before >= 5


@pytest.mark.parametrize("target", TARGETS)
def test_a_settled_file_is_answered_in_c_from_its_third_request(served, target) -> None:
    # Its first request opens it; its second keeps its bytes with the kernel watching, and
    # remembers its head with the answer on the trusted version: the compiled answer takes the rest.
    _root, both, python_answers = served
    with pair(both, python_answers) as p:
        for _ in range(2):
            p.ask(target.format("c.bin"))
        assert p.in_c == 0
        for _ in range(3):
            assert p.ask(target.format("c.bin")).status == 200
        assert p.in_c == 3


def test_what_it_holds_at_once_is_what_the_writer_holds_at_once() -> None:
    from axon.server.answer import fits_one_write

    for chunk in (16 * 1024, 64 * 1024, 1024 * 1024):
        most = simplehead.held_at_once(chunk)
        assert fits_one_write(most, 0, chunk) and not fits_one_write(most + 1, 0, chunk)


def test_a_slot_of_another_class_is_not_read_in_place() -> None:
    # The compiled reads go straight to a slot's place only when the slot belongs to the object's
    # class or a base of it; a member taken from another class (whose offset means nothing here)
    # is refused by Python's own lookup, and so here too, instead of reading another object's memory.
    compiled = pytest.importorskip("axon.server._simplehead")

    class Wide:
        __slots__ = ("a", "b", "c", "d", "e", "f", "g", "h", "_held")

    class Other:  # the same layout: Wide's _held sits where an Other keeps one of its own
        __slots__ = ("a", "b", "c", "d", "e", "f", "g", "h", "y")
        _held = Wide.__dict__["_held"]

    other = Other()
    for name in Other.__slots__:
        setattr(other, name, [])
    with pytest.raises(TypeError):
        other._held  # noqa: B018 - Python's lookup, for comparison
    for _ in range(3):  # learnt on the first, then from the site
        with pytest.raises(TypeError):
            compiled.read(other, "_held")
    wide = Wide()
    wide._held = held = []
    assert compiled.read(wide, "_held") is held  # its own class's member: read in place


def test_a_slot_read_in_place_follows_its_class_when_it_changes() -> None:
    # A site keeps a slot's place while its class's version stands; a class changed since (here
    # the attribute replaced by a property) is looked up again, as Python looks it up.
    compiled = pytest.importorskip("axon.server._simplehead")

    class Kept:
        __slots__ = ("value",)

    kept = Kept()
    kept.value = "slot"
    assert compiled.read(kept, "value") == "slot"
    slot = Kept.__dict__["value"]
    Kept.value = property(lambda self: "property of " + slot.__get__(self))
    assert compiled.read(kept, "value") == kept.value == "property of slot"
    del kept.__class__.value  # the slot's member is gone: Python's lookup says so too
    with pytest.raises(AttributeError):
        kept.value  # noqa: B018
    with pytest.raises(AttributeError):
        compiled.read(kept, "value")


def test_a_health_probe_is_answered_alike(served) -> None:
    _root, both, python_answers = served
    with pair(both, python_answers) as p:
        for method in ("GET", "GET", "HEAD", "HEAD", "GET"):
            assert p.ask("/api/health", method=method).status == 200
        assert p.in_c >= 3  # the first of each method (a second's Date line) is made in Python


@pytest.mark.parametrize("target", TARGETS)
def test_a_file_changed_on_disk_is_answered_with_its_new_bytes(served, target) -> None:
    """Written in place (the same size): the kernel's news is queued before the write returns,
    so the very next request must carry the new bytes (the README's freshness table)."""
    root, both, python_answers = served
    url = target.format("c.bin")
    with pair(both, python_answers) as p:
        assert p.warm(url) >= 1
        new = os.urandom(4096)
        with open(root / "c.bin", "r+b") as f:
            f.write(new)
        resp = p.ask(url)
        assert resp.status == 200 and new in resp.body and FILES["c.bin"] not in resp.body
        assert p.warm(url) >= 1  # trusted again at its new version


@pytest.mark.parametrize("target", TARGETS)
def test_a_deleted_file_is_not_answered(served, target) -> None:
    root, both, python_answers = served
    url = target.format("d.bin")
    with pair(both, python_answers) as p:
        assert p.warm(url) >= 1
        (root / "d.bin").unlink()
        assert p.ask(url).status == 404
        assert p.ask(url).status == 404


@pytest.mark.parametrize("served", [VALID], indirect=True)
def test_bytes_no_news_told_of_are_served_anew_once_the_window_closes(served) -> None:
    """Bytes rewritten through a shared ``mmap`` raise no inotify event and move no time: only
    the trust window (``--file-cache-valid``) ends their trust, on both paths."""
    root, both, python_answers = served
    url = "/files/m.bin"
    old, new = b"o" * 4096, b"n" * 4096
    with mapped(root / "m.bin", old) as mapping, pair(both, python_answers) as p:
        assert p.warm(url) >= 1
        rewrite(root / "m.bin", mapping, new)
        time.sleep(VALID + 0.1)
        assert p.ask(url).body == new


def test_range_and_preconditions_go_to_the_app(served) -> None:
    _root, both, python_answers = served
    url = "/files/a.bin"
    with pair(both, python_answers) as p:
        assert p.warm(url) >= 1
        etag = p.ask(url).header("etag")
        before = p.in_c
        ranged = p.ask(url, {"Range": "bytes=0-99"})
        assert ranged.status == 206 and ranged.body == FILES["a.bin"][:100]
        assert p.ask(url, {"If-None-Match": etag}).status == 304
        assert p.ask(url, {"If-Match": '"other"'}).status == 412
        assert p.in_c == before  # none of them in C


def test_a_head_not_remembered_for_this_accept_goes_to_the_app(served) -> None:
    """The same target with another ``Accept`` is another answer (a zip): the remembered head of
    the multipart one must not answer it."""
    _root, both, python_answers = served
    url = "/api/stream-files?file1=a.bin"
    with pair(both, python_answers) as p:
        assert p.warm(url) >= 1
        before = p.in_c
        zipped = p.ask(url, {"Accept": "application/zip"})
        assert zipped.status == 200 and zipped.header("content-type") == "application/zip"
        assert p.in_c == before
        assert p.ask("/files/b.bin").status == 200  # a first sight
        assert p.in_c == before


def test_two_requests_in_one_read_are_answered_in_order(served) -> None:
    """A read holding more than one request goes to the Python path whole."""
    _root, both, python_answers = served
    url = "/files/a.bin"
    with pair(both, python_answers) as p:
        assert p.warm(url) >= 1
        request = f"GET {url} HTTP/1.1\r\nHost: t\r\n\r\n".encode()
        answers = {}
        for kind, client in p.clients.items():
            client.send(request * 2)
            answers[kind] = [_bytes(client.response()) for _ in range(2)]
        assert answers["compiled"] == answers["pure"]
        assert all(a[0] == 200 and a[2] == FILES["a.bin"] for a in answers["compiled"])


def test_the_start_line_says_which_path_answers(monkeypatch) -> None:
    monkeypatch.delenv("AXON_PURE_PYTHON", raising=False)
    monkeypatch.delenv("AXON_NO_COMPILED_ANSWER", raising=False)
    assert simplehead.answerer() is not None
    assert "trusted files" in simplehead.describe()
    monkeypatch.setenv("AXON_NO_COMPILED_ANSWER", "1")
    assert simplehead.answerer() is None and simplehead.parser() is not None
    assert "AXON_NO_COMPILED_ANSWER=1" in simplehead.describe()
    monkeypatch.setenv("AXON_PURE_PYTHON", "1")
    monkeypatch.delenv("AXON_NO_COMPILED_ANSWER")
    assert simplehead.answerer() is None


def test_the_date_line_is_the_one_of_the_second(served) -> None:
    """The compiled answer completes a head with the worker's ``Date`` line of now."""
    _root, both, python_answers = served
    with pair(both, python_answers) as p:
        p.warm("/files/a.bin")
        resp = p.clients["compiled"].get("/files/a.bin")
        assert re.fullmatch(r"\w{3}, \d\d \w{3} \d{4} \d\d:\d\d:\d\d GMT", resp.header("date") or "")


def test_every_answer_is_recorded_as_the_python_path_records_it(served) -> None:
    """Metrics and the access log read the records: one for each request, the same fields."""
    _root, both, python_answers = served
    seen: dict[str, list] = {kind: [] for kind in both}
    for kind, server in both.items():
        reader = type("Reader", (), {"read": lambda self, r, into=seen[kind]: into.extend(r), "flush": lambda self: None})
        server.worker.app.records.attach(reader())
    with pair(both, python_answers) as p:
        for _ in range(2):
            p.ask("/files/b.bin", {"X-Forwarded-For": "203.0.113.9"})  # the App's answers, before any in C
        assert p.warm("/files/a.bin") >= 1
    for kind, server in both.items():
        records = server.worker.app.records
        assert wait_for(lambda: (records.drain(), len(seen[kind]) == 2 + WARM)[1]), kind
    fields = {kind: [(r[1], r[2], r[3], r[4], r[5], r[6], r[8]) for r in got] for kind, got in seen.items()}
    assert fields["compiled"] == fields["pure"]
    assert fields["compiled"][-1] == ("GET", "/files/a.bin", "", 200, 4096, 1, "127.0.0.1")


@pytest.mark.slow
@pytest.mark.parametrize("served", [2.0], indirect=True)
def test_a_file_in_use_stays_the_compiled_answers_past_its_window(served) -> None:
    """The sweep checks a file in use ahead of its window's end (FileCache.refresh), so no request
    finds the window past and goes to the Python path for the check: asked all along for more than
    two windows, a warm file is answered in C every time."""
    _root, both, python_answers = served
    url = "/files/a.bin"
    with pair(both, python_answers) as p:
        assert p.warm(url) >= 1
        before, asked = p.in_c, 0
        ends = time.monotonic() + 2 * 2.0 + 0.5
        while time.monotonic() < ends:
            assert p.ask(url).body == FILES["a.bin"]
            asked += 1
            time.sleep(0.05)
        assert p.in_c - before == asked
