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


def test_whole_file_batches_keep_their_tags():
    # Values computed by the identity before slices existed (commit cc1de68): a batch of whole
    # files must keep its ETag and boundary, or every client's stored If-Range stops matching.
    assert identity_of(KEY, [A, B]) == ('"b4752151e3d9bc10116622c7d9c44e9b"', "c3f07b31071c43c78e9e9b04e994fde0")
    assert identity_of(KEY, [A], "fixed").etag == '"3857b9c002f6b4603cde13531c1dc672"'
    assert identity_of(KEY, [A, B], None, "zip").etag == '"efc4a4f723dd5bfb7dbf46a916546750"'
    assert identity_of(KEY, [B], None, "tar").etag == '"7ed7fb22f1b0d69353665b0184993b70"'


def test_slices_are_part_of_the_identity():
    whole = identity_of(KEY, [A, B])
    first = identity_of(KEY, [A, (*B, (0, 64))])
    assert len({whole, first, identity_of(KEY, [A, (*B, (0, 65))]), identity_of(KEY, [A, (*B, (1, 65))])}) == 4
    assert first == identity_of(KEY, [A, (*B, (0, 64))])
    # A slice of the whole file is not the whole file: its part carries a Content-Range.
    assert identity_of(KEY, [(*B, (0, 4096))]) != identity_of(KEY, [B])
    # Which item is sliced matters, and so does the order.
    assert identity_of(KEY, [(*A, (0, 5)), B]) != identity_of(KEY, [A, (*B, (0, 5))])
    assert identity_of(KEY, [(*B, (0, 5)), (*B, (5, 9))]) != identity_of(KEY, [(*B, (5, 9)), (*B, (0, 5))])
    assert identity_of(KEY, [A, (*B, (0, 64))], "fixed").boundary == "fixed"
