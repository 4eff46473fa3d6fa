"""A batch's identity (ETag and boundary) from plain file facts: nothing is opened here."""

from __future__ import annotations

import re

import pytest

from axon.http.batch_identity import identity_of

KEY = b"k" * 32
A = ("a.txt", "text/plain; charset=utf-8", 12, 1_700_000_000_000_000_000, 1_700_000_000_000_000_001, 42, 7, "a.txt")
B = ("b.bin", "application/octet-stream", 4096, 1_700_000_000_000_000_000, 1_700_000_000_000_000_000, 43, 7, "b.bin")


def test_same_facts_same_identity_in_two_halves():
    first, second = identity_of(KEY, [A, B]), identity_of(KEY, [A, B])
    assert first == second
    assert re.fullmatch(r'"[0-9a-f]{32}"', first.etag) and re.fullmatch(r"[0-9a-f]{32}", first.boundary)
    assert first.boundary not in first.etag


def test_a_given_boundary_is_kept_and_hashed_in():
    ident = identity_of(KEY, [A], "fixed")
    assert ident.boundary == "fixed"
    assert ident.etag != identity_of(KEY, [A], "other").etag
    assert identity_of(KEY, [A]).boundary != "fixed"


def test_unambiguous_encoding():
    # A path list cannot be re-split into another with the same hash.
    assert identity_of(KEY, [A, B]) != identity_of(KEY, [B, A])
    assert identity_of(KEY, [A]) != identity_of(KEY, [A], "x" * 32)
    ab_c = [("ab", *A[1:]), ("c", *A[1:])]
    a_bc = [("a", *A[1:]), ("bc", *A[1:])]
    assert identity_of(KEY, ab_c) != identity_of(KEY, a_bc)


@pytest.mark.parametrize("field", range(7))  # path, type, size, mtime, ctime, inode, device
def test_every_hashed_fact_changes_the_identity(field):
    changed = list(A)
    changed[field] = changed[field] + (1 if isinstance(changed[field], int) else "x")
    assert identity_of(KEY, [tuple(changed)]) != identity_of(KEY, [A])


def test_the_key_changes_the_identity():
    assert identity_of(KEY, [A]) != identity_of(b"K" * 32, [A])
