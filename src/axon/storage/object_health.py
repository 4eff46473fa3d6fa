"""What an object store last did for this process: the health probe's answer, without a request
to the store per probe.

Every request to the store ends in an answer (a missing key is an answer: the store works) or in
a failure that is the store's, not the key's: no answer within the timeout (503), credentials it
refuses or a bucket it lacks (502). The source notes which, with the time. ``/api/health`` reads
the note: the failure, as a 503 naming it, while it is the last thing seen; "available" otherwise.
A note older than :data:`FRESH` seconds is checked once more in the background (one request,
:meth:`StoreHealth.stale` says when), since a node its load balancer took out of rotation gets no
requests that would tell it the store answers again; meanwhile the probe answers from the note.
"""

from __future__ import annotations

import time

from ..errors import HTTPError, ServiceUnavailable

#: Seconds a note is trusted before the store is asked again (once, in the background).
FRESH = 5.0


class StoreHealth:
    """One process's note of the store. Plain assignments: threads may note at once, the last wins."""

    def __init__(self) -> None:
        self.failure: HTTPError | None = None
        self.seen = float("-inf")  # time.monotonic() of the note
        self.asking = False  # a background check is under way

    def answered(self) -> None:
        self.failure, self.seen = None, time.monotonic()

    def outcome(self, error: HTTPError) -> HTTPError:
        """Note a request that ended in ``error``: a failure of the store's (5xx) or an answer
        about one key (404, 403). Returns ``error``, for the caller to raise or return."""
        if error.status >= 500:
            self.failure, self.seen = error, time.monotonic()
        else:
            self.answered()
        return error

    def stale(self) -> bool:
        """Whether the note is too old to answer from, and no check is under way: the caller
        starts one (and sets ``asking`` until it is done)."""
        return not self.asking and time.monotonic() - self.seen > FRESH

    def report(self) -> HTTPError | None:
        """None while the store answered last; else the 503 that says what failed, and when."""
        failure = self.failure
        if failure is None:
            return None
        ago = max(0.0, time.monotonic() - self.seen)
        return ServiceUnavailable(f"{failure.message} ({ago:.0f} s ago)", code=failure.code,
                                  headers=[("Retry-After", "1")])
