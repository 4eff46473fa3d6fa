"""Batches named by listings, and small objects sent from the bytes kept for their ETags,
against a real SeaweedFS whose own metrics count the requests it answered (GET, HEAD as GET,
LIST): a repeated batch is one listing and no GET, an overwritten object is fetched again, a
deleted one is a 404 naming it, a key the listing did not reach is still opened."""

from __future__ import annotations

import asyncio
import io
import json
import time
import uuid
import zipfile

import pytest

from axon.app import App, Request

pytest.importorskip("obstore")

import obstore  # noqa: E402

from axon.config import object_store_environment  # noqa: E402
from axon.storage.object_listing import ENTRY_OVERHEAD, PAGE, ListedKeys, Run, plan_runs  # noqa: E402
from axon.storage.object_stream import ObjectStreamBroken  # noqa: E402
from axon.storage.objects import OPEN_READ, ObjectSource  # noqa: E402
from test_objects import call  # noqa: E402  # one App call, its body read whole, for both files

pytestmark = pytest.mark.slow  # counts a real SeaweedFS's requests

SMALL = 40  # more than LIST_MIN
LARGE = 20


def body_of(i: int, size: int, version: bytes = b"v1") -> bytes:
    head = b"%s-%06d-" % (version, i)
    return (head * (size // len(head) + 1))[:size]


def put_all(weed, objects: dict[str, bytes]) -> None:
    async def run() -> None:
        gate = asyncio.Semaphore(32)

        async def one(key: str, data: bytes) -> None:
            async with gate:
                await obstore.put_async(weed.store, key, data)

        await asyncio.gather(*(one(k, d) for k, d in objects.items()))

    asyncio.run(run())


@pytest.fixture
def prefix(weed) -> str:
    """A prefix of this test's own: SMALL objects of 3,000 bytes under d/."""
    name = f"listed-{uuid.uuid4().hex[:8]}"
    put_all(weed, {f"{name}/d/{i:03d}.bin": body_of(i, 3000) for i in range(SMALL)})
    return name


def source_of(weed, prefix: str, **options) -> ObjectSource:
    return ObjectSource(weed.url(prefix), env=object_store_environment(weed.env()), timeout=5, **options)


def batch(app: App, names: list[str], fmt: str = "") -> tuple[int, dict, bytes]:
    return call(app, "POST", f"/api/stream-files{fmt}", body=json.dumps({"files": names}).encode())


def counted(weed, action):
    """What ``action`` returned, and the store requests it caused (GET, LIST), as the store
    counts them."""
    before = weed.requests()
    result = action()
    time.sleep(0.2)  # the store counts a request once its answer is written
    after = weed.requests()
    return result, {kind: after.get(kind, 0) - before.get(kind, 0) for kind in ("GET", "LIST")}


def parts(parse_multipart, headers: dict, body: bytes) -> list[bytes]:
    return [p.get_payload(decode=True) for p in parse_multipart(headers["Content-Type"], body)]


# -- the runs a batch is listed in (pure) ----------------------------------------------------------


def test_runs_cover_the_keys_from_just_before_the_first():
    keys = [f"d/{i:04d}.bin" for i in reversed(range(2500))] + ["d/0001.bin"]
    runs = plan_runs(keys, list_min=16)
    assert [len(r.keys) for r in runs] == [834, 834, 832]  # equal runs of at most a page
    assert all(len(r.keys) <= PAGE for r in runs)
    first = runs[0]
    assert (first.prefix, first.last) == ("d", "d/0833.bin")
    assert first.offset is not None and first.offset < "d/0000.bin" and "d/0000.bin".startswith(first.offset)
    assert set().union(*(r.keys for r in runs)) == set(keys)


def test_runs_share_the_directory_their_keys_share():
    assert plan_runs([f"a/x/{i:02d}" for i in range(20)] + ["a/y/z"], list_min=16)[0].prefix == "a"
    assert plan_runs([f"top{i:02d}" for i in range(20)], list_min=16)[0].prefix == ""
    assert plan_runs([f"a/b{i:02d}" for i in range(20)], list_min=16)[0].prefix == "a"  # not "a/b"


def test_far_apart_directories_are_listed_apart_and_small_ones_together():
    far = plan_runs([f"a/{i:02d}" for i in range(20)] + [f"z/{i:02d}" for i in range(20)], list_min=16)
    assert [(r.prefix, len(r.keys)) for r in far] == [("a", 20), ("z", 20)]
    shards = plan_runs([f"data/shard-{s:03d}/{i}.jpg" for s in range(100) for i in range(5)], list_min=16)
    assert [(r.prefix, len(r.keys)) for r in shards] == [("data", 500)]
    # A directory too small to stand alone joins the next one.
    mixed = plan_runs(["a/x", "b/00"] + [f"b/{i:02d}" for i in range(1, 20)] + [f"c/{i:02d}" for i in range(20)],
                      list_min=16)
    assert [(r.prefix, len(r.keys)) for r in mixed] == [("", 21), ("c", 20)]


def test_a_small_batch_is_not_listed():
    assert plan_runs(["a", "b", "a"] * 10, list_min=16) == []
    assert plan_runs([f"k{i}" for i in range(16)], list_min=16) == [
        Run("", "k", "k9", frozenset(f"k{i}" for i in range(16)))]


def entries(count: int, length: int) -> dict[str, dict]:
    keys = [f"{i:04d}".ljust(length, "k") for i in range(count)]
    return {k: {"path": k, "size": 1, "e_tag": '"e"'} for k in keys}


def test_listed_keys_stand_for_their_window_only():
    table = ListedKeys(10.0)
    named = entries(3, 10)
    table.note(named, 100.0, list(named))
    assert table.current(list(named), 110.0) == named  # listed at most 10 s before the batch began
    assert table.current(list(named), 110.5) == {} and len(table) == 0  # past it: gone, listed again
    off = ListedKeys(0.0)
    off.note(named, 100.0, list(named))
    assert len(off) == 0 and off.current(list(named), 100.0) == {}  # 0: nothing kept, every batch lists


def test_listed_keys_keep_within_their_count_and_bytes():
    by_count = ListedKeys(10.0, keys=20)
    named = entries(300, 10)
    by_count.note(named, 0.0, ["0003kkkkkk"])
    assert len(by_count) == 20 and "0003kkkkkk" in by_count.current(["0003kkkkkk"], 1.0)  # the wanted key last
    long_key = 1024 + 3 + ENTRY_OVERHEAD  # S3's longest key, its ETag, the entry
    by_bytes = ListedKeys(10.0, capacity=10 * long_key)
    by_bytes.note(entries(300, 1024), 0.0, [])
    assert len(by_bytes) == 10 and by_bytes.used <= by_bytes.capacity


# -- against the store --------------------------------------------------------------------------------


def test_a_listings_etag_is_the_etag_a_get_answers(weed, prefix):
    """The listed ETag is what the bytes are later fetched with (If-Match) or found by: it must
    be the store's ETag of the object, quoted as a GET's header quotes it."""
    listed = {m["path"]: m for chunk in obstore.list(weed.store, f"{prefix}/d", chunk_size=PAGE) for m in chunk}
    assert len(listed) == SMALL
    for key in (f"{prefix}/d/000.bin", f"{prefix}/d/017.bin"):
        got = obstore.get(weed.store, key)
        assert listed[key]["e_tag"] == got.meta["e_tag"]
        assert listed[key]["e_tag"].startswith('"') and listed[key]["e_tag"].endswith('"')
        assert listed[key]["size"] == got.meta["size"] == 3000
        assert int(listed[key]["last_modified"].timestamp()) == int(got.meta["last_modified"].timestamp())


def test_a_repeated_batch_is_one_listing_and_no_get(weed, prefix, parse_multipart):
    app = App(store=source_of(weed, prefix))
    names = [f"d/{i:03d}.bin" for i in range(SMALL)]
    (status, headers, body), cold = counted(weed, lambda: batch(app, names))
    assert status == 200 and parts(parse_multipart, headers, body) == [body_of(i, 3000) for i in range(SMALL)]
    assert cold == {"GET": SMALL, "LIST": 1}  # listed, then each opened: nothing kept yet
    (status, again, body2), warm = counted(weed, lambda: batch(app, names))
    assert (status, body2) == (200, body)
    assert warm == {"GET": 0, "LIST": 1}
    assert again["ETag"] == headers["ETag"]  # named alike from a listing and from GETs
    # As a zip: every CRC from the kept bytes, still no GET.
    (status, _, archive), warm = counted(weed, lambda: batch(app, names, ".zip"))
    with zipfile.ZipFile(io.BytesIO(archive)) as z:
        assert z.testzip() is None and z.read("d/005.bin") == body_of(5, 3000)
    assert warm == {"GET": 0, "LIST": 1}


def test_without_the_cache_a_repeated_batch_gets_every_object(weed, prefix):
    app = App(store=source_of(weed, prefix, cache_bytes=0))
    names = [f"d/{i:03d}.bin" for i in range(SMALL)]
    batch(app, names)
    (status, _, _), warm = counted(weed, lambda: batch(app, names))
    assert status == 200 and warm == {"GET": SMALL, "LIST": 1}


def test_beyond_a_responses_room_kept_bytes_are_sent_from_the_cache(weed, prefix, parse_multipart):
    """A response holds at most prefetch_bytes of bytes from opening; the stream takes the rest
    from the cache as it reaches them, still without a GET."""
    app = App(store=source_of(weed, prefix, prefetch_bytes=10_000))
    names = [f"d/{i:03d}.bin" for i in range(SMALL)]
    batch(app, names)
    (status, headers, body), warm = counted(weed, lambda: batch(app, names))
    assert status == 200 and parts(parse_multipart, headers, body) == [body_of(i, 3000) for i in range(SMALL)]
    assert warm == {"GET": 0, "LIST": 1}


def test_an_object_overwritten_between_batches_is_fetched_again(weed, prefix, parse_multipart):
    app = App(store=source_of(weed, prefix))
    names = [f"d/{i:03d}.bin" for i in range(SMALL)]
    _, first, _ = batch(app, names)
    weed.put(f"{prefix}/d/005.bin", body_of(5, 3000, b"v2"))  # the same size: only its ETag differs
    (status, headers, body), warm = counted(weed, lambda: batch(app, names))
    got = parts(parse_multipart, headers, body)
    assert status == 200 and got[5] == body_of(5, 3000, b"v2") and got[4] == body_of(4, 3000)
    assert warm == {"GET": 1, "LIST": 1}
    assert headers["ETag"] != first["ETag"]


def test_an_object_deleted_between_batches_is_a_404_naming_it(weed, prefix):
    app = App(store=source_of(weed, prefix))
    names = [f"d/{i:03d}.bin" for i in range(SMALL)] + ["d/never.bin"]
    assert batch(app, names)[0] == 404
    weed.delete(f"{prefix}/d/007.bin")
    (status, _, body), warm = counted(weed, lambda: batch(app, names))
    error = json.loads(body)["error"]
    assert status == 403 or status == 404
    assert error["paths"] == ["d/007.bin", "d/never.bin"]
    assert [d["status"] for d in error["details"]] == [404, 404]
    assert warm == {"GET": 2, "LIST": 1}  # the two keys the listing did not name were asked


def test_a_key_past_where_the_listing_stops_is_opened(weed, parse_multipart):
    """A run reads at most two pages: keys beyond them (here, after 2,100 others) are opened as
    before, and the listing reads no further page."""
    name = f"sparse-{uuid.uuid4().hex[:8]}"
    wanted = {f"a/{i:03d}.bin": body_of(i, 100) for i in range(SMALL)} | {"a/z.bin": b"last"}
    put_all(weed, {f"{name}/{k}": d for k, d in wanted.items()}
            | {f"{name}/a/m/{i:05d}": b"" for i in range(2 * PAGE + 100)})
    app = App(store=source_of(weed, name))
    batch(app, list(wanted))
    (status, headers, body), warm = counted(weed, lambda: batch(app, list(wanted)))
    assert status == 200 and parts(parse_multipart, headers, body) == list(wanted.values())
    assert warm == {"GET": 1, "LIST": 2}


def test_large_objects_are_named_by_the_listing_not_opened(weed, parse_multipart):
    """An object past OPEN_READ is fetched once, with If-Match, as it is sent: one GET each,
    where opening it first costs two."""
    name = f"large-{uuid.uuid4().hex[:8]}"
    size = OPEN_READ + 40_000
    put_all(weed, {f"{name}/l/{i:02d}.bin": body_of(i, size) for i in range(LARGE)})
    names = [f"l/{i:02d}.bin" for i in range(LARGE)]
    for listing, expected in ((True, {"GET": LARGE, "LIST": 1}), (False, {"GET": 2 * LARGE, "LIST": 0})):
        app = App(store=source_of(weed, name, listing=listing))
        (status, headers, body), asked = counted(weed, lambda: batch(app, names))
        assert status == 200 and parts(parse_multipart, headers, body) == [body_of(i, size) for i in range(LARGE)]
        assert asked == expected


def test_an_object_replaced_after_its_listing_cuts_the_body(weed):
    """The listing named the version; the GET after the status line carries If-Match on it,
    so the stream breaks rather than send another version's bytes."""
    name = f"raced-{uuid.uuid4().hex[:8]}"
    size = OPEN_READ + 1000
    put_all(weed, {f"{name}/l/{i:02d}.bin": body_of(i, size) for i in range(LARGE)})
    app = App(store=source_of(weed, name))
    response = app.handle(Request("POST", "/api/stream-files", "", {},
                                  json.dumps({"files": [f"l/{i:02d}.bin" for i in range(LARGE)]}).encode()))
    assert response.status == 200 and response.stream is not None
    weed.put(f"{name}/l/03.bin", body_of(3, size, b"v2"))
    sent = b""
    with pytest.raises(ObjectStreamBroken):
        for chunk in response.stream:
            sent += chunk
    response.close()
    assert b"v2-" not in sent and len(sent) < int(dict(response.headers)["Content-Length"])


def test_keys_of_any_spelling_are_served_whether_listed_or_opened(weed, parse_multipart):
    """A listing names keys in the store's spelling, matched to the keys requested as strings:
    SeaweedFS spells these as they were put (so the repeated batch asks no GET); a store that
    spelled one otherwise would have it opened instead. Each part holds its own object."""
    name = f"spelled-{uuid.uuid4().hex[:8]}"
    wanted = {f"d/{i:02d} é+%20 ü.bin": body_of(i, 500) for i in range(SMALL)}
    put_all(weed, {f"{name}/{k}": d for k, d in wanted.items()})
    app = App(store=source_of(weed, name))
    for expected_gets in (SMALL, 0):
        (status, headers, body), asked = counted(weed, lambda: batch(app, list(wanted)))
        assert status == 200 and parts(parse_multipart, headers, body) == list(wanted.values())
        assert asked == {"GET": expected_gets, "LIST": 1}


def test_credentials_that_may_not_list_open_every_key(weed, prefix, parse_multipart, caplog):
    """An identity allowed to read objects but not to list them: the batch is opened key by key
    (served, not a 503), and the store is not asked to list again for a while (SeaweedFS does
    not count a refused request in its metrics: the source's one warning says it)."""
    import seaweed

    env = object_store_environment(
        weed.env(AWS_ACCESS_KEY_ID=seaweed.READER_KEY, AWS_SECRET_ACCESS_KEY=seaweed.READER_SECRET))
    app = App(store=ObjectSource(weed.url(prefix), env=env, timeout=5))
    names = [f"d/{i:03d}.bin" for i in range(SMALL)]
    before = weed.requests()
    for _ in range(2):
        status, headers, body = batch(app, names)
        assert status == 200 and parts(parse_multipart, headers, body) == [body_of(i, 3000) for i in range(SMALL)]
    time.sleep(0.2)
    after = weed.requests()
    assert after.get("GET", 0) - before.get("GET", 0) == 2 * SMALL
    said = [r.getMessage() for r in caplog.records if r.name == "axon.storage"]
    assert len(said) == 1 and "refuses to list" in said[0] and "403" in said[0]
