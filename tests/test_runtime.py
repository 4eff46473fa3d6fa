"""What the runtimes do alike (axon.runtime): headers folded, a body read within the limits, the
App built on first use."""

from __future__ import annotations

import pytest

from axon.errors import HTTPError
from axon.limits import Limits
from axon.runtime import BodyReader, Lazy, declared_length, fold_headers

LIMITS = Limits(max_body_bytes=10)


def test_headers_are_folded_in_order_with_lower_case_names():
    fields = [(b"Accept", b"a"), (b"X-Tag", b"1"), (b"accept", b"b"), (b"X-Name", "é".encode("latin-1"))]
    assert fold_headers(fields) == {"accept": "a, b", "x-tag": "1", "x-name": "é"}


@pytest.mark.parametrize("text, status", [("-1", 400), (" 1", 400), ("1_0", 400), ("²", 400), ("", 400), ("11", 413)])
def test_a_declared_length_that_is_not_a_size_within_the_limit_is_refused(text, status):
    with pytest.raises(HTTPError) as refused:
        declared_length(text, LIMITS)
    assert refused.value.status == status


def test_a_declared_length_within_the_limit_is_its_size():
    assert declared_length("10", LIMITS) == 10 and declared_length(None, LIMITS) is None


def test_a_body_is_refused_as_soon_as_its_pieces_pass_the_limit():
    body = BodyReader(LIMITS)
    body.add(b"12345")
    assert body.body() == b"12345"  # one piece: as it came
    body.add(b"67890")
    assert body.body() == b"1234567890" and body.size == 10
    with pytest.raises(HTTPError) as refused:
        body.add(b"!")
    assert refused.value.status == 413


def test_the_lazy_app_is_built_once_on_first_use():
    built: list[int] = []
    lazy = Lazy(lambda: built.append(1) or object())
    assert built == []
    first = lazy()
    assert lazy() is first and built == [1]
