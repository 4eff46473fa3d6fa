"""A batch's objects named by listing entries still valid (``listing_valid``, ``axon serve
--object-listing-valid``), against a real SeaweedFS whose own metrics count the LISTs and GETs it
answered: within the window a repeated batch asks the store nothing; an overwrite is seen once the
window has passed; a key made within it is served, not a 404; the table keeps within its bound;
with 0 every batch lists, as before. With the disk tier, a batch whose every key is trusted and on
disk is answered on the caller's thread (no hop to the store loop), and the shortcut still sees an
overwrite after the window and still serves a key evicted from the tier within it."""

from __future__ import annotations

import asyncio
import json
import os
import time
import uuid

import pytest

pytest.importorskip("obstore")

from axon.app import App, Request  # noqa: E402
from axon.http.segments import FileSlice  # noqa: E402
from axon.storage import object_listing  # noqa: E402
from test_object_disk_served import kept_files, wait_for_files  # noqa: E402
from test_object_listing import SMALL, batch, body_of, call, counted, parts, put_all, source_of  # noqa: E402

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


def test_a_key_opened_alone_is_trusted_for_the_window_as_a_listed_one(weed, prefix, parse_multipart):
    """Too few keys to list are opened, and what the opening GET named stands for the store's
    version as a listing's entry does: the next batch within the window asks the store nothing
    for it; an overwrite is seen once the window has passed."""
    valid = 3.0
    app = App(store=source_of(weed, prefix, listing_valid=valid))
    assert batch(app, NAMES)[0] == 200
    weed.put(f"{prefix}/d/new.bin", b"made after the listing")
    opened = time.monotonic()
    (status, headers, body), asked = counted(weed, lambda: batch(app, [*NAMES, "d/new.bin"]))
    assert status == 200 and parts(parse_multipart, headers, body)[-1] == b"made after the listing"
    assert asked == {"GET": 1, "LIST": 0}
    weed.put(f"{prefix}/d/new.bin", b"made again, same size!")
    (status, headers, body), within = counted(weed, lambda: batch(app, [*NAMES, "d/new.bin"]))
    assert time.monotonic() - opened < valid, "the machine is too slow for this test's window"
    assert status == 200 and parts(parse_multipart, headers, body)[-1] == b"made after the listing"  # the rule allows it
    assert within == {"GET": 0, "LIST": 0}
    time.sleep(max(0.0, opened + valid - time.monotonic()) + 0.1)
    (status, headers, body), after = counted(weed, lambda: batch(app, [*NAMES, "d/new.bin"]))
    assert status == 200 and parts(parse_multipart, headers, body)[-1] == b"made again, same size!"


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


def tier_batch(app: App, names: list[str]) -> tuple[int, dict, bytes]:
    """:func:`batch`, a kept file's slices read as a server sends them (by offset)."""
    response = app.handle(Request("POST", "/api/stream-files", "", {}, json.dumps({"files": names}).encode()))
    try:
        data = b"".join(os.pread(s.fd, s.count, s.offset) if isinstance(s, FileSlice) else s for s in response.body)
    finally:
        response.close()
    return response.status, dict(response.headers), data


def tiered(weed, prefix, tmp_path, valid: float):
    """An App whose source keeps objects on disk only (no memory cache), the batch of NAMES
    served once and every object's file written; the source, whose store-loop calls are counted."""
    cache_dir = tmp_path / "tier"
    source = source_of(weed, prefix, listing_valid=valid, cache_bytes=0, disk_cache=str(cache_dir))
    app = App(store=source)
    assert tier_batch(app, NAMES)[0] == 200
    wait_for_files(cache_dir, SMALL)
    run, source.hops = source.run, 0

    def counted_run(coro):
        source.hops += 1
        return run(coro)

    source.run = counted_run
    return app, source, cache_dir


def test_within_the_window_a_batch_on_disk_is_answered_on_the_callers_thread(weed, prefix, tmp_path,
                                                                              parse_multipart):
    app, source, _ = tiered(weed, prefix, tmp_path, 60)
    hits = source.counts()["object_disk_hits"]
    (status, headers, body), asked = counted(weed, lambda: tier_batch(app, NAMES))
    assert status == 200 and parts(parse_multipart, headers, body) == [body_of(i, 3000) for i in range(SMALL)]
    assert asked == {"GET": 0, "LIST": 0} and source.hops == 0
    assert source.counts()["object_disk_hits"] - hits == SMALL  # each sent from its file


def test_on_disk_an_overwrite_is_seen_once_the_window_has_passed(weed, prefix, tmp_path, parse_multipart):
    valid = 3.0
    listed = time.monotonic()  # the first batch's LIST was sent between these two
    app, source, _ = tiered(weed, prefix, tmp_path, valid)
    listed_by = time.monotonic()
    weed.put(f"{prefix}/d/005.bin", body_of(5, 3000, b"v2"))
    (status, headers, body), within = counted(weed, lambda: tier_batch(app, NAMES))
    assert time.monotonic() - listed < valid, "the machine is too slow for this test's window"
    assert status == 200 and parts(parse_multipart, headers, body)[5] == body_of(5, 3000)
    assert within == {"GET": 0, "LIST": 0} and source.hops == 0
    time.sleep(max(0.0, listed_by + valid - time.monotonic()) + 0.1)
    (status, headers, body), after = counted(weed, lambda: tier_batch(app, NAMES))
    got = parts(parse_multipart, headers, body)
    assert status == 200 and got[5] == body_of(5, 3000, b"v2") and got[4] == body_of(4, 3000)
    assert after == {"GET": 1, "LIST": 1}


def test_a_key_evicted_from_the_disk_within_the_window_is_still_served(weed, prefix, tmp_path, parse_multipart):
    app, source, cache_dir = tiered(weed, prefix, tmp_path, 60)
    gone = next(os.path.join(d, f) for d, _, fs in os.walk(cache_dir) for f in fs if f in kept_files(cache_dir))
    os.unlink(gone)
    (status, headers, body), asked = counted(weed, lambda: tier_batch(app, NAMES))
    assert status == 200 and parts(parse_multipart, headers, body) == [body_of(i, 3000) for i in range(SMALL)]
    assert asked == {"GET": 1, "LIST": 0}  # the evicted key opened alone; the others from disk
    assert source.hops == 1


@pytest.mark.parametrize("failing", ["_listed", "_open_kept"])  # before the batch's opening, and within it
def test_a_batch_that_fails_to_open_holds_no_kept_file(weed, prefix, tmp_path, monkeypatch, failing):
    app, source, cache_dir = tiered(weed, prefix, tmp_path, 60)
    gone = next(os.path.join(d, f) for d, _, fs in os.walk(cache_dir) for f in fs if f in kept_files(cache_dir))
    os.unlink(gone)  # so the batch goes on to the store loop, holding the others' files

    async def broken(*args, **kwargs):
        raise RuntimeError("the store loop failed")

    def held_files() -> int:
        return sum(os.readlink(f"/proc/self/fd/{fd}").startswith(str(cache_dir)) for fd in os.listdir("/proc/self/fd")
                   if os.path.exists(f"/proc/self/fd/{fd}"))

    before = held_files()
    monkeypatch.setattr(source, failing, broken)
    with pytest.raises(RuntimeError):
        source.open_many(NAMES)
    assert held_files() == before


def test_a_slice_of_an_object_overwritten_within_the_window_is_never_cut(weed, prefix, parse_multipart):
    """The window's promise (object_batch): bytes fetched from the store are asked by the ETag the
    store gives now, so an entry gone stale never makes a fetch fail its If-Match. A small object
    whose bytes are in memory but past the batch's room (``prefetch_bytes``) is trusted within the
    window as one whose bytes are held; a slice of it is then fetched from the store by the old ETag."""
    app = App(store=source_of(weed, prefix, listing_valid=60, prefetch_bytes=0))
    assert batch(app, NAMES)[0] == 200  # listed and opened: every object kept in memory
    weed.put(f"{prefix}/d/005.bin", body_of(5, 3000, b"v2"))  # within the window: either version may be sent
    items = [{"path": NAMES[5], "offset": 0, "length": 100}, *NAMES[6:]]
    status, headers, body = call(app, "POST", "/api/stream-files", body=json.dumps({"files": items}).encode())
    assert status == 200 and len(body) == int(headers["Content-Length"])
    assert parts(parse_multipart, headers, body)[0] in (body_of(5, 3000)[:100], body_of(5, 3000, b"v2")[:100])


def test_within_the_window_a_key_alone_on_disk_asks_the_store_nothing(weed, prefix, tmp_path):
    """``/files/KEY`` follows a batch's rule: its entry standing and its file whole on disk, it is
    sent from there on the caller's thread, without a request to the store; an overwrite is seen
    once the window has passed."""
    valid = 3.0
    app, source, _ = tiered(weed, prefix, tmp_path, valid)
    listed_by = time.monotonic()
    weed.put(f"{prefix}/d/003.bin", body_of(3, 3000, b"v2"))
    (status, _, body), within = counted(weed, lambda: tier_file(app, "d/003.bin"))
    assert time.monotonic() - listed_by < valid, "the machine is too slow for this test's window"
    assert (status, body) == (200, body_of(3, 3000)) and within == {"GET": 0, "LIST": 0} and source.hops == 0
    time.sleep(max(0.0, listed_by + valid - time.monotonic()) + 0.1)
    (status, _, body), after = counted(weed, lambda: tier_file(app, "d/003.bin"))
    assert (status, body) == (200, body_of(3, 3000, b"v2")) and after["GET"] >= 1


def test_a_batch_held_within_the_window_is_answered_on_the_loop(weed, prefix, tmp_path, parse_multipart):
    """On an event loop's thread (axon serve's, an ASGI server's) a batch held within the window is
    answered at once, as a local directory's is; one that must ask the store is handed to the
    thread pool (a coroutine), never waited for on the loop."""
    app, source, _ = tiered(weed, prefix, tmp_path, 60)
    weed.put(f"{prefix}/d/new.bin", b"made after the listing")

    async def on_loop(names: list[str]):
        query = "&".join(f"f{i}={n}" for i, n in enumerate(names))
        return app.handle_on_loop(Request("GET", "/api/stream-files", query))

    async def both():
        held = await on_loop(NAMES[:20])  # (more than INLINE_FILES would be planned in steps)
        assert source.hops == 0
        made = await on_loop([*NAMES[:20], "d/new.bin"])
        return held, made, await made

    held, made, later = asyncio.run(both())
    for response in (held, later):
        try:
            assert response.status == 200
        finally:
            response.close()
    assert not asyncio.iscoroutine(held) and asyncio.iscoroutine(made)


def tier_file(app: App, name: str) -> tuple[int, dict, bytes]:
    """``GET /files/NAME``, a kept file's slices read as a server sends them (by offset)."""
    response = app.handle(Request("GET", f"/files/{name}"))
    try:
        data = b"".join(os.pread(s.fd, s.count, s.offset) if isinstance(s, FileSlice) else s for s in response.body)
    finally:
        response.close()
    return response.status, dict(response.headers), data


def test_a_trusted_kept_file_is_one_object_that_every_batch_shares(weed, prefix, tmp_path):
    """Through the tier's open-file cache (axon serve's), a small kept file's bytes are trusted
    from the use that keeps them (a name is one version): every later batch within the window gets
    the one object made of that entry and those bytes, holding nothing; once the cache drops them
    (evicted, swept), they are not used again."""
    _, source, _ = tiered(weed, prefix, tmp_path, 60)
    source.share_kept_files(100, 60.0, 60.0, 1 << 20)
    for f in source.open_many(NAMES):  # opened through the cache, and trusted
        f.close()
    second, third = source.open_many(NAMES), source.open_many(NAMES)
    assert [f.data for f in third] == [body_of(i, 3000) for i in range(SMALL)]
    assert all(a is b for a, b in zip(second, third)) and source.hops == 0
    source.tier.files.clear()
    fourth = source.open_many(NAMES)
    try:
        assert [f.data for f in fourth] == [body_of(i, 3000) for i in range(SMALL)]
        assert not any(a is b for a, b in zip(third, fourth))
    finally:
        for f in fourth:
            f.close()
