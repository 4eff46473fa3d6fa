"""Byte ranges (RFC 9110 section 14) in three steps: parse the header, resolve it against a size,
and format ``Content-Range``.

Abuse is capped (Apache CVE-2011-3192): at most ``max_ranges`` ranges in one header, inverted
or malformed ranges refused, overlapping and adjacent ranges merged, so a response never carries
more bytes than the representation twice over. Ranges keep the order the client asked for
(RFC 9110 15.3.7.2): a merged range stands where its first part was asked for.
"""

from __future__ import annotations

import re

from ..errors import RangeNotSatisfiable

_SPEC = re.compile(r"([0-9]*)-([0-9]*)")  # ASCII digits only: str.isdigit() also takes "²"
_BIG = 1 << 64  # beyond any file size; stands in for numbers int() would refuse (> 4300 digits)

Span = tuple[int, int]  # [start, stop): half-open, like a slice


def parse_range(header: str, size: int, max_ranges: int) -> list[Span] | None:
    """The spans a ``Range`` header asks for, merged, in request order; None to ignore the header.

    A unit other than ``bytes`` is ignored (the whole representation is sent, as RFC 9110
    allows), and so is a well-formed header on an empty representation: there is nothing to
    slice, and browsers' media requests (``bytes=0-``) expect the empty 200 nginx sends.
    Malformed, inverted, too many, or none satisfiable: ``RangeNotSatisfiable``.
    """
    unit, sep, spec = header.partition("=")
    if not sep or unit.strip().lower() != "bytes":
        return None
    # RFC 9110 5.6.1.2: empty list elements are ignored.
    items = [item.strip(" \t") for item in spec.split(",") if item.strip(" \t")]
    if len(items) > max_ranges:
        raise RangeNotSatisfiable(f"too many ranges (at most {max_ranges})", size)
    spans: list[Span] = []
    for item in items:
        m = _SPEC.fullmatch(item)
        if m is None or not (m.group(1) or m.group(2)):
            raise RangeNotSatisfiable(f"malformed range: {item[:40]!r}", size)
        first, last = m.groups()
        if not first:  # suffix: the last N bytes
            count = _number(last)
            if count and size:
                spans.append((max(0, size - count), size))
            continue
        start = _number(first)
        stop = _number(last) + 1 if last else size
        if last and stop <= start:
            raise RangeNotSatisfiable(f"inverted range: {item[:40]!r}", size)
        if start < size:
            spans.append((start, min(stop, size)))
    if not size:
        return None
    if not spans:
        raise RangeNotSatisfiable("no range is satisfiable", size)
    return merge(spans)


def _number(digits: str) -> int:
    digits = digits.lstrip("0") or "0"
    return int(digits) if len(digits) <= 19 else _BIG


def merge(spans: list[Span]) -> list[Span]:
    """Join the spans that overlap or touch; each joined span keeps the place of its first
    member, so the result follows the order they were asked in."""
    order = sorted(range(len(spans)), key=spans.__getitem__)
    groups: list[list[int]] = []  # [first index asked, start, stop]
    for i in order:
        start, stop = spans[i]
        if groups and start <= groups[-1][2]:
            group = groups[-1]
            group[0], group[2] = min(group[0], i), max(group[2], stop)
        else:
            groups.append([i, start, stop])
    groups.sort()
    return [(start, stop) for _, start, stop in groups]


def content_range(span: Span, size: int) -> str:
    return f"bytes {span[0]}-{span[1] - 1}/{size}"
