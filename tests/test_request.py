"""Request: the query's pairs and values."""

from __future__ import annotations

import gc

from axon.request import Request


def test_query_values_let_a_long_querys_pairs_go() -> None:
    """A batch's paths are the query's values: taken from the query string, they keep no pair per
    file alive while the batch is sent (each a tracked tuple the next young collection walks)."""
    raw = "&".join(f"file{i}=dir/f{i:05d}.bin" for i in range(300))  # past the parsed-once length
    request = Request("GET", "/api/stream-files", raw)
    gc.collect()
    before = len(gc.get_objects())
    values = request.query_values()
    assert len(gc.get_objects()) - before <= 1  # the list of values alone
    assert values == [value for _, value in Request("GET", "/api/stream-files", raw).query]


def test_query_values_are_those_of_the_pairs_set() -> None:
    """Pairs replaced (a signed request's, its own pairs taken off) are the ones whose values count."""
    request = Request("GET", "/api/stream-files", "a=x.bin&sig=abc")
    request.query = [("a", "x.bin")]
    assert request.query_values() == ["x.bin"]
