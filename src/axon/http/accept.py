"""Content negotiation on ``Accept`` (RFC 9110 12.5.1): which of the offered media types a
request prefers.

Each offered type takes the quality of the most specific range that matches it (``a/b`` before
``a/*`` before ``*/*``); the highest quality above zero wins, and ties go to the type offered
first, so a server lists its default first. A missing or empty header accepts anything.
Parameters other than ``q`` are not matched (``multipart/mixed; boundary=x`` is
``multipart/mixed``), and a ``q`` that is not a number counts as 1, as a lenient reader takes it.
"""

from __future__ import annotations

from collections.abc import Sequence


def negotiate(header: str | None, offered: Sequence[str]) -> str | None:
    """The offered media type (lower case, as given) ``header`` prefers, or None if it
    accepts none of them."""
    if header is None or not header.strip():
        return offered[0]
    ranges = [_media_range(item) for item in header.split(",") if item.strip()]
    best, best_q = None, 0.0
    for offer in offered:
        family = offer.split("/", 1)[0] + "/*"
        specificity, quality = -1, 0.0
        for media, q in ranges:
            rank = 2 if media == offer else 1 if media == family else 0 if media == "*/*" else -1
            if rank > specificity:
                specificity, quality = rank, q
        if quality > best_q:
            best, best_q = offer, quality
    return best


def _media_range(item: str) -> tuple[str, float]:
    media, *params = item.split(";")
    q = 1.0
    for param in params:
        name, _, value = param.partition("=")
        if name.strip().lower() == "q":
            try:
                q = min(max(float(value.strip()), 0.0), 1.0)
            except ValueError:
                q = 1.0
    return media.strip().lower(), q
