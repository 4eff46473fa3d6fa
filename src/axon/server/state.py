"""What a connection is doing: :class:`State`, with its clock and its transitions in one table.

The state decides which clock runs (the connection's ``deadline``, which the worker's sweep
reads once a second) and what happens when it runs out (``HTTPProtocol.on_timeout``).
"""

from __future__ import annotations

import enum


class State(enum.Enum):
    """What a connection is doing.

    ========  =========================================  ====================  ===============
    state     the connection is                          clock                 when it runs out
    ========  =========================================  ====================  ===============
    IDLE      between requests                           keep-alive (header    close
                                                         before the first)
    HEAD      reading a request's head                   header                408, close
    BODY      reading a request's body                   keep-alive, renewed   408, close
                                                         by each piece
    ANSWER    making or writing a response               none (the handler's)
    STALLED   waiting for the client to read             write                 abort
    LINGER    shut for writing; dropping what arrives    ``LINGER_SECONDS``    abort
    CLOSED    gone (the transport said so)               none
    ========  =========================================  ====================  ===============

    IDLE -> HEAD on the first bytes of a request -> BODY once its head is complete -> ANSWER
    once it is complete and its turn came (STALLED while the client does not read) -> IDLE, or
    HEAD/BODY for the next request already arriving. Any state -> LINGER when the connection
    closes after its last answer, and -> CLOSED when the transport is lost.
    """

    IDLE = "idle"
    HEAD = "head"
    BODY = "body"
    ANSWER = "answer"
    STALLED = "stalled"
    LINGER = "linger"
    CLOSED = "closed"


IDLE, HEAD, BODY, ANSWER, STALLED, LINGER, CLOSED = State
