"""A connection's states and the clock each runs, driven in-process on a fake transport."""

from __future__ import annotations

from test_server_protocol import gated_app

import asyncio
import inspect
import re

import pytest

from axon.server import protocol, reading
from axon.server.state import ANSWERING, CLOCKS, CLOSING, READING, TRANSITIONS, BadTransition, State


def clocks(h) -> dict[str, float]:
    w = h.worker
    return {"head": w.head_deadline, "idle": w.idle_deadline, "write": w.write_deadline}


def clock(h) -> str | None:
    """Which of the worker's clocks the connection's deadline is (None: no clock runs)."""
    deadline = h.proto.deadline
    return None if deadline is None else next(k for k, v in clocks(h).items() if v == deadline)


def test_a_request_walks_idle_head_body_answer_idle(harness, root) -> None:
    app, gate = gated_app(root)
    h = harness(app)
    assert (h.proto.state, clock(h)) == (State.NEW, "head")  # the first request comes as fast as a head
    h.receive(b"GET /slow HTTP/1.1\r\nContent-")
    assert (h.proto.state, clock(h)) == (State.HEAD, "head")
    h.receive(b"Length: 4\r\n\r\nab")
    assert (h.proto.state, clock(h)) == (State.BODY, "idle")
    h.receive(b"cd")
    assert (h.proto.state, clock(h)) == (State.ANSWER, None)  # the handler takes its time
    gate.set()
    h.pump()
    assert (h.proto.state, clock(h)) == (State.IDLE, "idle")
    assert h.responses()[0].body == b"slow"


def test_a_request_answered_within_its_read_goes_straight_to_idle(harness) -> None:
    h = harness()
    h.receive(b"GET /api/health HTTP/1.1\r\nHost: t\r\n\r\n")  # whole in one read: no HEAD nor BODY between
    assert [r.status for r in h.responses()] == [200]
    assert (h.proto.state, clock(h)) == (State.IDLE, "idle")
    h.receive(b"GET /api/health HTTP/1.1\r\nHo")
    assert (h.proto.state, clock(h)) == (State.HEAD, "head")  # the read ended in a head: its clock runs


def test_the_next_request_after_an_answer_from_bytes_runs_the_header_clock(harness) -> None:
    h = harness()
    h.receive(b"GET /api/health HTTP/1.1\r\n\r\nGET /files/a.txt HTTP/1.1\r\nHo")
    assert len(h.responses()) == 1  # health, answered in the parser's callback
    assert (h.proto.state, clock(h)) == (State.HEAD, "head")
    h.feed(b"st: t\r\n\r\n")
    assert [r.status for r in h.responses()] == [200, 200]
    assert (h.proto.state, clock(h)) == (State.IDLE, "idle")


def test_a_client_that_does_not_read_runs_the_write_clock(harness) -> None:
    h = harness()
    h.proto.pause_writing()  # the transport holds unsent bytes
    h.receive(b"GET /files/a.txt HTTP/1.1\r\n\r\n")
    assert (h.proto.state, clock(h)) == (State.STALLED, "write")
    assert h.transport.out == b""
    h.proto.resume_writing()
    h.pump()
    assert (h.proto.state, clock(h)) == (State.IDLE, "idle")
    assert h.responses()[0].status == 200


def test_the_last_answer_lingers_then_the_connection_is_closed(harness) -> None:
    h = harness()
    h.feed(b"GET /api/health HTTP/1.1\r\nConnection: close\r\n\r\n")
    assert h.proto.state is State.LINGER and h.transport.eof
    h.proto.connection_lost(None)
    assert h.proto.state is State.CLOSED and h.proto.deadline is None


def test_the_last_answer_leaves_under_the_write_clock_before_lingering(harness) -> None:
    """The socket takes only part of the last answer: the rest waits in the transport under the
    write clock (LAST_STALLED), and the lingering close, whose shorter clock ends in an abort
    that would drop it, begins once it left."""
    h = harness()
    write = h.transport.write

    def write_and_fill(data: bytes) -> None:  # the socket is full after this write
        write(data)
        h.proto.pause_writing()

    h.transport.write = write_and_fill
    h.receive(b"GET /api/health HTTP/1.1\r\nConnection: close\r\n\r\n")
    h.loop.run_until_complete(asyncio.sleep(0))  # the wait for it begins
    assert (h.proto.state, h.transport.eof) == (State.LAST_STALLED, False)
    assert clock(h) == "write"
    h.proto.resume_writing()  # the client read it
    h.loop.run_until_complete(asyncio.sleep(0))
    assert h.proto.state is State.LINGER and h.transport.eof
    assert [r.status for r in h.responses()] == [200]


def test_every_state_has_a_clock_and_its_transitions() -> None:
    assert set(CLOCKS) == set(TRANSITIONS) == set(State)
    assert all(State.CLOSED in TRANSITIONS[s] for s in State if s is not State.CLOSED)
    assert TRANSITIONS[State.CLOSED] == set()
    assert all(TRANSITIONS[s] <= CLOSING for s in CLOSING)  # a connection that closes never reads again


def test_what_arrives_is_parsed_kept_or_dropped_by_state() -> None:
    """data_received asks READING, then CLOSING; every other state has an answer pending and
    keeps what arrives: the three sets are the states, once each."""
    pending = ANSWERING - CLOSING
    assert READING | CLOSING | pending == set(State)
    assert not READING & CLOSING and not READING & pending and pending == {State.ANSWER, State.STALLED}


def test_the_table_forbids_most_changes() -> None:
    allowed = sum(len(targets) for targets in TRANSITIONS.values())
    assert allowed < len(State) ** 2 / 2


FORBIDDEN = [(a, b) for a in State for b in State if b not in TRANSITIONS[a]]


@pytest.mark.parametrize(("before", "after"), FORBIDDEN, ids=[f"{a.name}->{b.name}" for a, b in FORBIDDEN])
def test_every_forbidden_change_is_refused(harness, before, after) -> None:
    h = harness()
    h.proto.state = before  # put there by hand: the test of the one method that changes it
    deadline = h.proto.deadline
    with pytest.raises(BadTransition):
        h.proto._to(after)
    assert (h.proto.state, h.proto.deadline) == (before, deadline)


def test_a_transition_the_table_does_not_allow_is_refused(harness) -> None:
    h = harness()
    h.feed(b"GET /api/health HTTP/1.1\r\nConnection: close\r\n\r\n")
    assert h.proto.state is State.LINGER
    with pytest.raises(BadTransition):
        h.proto._to(State.HEAD)  # a closing connection reads no new request
    assert h.proto.state is State.LINGER


def test_a_reason_to_close_while_answering_is_a_state(harness, root) -> None:
    """The worker stopping while an answer is pending makes the connection LAST: nothing more is
    read, the answer says close, and the connection closes after it."""
    app, gate = gated_app(root)
    h = harness(app)
    h.receive(b"GET /slow HTTP/1.1\r\nContent-Length: 4\r\n\r\nabcd")
    assert h.proto.state is State.ANSWER
    h.proto.shutdown()
    assert h.proto.state is State.LAST
    h.receive(b"GET /api/health HTTP/1.1\r\n\r\n")  # not read
    gate.set()
    h.pump()
    responses = h.responses()
    assert [r.status for r in responses] == [200] and responses[0].header("connection") == "close"
    assert h.proto.state is State.LINGER


def test_state_and_clock_are_written_in_one_place() -> None:
    """Every change of state goes through HTTPProtocol._to: no other line assigns either."""
    source = inspect.getsource(protocol.HTTPProtocol) + inspect.getsource(reading.RequestReading)
    body_of_to = inspect.getsource(protocol.HTTPProtocol._to)
    rest = source.replace(body_of_to, "")
    assert re.findall(r"self\.state = ", rest) == ["self.state = "]  # __init__'s first state
    assert re.findall(r"self\.deadline = ", rest) == []
