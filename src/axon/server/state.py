"""What a connection is doing: :class:`State`, with its clock and its transitions in one table.

The state decides which clock runs (the connection's ``deadline``, which the worker's sweep reads
once a second) and what happens when it runs out (``HTTPProtocol.on_timeout``). Every change of
state goes through ``HTTPProtocol._to``, which checks it against :data:`TRANSITIONS` (as h11's
``_state.py`` does) and sets the clock from :data:`CLOCKS`: no other code writes either.
"""

from __future__ import annotations

import enum


class State(enum.Enum):
    """What a connection is doing, and so what it may do.

    ============  =========================================  ====================  ===============
    state         the connection is                          clock                 when it runs out
    ============  =========================================  ====================  ===============
    NEW           open, nothing received yet                 header                close
    IDLE          between requests                           keep-alive            close
    HEAD          reading a request's head                   header                408, close
    BODY          reading a request's body                   keep-alive, renewed   408, close
                                                             by each piece
    ANSWER        making or writing an answer; what          none (the handler's)
                  arrives meanwhile is kept for later
    STALLED       ANSWER, waiting for the client to read     write                 abort
    LAST          answering what was asked, then closing:    none (the handler's)
                  nothing more is read (refused, not kept
                  alive, upgraded, the client shut its
                  side, the worker stopping)
    LAST_STALLED  LAST, waiting for the client to read       write                 abort
    LINGER        shut for writing; dropping what arrives    ``LINGER_SECONDS``    abort
    CLOSED        closed, or cut                             none
    ============  =========================================  ====================  ===============

    NEW or IDLE -> HEAD when a read ends in a request's head (BODY: in its body), changed once a
    read is parsed, not in the parser's callbacks: a request without a body that is complete
    within one read changes no state until it is answered (a body's pieces restart BODY's clock
    as they come) -> ANSWER once it is complete and its turn came (STALLED while the client does
    not read) -> IDLE, or HEAD/BODY for the next request already arriving. A request answered
    from the parser's callback (server/shortcuts.py) goes to IDLE at once, from whichever
    reading state it arrived in. A reason to close makes any state before it LAST (STALLED:
    LAST_STALLED), which answers what is queued -> LINGER (or CLOSED at once when the client
    shut its side) once the last answer left the transport (LAST_STALLED until it did). Any state -> CLOSED when the connection is cut or
    the transport is lost; CLOSED leads nowhere.
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
    LAST = "last"
    LAST_STALLED = "last_stalled"
    LINGER = "linger"
    CLOSED = "closed"


NEW, IDLE, HEAD, BODY, ANSWER, STALLED, LAST, LAST_STALLED, LINGER, CLOSED = State

#: The worker's deadline each state's clock copies (``head_deadline``...), ``"linger"`` for the
#: lingering close's own, or None: no clock.
CLOCKS: dict[State, str | None] = {
    NEW: "head_deadline",
    IDLE: "idle_deadline",
    HEAD: "head_deadline",
    BODY: "idle_deadline",
    ANSWER: None,
    STALLED: "write_deadline",
    LAST: None,
    LAST_STALLED: "write_deadline",
    LINGER: "linger",
    CLOSED: None,
}

#: The states each state may go to; any other change is a bug (:class:`BadTransition`). Going
#: to the same state again restarts its clock (a body's next piece, the next queued answer).
TRANSITIONS: dict[State, frozenset[State]] = {
    NEW: frozenset({NEW, IDLE, HEAD, BODY, ANSWER, LAST, LINGER, CLOSED}),
    IDLE: frozenset({IDLE, HEAD, BODY, ANSWER, LAST, LINGER, CLOSED}),
    HEAD: frozenset({HEAD, BODY, IDLE, ANSWER, LAST, LINGER, CLOSED}),
    BODY: frozenset({BODY, IDLE, ANSWER, LAST, LINGER, CLOSED}),
    ANSWER: frozenset({ANSWER, STALLED, IDLE, HEAD, BODY, LAST, LINGER, CLOSED}),
    STALLED: frozenset({ANSWER, LAST_STALLED, CLOSED}),
    LAST: frozenset({LAST, LAST_STALLED, LINGER, CLOSED}),
    LAST_STALLED: frozenset({LAST, CLOSED}),
    LINGER: frozenset({CLOSED}),
    CLOSED: frozenset(),
}

#: States in which what arrives is parsed (the other states keep it, or drop it: ``data_received``).
READING = frozenset({NEW, IDLE, HEAD, BODY})
#: States in which nothing more is read: the connection closes once what is queued is answered.
CLOSING = frozenset({LAST, LAST_STALLED, LINGER, CLOSED})
#: States in which an answer is being made or written (a task, when seen from outside it).
ANSWERING = frozenset({ANSWER, STALLED, LAST, LAST_STALLED})
#: What each state becomes when a reason to close comes.
LAST_OF = {STALLED: LAST_STALLED, LAST_STALLED: LAST_STALLED}


class BadTransition(RuntimeError):
    """A change of state the table does not allow: a bug of ours (the connection is cut)."""
