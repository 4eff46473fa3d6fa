"""The fast loop's share of hypothesis examples (tests/conftest.py): it reaches a test whose own
``@settings`` names its examples, with the hypothesis installed here."""

from __future__ import annotations

from conftest import fast_examples, use_fast_examples
from hypothesis import given, settings
from hypothesis import strategies as st


def _property(calls: list[int]):
    @settings(max_examples=250, deadline=None, database=None)
    @given(st.integers())
    def prop(n: int) -> None:
        calls.append(n)

    return prop


def test_a_property_runs_the_share_of_its_own_examples() -> None:
    whole, share = [], []
    _property(whole)()
    fast = _property(share)
    use_fast_examples(fast)
    fast()
    assert len(whole) == 250 and len(share) == fast_examples(250) == 25


def test_a_small_property_keeps_at_least_the_floor() -> None:
    assert fast_examples(60) == 20 and fast_examples(5) == 5 and fast_examples(1500) == 150
