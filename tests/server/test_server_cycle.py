"""The request cycle (axon/server/cycle.py) on a real loopback socket: a plain handler is answered
inline, without a task; what must wait (an async handler, a blocking one, an answer larger than
one write) becomes one task, answered in order; a repeatable answer is remembered on its second
sight; the worker stopping makes the answer in flight the last."""

from __future__ import annotations

import asyncio
import threading

from conftest import FILES, big_content, counted
from live import Live
from test_server_protocol import gated_app

from axon.app import App, Request
from axon.server.state import State


def test_a_plain_handler_is_answered_inline(root) -> None:
    with Live(App(root)) as conn:
        conn.client.sendall(b"GET /files/a.txt HTTP/1.1\r\n\r\n")
        tasks = []
        create_task = conn.loop.create_task
        conn.loop.create_task = lambda coro, **kw: tasks.append(coro) or create_task(coro, **kw)  # type: ignore[method-assign]
        assert conn.response().body == FILES["a.txt"]
        made = [coro.__qualname__ for coro in tasks if coro.__qualname__ != "sleep"]  # the test's own waits aside
        assert made == [] and conn.proto.cycle.task is None


def test_what_must_wait_is_one_task_answered_in_order(root) -> None:
    app, gate = gated_app(root)
    with Live(app) as conn:
        conn.send(b"GET /slow HTTP/1.1\r\n\r\nGET /files/big.bin HTTP/1.1\r\n\r\nGET /files/a.txt HTTP/1.1\r\n\r\n")
        assert conn.proto.cycle.task is not None and conn.proto.state is State.ANSWER
        gate.set()
        bodies = [conn.response().body for _ in range(3)]
        assert bodies == [b"slow", big_content(root), FILES["a.txt"]]
        conn.run(0.01)
        assert conn.proto.cycle.task is None and conn.proto.state is State.IDLE


def test_a_blocking_handler_runs_in_the_pool(root) -> None:
    app = App(root)
    threads: list[threading.Thread] = []

    @app.route("/where", blocking=True)
    def where(request: Request) -> str:
        threads.append(threading.current_thread())
        return "pool"

    with Live(app) as conn:
        conn.client.sendall(b"GET /where HTTP/1.1\r\n\r\n")
        assert conn.response().body == b"pool"
        assert threads and threads[0] is not threading.main_thread()


def test_a_repeatable_answer_is_remembered_on_its_second_sight(root) -> None:
    app = App(root)
    called = counted(app)
    with Live(app) as conn:
        conn.worker.shortcuts.refresh()
        for _ in range(3):
            conn.client.sendall(b"GET /files/b.bin HTTP/1.1\r\n\r\n")
            assert conn.response().body == FILES["b.bin"]
        assert called == ["/files/b.bin"] * 2  # the third from the remembered head
        assert len(conn.worker.shortcuts.remembered) == 1


def test_an_answer_made_in_a_later_turn_is_remembered_too(root) -> None:
    app = App(root)
    called = counted(app)
    with Live(app) as conn:
        conn.worker.shortcuts.refresh()
        pace = conn.worker.pace
        pace.budget = 0.0  # every turn spent from its first ask on

        def batch_work() -> None:  # asks the turn's clock first in every turn, as a batch would
            pace.must_wait()
            conn.loop.call_soon(batch_work)

        batch_work()
        for _ in range(3):
            conn.client.sendall(b"GET /files/b.bin HTTP/1.1\r\n\r\n")
            assert conn.response().body == FILES["b.bin"]
            assert conn.proto.cycle.task is None  # answered in a later turn, and done
        assert called == ["/files/b.bin"] * 2  # the third from the remembered head
        assert len(conn.worker.shortcuts.remembered) == 1


def test_the_worker_stopping_makes_the_answer_in_flight_the_last(root) -> None:
    app, gate = gated_app(root)
    with Live(app) as conn:
        conn.send(b"GET /slow HTTP/1.1\r\n\r\n")
        conn.proto.shutdown()
        gate.set()
        resp = conn.response()
        assert resp.body == b"slow" and resp.header("connection") == "close"
        assert conn.eof()


def test_requests_past_the_turns_budget_wait_for_a_later_turn_without_a_task(harness) -> None:
    # Small batches pipelined in one read: each asks the turn's budget before it is answered, so
    # a read of many cannot make one long turn (nor can many connections' reads in one turn).
    h = harness()
    h.worker.pace.budget = 0.0  # the turn is spent from its first ask on
    tasks = []
    create_task = h.loop.create_task
    h.loop.create_task = lambda coro, **kw: tasks.append(coro) or create_task(coro, **kw)  # type: ignore[method-assign]
    names = ["a.txt", "b.bin", "a.txt", "b.bin", "a.txt"]
    h.proto.data_received(b"".join(b"GET /api/stream-files?n%d=%s HTTP/1.1\r\n\r\n" % (i, n.encode()) for i, n in enumerate(names)))
    # The first went on and started the turn's clock; the second waits for a later turn in the
    # pace's line, without a task; the others wait behind it on their connection, unparsed by the App.
    assert h.proto.cycle.task is not None and len(h.proto._pipeline) == 3
    assert list(h.worker.pace.waiting) == [h.proto.cycle._go_on]
    assert [coro.__qualname__ for coro in tasks] == []
    h.pump()
    responses = h.responses()
    assert [r.status for r in responses] == [200] * 5
    assert [r.body.count(FILES[n]) for r, n in zip(responses, names)] == [1] * 5  # in order
    assert [coro.__qualname__ for coro in tasks if coro.__qualname__ != "sleep"] == []


def test_a_lost_connection_stops_the_answer_it_was_waiting_for(harness, root) -> None:
    app, gate = gated_app(root)
    h = harness(app)
    h.receive(b"GET /slow HTTP/1.1\r\n\r\n")
    task = h.proto.cycle.task
    assert task is not None and not task.done()
    h.proto.connection_lost(ConnectionResetError())
    h.loop.run_until_complete(asyncio.sleep(0.01))
    assert task.cancelled()  # nobody to answer: not left waiting on the gate


def test_a_lost_connection_leaves_the_turns_line(harness, root) -> None:
    app = App(root)
    app_calls = counted(app)
    h = harness(app)
    h.worker.pace.budget = 0.0
    h.proto.data_received(b"GET /api/stream-files?n=a.txt HTTP/1.1\r\n\r\nGET /api/stream-files?m=b.bin HTTP/1.1\r\n\r\n")
    assert h.proto.cycle.task is not None  # the second waits for a turn
    h.proto.connection_lost(ConnectionResetError())
    h.loop.run_until_complete(asyncio.sleep(0.01))
    # Never answered: nobody is there to read it, and the turn it would have taken is others'.
    assert app_calls == ["/api/stream-files"] and h.proto.cycle.task is None
    assert not h.worker.pace.waiting
