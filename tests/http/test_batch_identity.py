"""A batch's identity (ETag and boundary) from plain file facts: nothing is opened here."""

from __future__ import annotations

import re

import pytest

from axon.http.batch_identity import Signature, identity_of

KEY = b"k" * 32
A = Signature("a.txt", "text/plain; charset=utf-8", device=7, inode=42, size=12, mtime_ns=1_700_000_000_000_000_000,
              ctime_ns=1_700_000_000_000_000_001, name="a.txt")
B = Signature("b.bin", "application/octet-stream", device=7, inode=43, size=4096, mtime_ns=1_700_000_000_000_000_000,
              ctime_ns=1_700_000_000_000_000_000, name="b.bin")


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
    ab_c = [A._replace(path="ab"), A._replace(path="c")]
    a_bc = [A._replace(path="a"), A._replace(path="bc")]
    assert identity_of(KEY, ab_c) != identity_of(KEY, a_bc)


@pytest.mark.parametrize("field", range(7))  # path, type, device, inode, size, mtime, ctime
def test_every_hashed_fact_changes_the_identity(field):
    changed = list(A)
    changed[field] = changed[field] + (1 if isinstance(changed[field], int) else "x")
    assert identity_of(KEY, [Signature(*changed)]) != identity_of(KEY, [A])


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
    first = identity_of(KEY, [A, B._replace(span=(0, 64))])
    assert len({whole, first, identity_of(KEY, [A, B._replace(span=(0, 65))]), identity_of(KEY, [A, B._replace(span=(1, 65))])}) == 4
    assert first == identity_of(KEY, [A, B._replace(span=(0, 64))])
    # A slice of the whole file is not the whole file: its part carries a Content-Range.
    assert identity_of(KEY, [B._replace(span=(0, 4096))]) != identity_of(KEY, [B])
    # Which item is sliced matters, and so does the order.
    assert identity_of(KEY, [A._replace(span=(0, 5)), B]) != identity_of(KEY, [A, B._replace(span=(0, 5))])
    head, tail = B._replace(span=(0, 5)), B._replace(span=(5, 9))
    assert identity_of(KEY, [head, tail]) != identity_of(KEY, [tail, head])
    assert identity_of(KEY, [A, B._replace(span=(0, 64))], "fixed").boundary == "fixed"
