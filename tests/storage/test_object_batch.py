"""A batch's objects named by listing entries still valid (``listing_valid``, ``axon serve
--object-listing-valid``), against a real SeaweedFS whose own metrics count the LISTs and GETs it
answered: within the window a repeated batch asks the store nothing; an overwrite is seen once the
window has passed; a key made within it is served, not a 404; the table keeps within its bound;
with 0 every batch lists, as before."""

from __future__ import annotations

import time
import uuid

import pytest

pytest.importorskip("obstore")

from axon.app import App  # noqa: E402
from axon.storage import object_listing  # noqa: E402
from test_object_listing import SMALL, batch, body_of, counted, parts, put_all, source_of  # noqa: E402

pytestmark = pytest.mark.slow  # counts a real SeaweedFS's requests

NAMES = [f"d/{i:03d}.bin" for i in range(SMALL)]


@pytest.fixture
def prefix(weed) -> str:
    """A prefix of this test's own: SMALL objects of 3,000 bytes under d/."""
    name = f"valid-{uuid.uuid4().hex[:8]}"
    put_all(weed, {f"{name}/{n}": body_of(i, 3000) for i, n in enumerate(NAMES)})
    return name


@pytest.mark.parametrize(("valid", "lists"), [(0, 1), (60, 0)])
def test_within_the_window_a_repeated_batch_asks_the_store_nothing(weed, prefix, parse_multipart, valid, lists):
    """With 0 (the default), a repeated batch of kept objects still costs its listing; within a
    window it costs the store no request at all."""
    app = App(store=source_of(weed, prefix, listing_valid=valid))
    (status, headers, body), cold = counted(weed, lambda: batch(app, NAMES))
    assert status == 200 and parts(parse_multipart, headers, body) == [body_of(i, 3000) for i in range(SMALL)]
    assert cold == {"GET": SMALL, "LIST": 1}
    (status, again, body2), warm = counted(weed, lambda: batch(app, NAMES))
    assert (status, body2) == (200, body) and again["ETag"] == headers["ETag"]
    assert warm == {"GET": 0, "LIST": lists}


def test_an_overwrite_is_seen_once_the_window_has_passed(weed, prefix, parse_multipart):
    valid = 3.0
    app = App(store=source_of(weed, prefix, listing_valid=valid))
    listed = time.monotonic()
    batch(app, NAMES)
    weed.put(f"{prefix}/d/005.bin", body_of(5, 3000, b"v2"))  # the same size: only its ETag differs
    (status, headers, body), within = counted(weed, lambda: batch(app, NAMES))
    assert time.monotonic() - listed < valid, "the machine is too slow for this test's window"
    assert status == 200 and parts(parse_multipart, headers, body)[5] == body_of(5, 3000)  # the rule allows it
    assert within == {"GET": 0, "LIST": 0}
    time.sleep(max(0.0, listed + valid - time.monotonic()) + 0.1)
    (status, headers, body), after = counted(weed, lambda: batch(app, NAMES))
    got = parts(parse_multipart, headers, body)
    assert status == 200 and got[5] == body_of(5, 3000, b"v2") and got[4] == body_of(4, 3000)
    assert after == {"GET": 1, "LIST": 1}


def test_a_key_made_within_the_window_is_served(weed, prefix, parse_multipart):
    """The table only vouches for the keys it holds: a key the first batch's listing did not name
    (made since) is opened, never a 404 for not being there."""
    app = App(store=source_of(weed, prefix, listing_valid=60))
    assert batch(app, NAMES)[0] == 200
    weed.put(f"{prefix}/d/new.bin", b"made after the listing")
    (status, headers, body), asked = counted(weed, lambda: batch(app, [*NAMES, "d/new.bin"]))
    assert status == 200, body[:300]
    assert parts(parse_multipart, headers, body)[-1] == b"made after the listing"
    assert asked == {"GET": 1, "LIST": 0}  # the new key opened; the others held, listed within the window


def test_the_table_keeps_within_its_bound_under_many_distinct_keys(weed, monkeypatch):
    monkeypatch.setattr(object_listing, "LISTED_KEYS", 50)
    name = f"many-{uuid.uuid4().hex[:8]}"
    put_all(weed, {f"{name}/m/{i:04d}.bin": body_of(i, 100) for i in range(300)})
    source = source_of(weed, name, listing_valid=60)
    app = App(store=source)
    for start in range(0, 300, 40):
        assert batch(app, [f"m/{i:04d}.bin" for i in range(start, min(start + 40, 300))])[0] == 200
        assert 0 < len(source._listings) <= 50
    # The last batch's own keys were noted last (after the neighbours its listing named): they stay.
    (status, _, _), asked = counted(weed, lambda: batch(app, [f"m/{i:04d}.bin" for i in range(280, 300)]))
    assert status == 200 and asked == {"GET": 0, "LIST": 0}
