"""The response writer (axon/server/writer.py) on a real loopback socket: every answer is a
prepared answer completed the same way, written at once when it fits one write, else by the
waiting path; slices go by sendfile or are read; a file shorter than planned cuts the connection."""

from __future__ import annotations

import os

import pytest
from conftest import FILES, Closed
from live import Live

from axon.app import App
from axon.http.segments import FileSlice
from axon.response import Response
from axon.server.answer import Prepared, prepare
from axon.server.exchange import Exchange, exchange as new_exchange
from axon.server.wire import frame_head


def exchange(keep_alive: bool = True, http11: bool = True) -> Exchange:
    ex = new_exchange(b"/")
    ex.keep_alive, ex.http11 = keep_alive, http11
    return ex


@pytest.fixture
def live(root):
    made: list[Live] = []

    def make(**config) -> Live:
        conn = Live(App(root), **config)
        made.append(conn)
        return conn

    yield make
    for conn in made:
        conn.close()


def answer_of(body: list, length: int, files=()) -> Prepared:
    return Prepared(frame_head(200, "OK", [("Content-Length", str(length))]), body, length, files)


@pytest.mark.parametrize(("keep_alive", "http11", "connection"), [
    (True, True, None), (False, True, "close"), (True, False, "keep-alive"), (False, False, "close"),
])
def test_every_answer_is_completed_by_one_rule(live, keep_alive, http11, connection) -> None:
    conn = live()
    assert conn.writer.send(answer_of([b"hi"], 2), exchange(keep_alive, http11))
    conn.run()
    resp = conn.response()
    assert (resp.status, resp.body, resp.header("connection")) == (200, b"hi", connection)
    assert resp.header("date") and resp.header("server") == "axon"


def test_an_answer_sent_again_is_made_whole_once_per_date_line(live) -> None:
    conn = live()
    answer = Prepared(frame_head(200, "OK", [("Content-Length", "2")]), [b"ok"], 2, reusable=True)
    conn.writer.send(answer, exchange())
    first = answer.whole
    conn.writer.send(answer, exchange())
    assert answer.whole is first  # the same Date line: not joined again
    conn.worker.date_line = bytes(bytearray(conn.worker.date_line))  # a new second's line: a new object
    conn.writer.send(answer, exchange())
    assert answer.whole is not first
    conn.run()
    assert [conn.response().body for _ in range(3)] == [b"ok"] * 3


def test_an_answer_sent_again_is_made_whole_again_for_another_connection_line(live) -> None:
    """The whole answer is kept by what completes its head (the Date line, keep-alive, HTTP/1.1):
    an exchange that needs another Connection line gets its own, and the next one its own again."""
    conn = live()
    answer = Prepared(frame_head(200, "OK", [("Content-Length", "2")]), [b"ok"], 2, reusable=True)
    for keep_alive, http11 in ((True, True), (True, False), (True, True), (False, True)):
        conn.writer.send(answer, exchange(keep_alive, http11))
    conn.run()
    answers = [conn.response() for _ in range(4)]
    assert [r.header("connection") for r in answers] == [None, "keep-alive", None, "close"]
    assert [r.body for r in answers] == [b"ok"] * 4


def test_a_body_of_bytes_and_slices_is_written_at_once(live, root) -> None:
    conn = live(sendfile=True, sendfile_min=10 * 1024)
    small = os.open(root / "a.txt", os.O_RDONLY)  # read into the write
    chunk = os.open(root / "b.bin", os.O_RDONLY)  # sendfile_min: by sendfile, after the head
    body = [b"<", FileSlice(small, 0, 12), b"|", FileSlice(chunk, 0, 10 * 1024), b">"]
    length = 3 + 12 + 10 * 1024

    class Closing:
        closed = 0

        def close(self) -> None:
            Closing.closed += 1

    assert conn.writer.send(answer_of(body, length, [Closing()]), exchange())
    assert Closing.closed == 1  # sent, then its files closed
    conn.run()
    assert conn.response().body == b"<" + FILES["a.txt"] + b"|" + FILES["b.bin"] + b">"
    os.close(small), os.close(chunk)


@pytest.mark.parametrize("sendfile", [True, False], ids=["sendfile", "copy"])
def test_what_does_not_fit_one_write_takes_the_waiting_path(live, root, sendfile) -> None:
    conn = live(sendfile=sendfile)
    fd = os.open(root / "mid.bin", os.O_RDONLY)
    size = len(FILES["mid.bin"])
    body = [b"[", FileSlice(fd, 0, size), b"]", FileSlice(fd, 0, 10), b"."]
    length = size + 13
    ex = exchange()
    answer = answer_of(body, length)
    assert not conn.writer.send(answer, ex)  # more than one chunk to read: nothing written
    os.fstat(fd)  # and its files left open for the caller
    response = Response(200, [("Content-Length", str(length))], body, length=length)
    task = conn.loop.create_task(conn.writer.respond(response, ex, tried=True))
    assert conn.response().body == b"[" + FILES["mid.bin"] + b"]" + FILES["mid.bin"][:10] + b"."
    assert conn.loop.run_until_complete(task) is True


def test_a_file_shorter_than_planned_cuts_the_connection(live, tmp_path) -> None:
    conn = live()
    path = tmp_path / "short.bin"
    path.write_bytes(b"x" * 100)
    fd = os.open(path, os.O_RDONLY)
    ex = exchange()
    assert conn.writer.send(answer_of([FileSlice(fd, 0, 200)], 200), ex)  # done with: cut
    assert ex.keep_alive is False
    conn.run(0.01)
    with pytest.raises(Closed):
        conn.response()
    os.close(fd)


def test_a_head_that_cannot_be_encoded_is_answered_500(live) -> None:
    conn = live()
    bad = Response(200, [("X-Bad", "a\r\nSet-Cookie: b")], [b"x"], length=1)
    with pytest.raises(Exception, match="CR, LF or NUL"):
        prepare(bad)
    ex = exchange()
    assert not conn.writer.respond_now(bad, ex)
    task = conn.loop.create_task(conn.writer.respond(bad, ex, tried=True))
    resp = conn.response()
    assert resp.status == 500 and resp.header("connection") == "close" and b"Set-Cookie" not in resp.body
    assert conn.loop.run_until_complete(task) is False
