"""What a connection is doing: :class:`State`, with its clock and its transitions in one table.

The state decides which clock runs (the connection's ``deadline``, which the worker's sweep reads
once a second) and what happens when it runs out (``HTTPProtocol.on_timeout``). Every change of
state goes through ``HTTPProtocol._to``, which checks it against :data:`TRANSITIONS` (as h11's
``_state.py`` does) and sets the clock from :data:`CLOCKS`: no other code writes either.
"""

from __future__ import annotations

import enum


class State(enum.Enum):
    """What a connection is doing.

    ========  =========================================  ====================  ===============
    state     the connection is                          clock                 when it runs out
    ========  =========================================  ====================  ===============
    NEW       open, nothing received yet                 header                close
    IDLE      between requests                           keep-alive            close
    HEAD      reading a request's head                   header                408, close
    BODY      reading a request's body                   keep-alive, renewed   408, close
                                                         by each piece
    ANSWER    making or writing a response               none (the handler's)
    STALLED   waiting for the client to read             write                 abort
    LINGER    shut for writing; dropping what arrives    ``LINGER_SECONDS``    abort
    CLOSED    gone (the transport said so)               none
    ========  =========================================  ====================  ===============

    NEW or IDLE -> HEAD when a read ends in a request's head (BODY: in its body), changed once a
    read is parsed, not in the parser's callbacks: a request without a body that is complete
    within one read changes no state until it is answered (a body's pieces restart BODY's clock
    as they come) -> ANSWER once it is complete and its turn came
    (STALLED while the client does not read) -> IDLE, or HEAD/BODY for the next request already
    arriving. A request answered from the parser's callback (server/shortcuts.py) goes to IDLE
    at once, from whichever state it arrived in. Any state -> LINGER when the connection closes
    after its last answer, and -> CLOSED when the transport is lost.
    """

    # Looked up on every change of state (the tables below): the object's own hash, in C, not
    # Enum's, which hashes the member's name in Python.
    __hash__ = object.__hash__

    NEW = "new"
    IDLE = "idle"
    HEAD = "head"
    BODY = "body"
    ANSWER = "answer"
    STALLED = "stalled"
    LINGER = "linger"
    CLOSED = "closed"


NEW, IDLE, HEAD, BODY, ANSWER, STALLED, LINGER, CLOSED = State

#: The worker's deadline each state's clock copies (``head_deadline``...), ``"linger"`` for the
#: lingering close's own, or None: no clock.
CLOCKS: dict[State, str | None] = {
    NEW: "head_deadline",
    IDLE: "idle_deadline",
    HEAD: "head_deadline",
    BODY: "idle_deadline",
    ANSWER: None,
    STALLED: "write_deadline",
    LINGER: "linger",
    CLOSED: None,
}

#: The states each state may go to. Going to the same state again restarts its clock (a body's
#: next piece). LINGER and CLOSED may be reached from anywhere; CLOSED leads nowhere.
TRANSITIONS: dict[State, frozenset[State]] = {
    NEW: frozenset({NEW, IDLE, HEAD, BODY, ANSWER, LINGER, CLOSED}),
    IDLE: frozenset({IDLE, HEAD, BODY, ANSWER, LINGER, CLOSED}),
    HEAD: frozenset({HEAD, BODY, IDLE, ANSWER, LINGER, CLOSED}),
    BODY: frozenset({BODY, IDLE, ANSWER, LINGER, CLOSED}),
    ANSWER: frozenset({ANSWER, STALLED, IDLE, HEAD, BODY, LINGER, CLOSED}),
    STALLED: frozenset({ANSWER, IDLE, HEAD, BODY, LINGER, CLOSED}),
    LINGER: frozenset({LINGER, CLOSED}),
    CLOSED: frozenset({CLOSED}),
}


class BadTransition(RuntimeError):
    """A change of state the table does not allow: a bug of ours (the connection is cut)."""
