"""Batch formats: a format is one function (file facts -> ETag, Content-Type, the blocks around
the files), and plan_batch frames a batch in whichever it is given."""

from __future__ import annotations

import gc

import pytest

from axon.errors import RangeNotSatisfiable
from axon.http.batch_identity import KeptSignature, Signature, identity_of, plain_signature
from axon.limits import Limits
from axon.plan.batch import plan_batch
from axon.plan import formats
from axon.plan.formats import multipart_mixed, tar, zip_stored

KEY = b"k" * 32
LIMITS = Limits()
A = Signature("a.txt", "text/plain; charset=utf-8", device=4, inode=3, size=12, mtime_ns=1, ctime_ns=2, name="a.txt")
B = Signature("sub/../b.bin", "application/octet-stream", device=4, inode=5, size=5, mtime_ns=1, ctime_ns=2, name="b.bin")


def listing(key, boundary, signatures, crcs=()):
    """Not a real format: each file after a line naming it, and a last line."""
    etag = identity_of(key, signatures, boundary).etag if key is not None else None
    heads = [f"{s.path} {s.size}\n".encode() for s in signatures]
    blocks = (heads[0], *(b"\n" + head for head in heads[1:]), b"\nend\n") if heads else (b"end\n",)
    return etag, "text/x-listing", "batch.listing", blocks


def test_multipart_mixed_is_blocks_around_the_files():
    etag, content_type, filename, blocks = multipart_mixed(KEY, None, (A, B))
    assert filename == "batch.multipart"
    boundary = content_type.removeprefix("multipart/mixed; boundary=")
    assert (etag, boundary) == identity_of(KEY, (A, B))
    assert len(blocks) == 3
    assert blocks[0].startswith(f"--{boundary}\r\n".encode()) and blocks[0].endswith(b"Content-Length: 12\r\n\r\n")
    assert b"Content-Location: /files/sub/../b.bin\r\n" in blocks[1] and blocks[1].endswith(b"Content-Length: 5\r\n\r\n")
    assert blocks[2] == f"\r\n--{boundary}--\r\n".encode()


def test_multipart_mixed_without_a_key_has_no_etag_and_a_random_boundary():
    first, second = multipart_mixed(None, None, (A,)), multipart_mixed(None, None, (A,))
    assert first[0] is None and first[1] != second[1]
    assert multipart_mixed(None, "given", (A,))[1] == "multipart/mixed; boundary=given"


def kept(s: Signature) -> KeptSignature:
    return tuple.__new__(KeptSignature, s)


def test_a_kept_signature_frames_the_bytes_of_its_facts():
    """A trusted file's signature (one object per version, hashed by identity) is framed as the
    same facts in a plain one are."""
    for batch in ((kept(A), kept(B)), (A, kept(B)), (kept(A), B, kept(A))):
        plain = tuple(map(plain_signature, batch))
        assert all(type(s) is Signature for s in plain) and plain == tuple(Signature(*s) for s in batch)
        assert multipart_mixed(KEY, None, batch) == multipart_mixed(KEY, None, plain)
        assert multipart_mixed(KEY, "given", batch) == multipart_mixed(KEY, "given", plain)


def test_a_kept_signature_is_equal_where_its_hash_is():
    """Equality and hash agree: a kept signature is equal to itself alone (its hash is its
    identity), never to another of the same facts nor to a plain one; a plain one goes by facts."""
    first, second = kept(A), kept(A)
    assert first == first and not first != first and hash(first) == hash(first)
    assert first != second and not first == second and len({first, second}) == 2
    plain = Signature(*A)
    for one, other in ((first, plain), (plain, first)):  # whichever side is asked first
        assert one != other and not one == other
    assert plain == A and hash(plain) == hash(A)
    assert len({first, plain, A}) == 2 and {first: 1}.get(plain) is None


def test_the_kept_pieces_are_bounded_as_the_others(monkeypatch):
    monkeypatch.setattr(formats, "PER_FILE_CACHE", 4)
    monkeypatch.setattr(formats, "_KEPT", {})
    monkeypatch.setattr(formats, "_PIECES", {})
    multipart_mixed(KEY, None, (A, B))  # plain: kept in _PIECES
    shared = kept(A)
    multipart_mixed(KEY, None, (shared,))
    assert formats._KEPT[shared] is formats._PIECES[A]  # seen plain first: one piece for both
    for inode in range(10):
        multipart_mixed(KEY, None, (kept(A._replace(inode=inode)),))
        assert len(formats._KEPT) <= 4 and len(formats._PIECES) <= 4


def test_the_pieces_table_leaves_the_collector_nothing_to_walk(monkeypatch):
    """A plain signature is kept as a plain tuple of strings and numbers, which the cycle collector
    stops tracking at its first collection; a NamedTuple it would walk in every collection of
    the old generation, one a file of a busy pool."""
    monkeypatch.setattr(formats, "_PIECES", {})
    multipart_mixed(KEY, None, (Signature(*A), Signature(*B)))
    gc.collect()
    assert len(formats._PIECES) == 2 and not any(gc.is_tracked(s) for s in formats._PIECES)
    assert formats._PIECES.get(A) is not None  # still found by a Signature of the same facts


def test_plan_batch_frames_a_batch_in_the_format_it_is_given(root, store, render):
    response = plan_batch(store, ["a.txt", "sub/c.json"], LIMITS, key=KEY, headers={}, fmt=listing)
    try:
        body = render(response.body)
        assert body == b"a.txt 12\nhello, axon\n\nsub/c.json 9\n" + (root / "sub/c.json").read_bytes() + b"\nend\n"
        headers = dict(response.headers)
        assert headers["Content-Type"] == "text/x-listing" and headers["Content-Length"] == str(len(body))
        assert headers["ETag"].startswith('"') and headers["Accept-Ranges"] == "bytes"
    finally:
        response.close()
    # Range and If-Range work on every format alike: they slice the planned segments.
    ranged = plan_batch(store, ["a.txt", "sub/c.json"], LIMITS, key=KEY, fmt=listing,
                        headers={"range": "bytes=9-14", "if-range": headers["ETag"]})
    try:
        assert ranged.status == 206 and render(ranged.body) == b"hello,"
        assert dict(ranged.headers)["Content-Range"] == f"bytes 9-14/{len(body)}"
    finally:
        ranged.close()
    with pytest.raises(RangeNotSatisfiable):
        plan_batch(store, ["a.txt"], LIMITS, key=KEY, fmt=listing, headers={"range": f"bytes={len(body)}-"})


def test_a_format_has_its_own_layouts(store, render):
    # What is kept per file version is kept per format: the same files in two formats never mix.
    def both():
        out = []
        for fmt in (listing, multipart_mixed, listing):
            r = plan_batch(store, ["a.txt"], LIMITS, key=KEY, headers={}, fmt=fmt)
            out.append((dict(r.headers)["Content-Type"], render(r.body)))
            r.close()
        return out

    first = both()
    assert first == both()
    assert first[0] == first[2] != first[1]


@pytest.mark.parametrize("fmt", [tar, zip_stored, multipart_mixed])
def test_range_over_any_format_is_a_slice_of_the_whole(store, render, fmt):
    paths = ["a.txt", "b.bin", "sub/c.json"]
    whole = plan_batch(store, paths, LIMITS, key=KEY, headers={}, fmt=fmt)
    etag, body = dict(whole.headers)["ETag"], render(whole.body)
    whole.close()
    for start, stop in [(0, 0), (25, 4000), (1000, len(body) - 1), (len(body) - 700, len(body) - 1)]:
        part = plan_batch(store, paths, LIMITS, key=KEY, fmt=fmt, headers={"range": f"bytes={start}-{stop}", "if-range": etag})
        try:
            assert part.status == 206 and render(part.body) == body[start : stop + 1]
        finally:
            part.close()
