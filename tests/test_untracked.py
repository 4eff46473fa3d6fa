"""axon.untracked: what it takes out of the cycle collector's walk, and the proof that this is
safe for what a warm pool leaves in a real server: those objects die by reference count alone,
over rounds of new versions and evictions (an untracked object in a cycle would never be freed,
and each round would leave its files behind)."""

from __future__ import annotations

import gc
import http.client
from pathlib import Path

import pytest

from axon.app import App, built_for_offset_reads
from axon.server.config import ServerConfig
from axon.server.worker import ThreadServer
from axon.storage import file_cache
from axon.untracked import untracked

FILES = 120
#: Fewer entries than files: every round evicts some of them as well.
CACHE = 90
SIZE = 4096


class _Slotted:
    __slots__ = ("value",)


def test_an_object_is_taken_out_of_the_walk():
    obj = _Slotted()
    assert gc.is_tracked(obj)
    assert untracked(obj) is obj and not gc.is_tracked(obj)
    assert untracked(obj) is obj and not gc.is_tracked(obj)  # twice: nothing more happens
    assert untracked(5) == 5 and untracked("text") == "text"  # not the collector's: left as they are


def _rewrite(root: Path, generation: int) -> None:
    for i in range(FILES):
        (root / f"f{i:03d}.bin").write_bytes(bytes([generation % 256]) * (SIZE - 4) + i.to_bytes(4, "big"))


def _warm(conn: http.client.HTTPConnection, root: Path, generation: int) -> None:
    """Each file three times as ``/files/`` and as a batch of one: trusted, its heads remembered
    and its answer kept on its version; the last answers checked to be this generation's bytes."""
    for i in range(FILES):
        want = (root / f"f{i:03d}.bin").read_bytes()
        for target in (f"/files/f{i:03d}.bin", f"/api/stream-files?file1=f{i:03d}.bin"):
            for _ in range(3):
                conn.request("GET", target)
                response = conn.getresponse()
                body = response.read()
                assert response.status == 200, (target, body[:200])
            assert want in body


#: What a warm file leaves in a worker, each made untracked.
KINDS = ("CachedDescriptor", "TrustedFile", "KeptSignature", "Head", "Prepared")


def _alive(kinds=KINDS) -> dict[str, int]:
    counts = dict.fromkeys(kinds, 0)
    for o in gc.get_objects():
        name = type(o).__name__
        if name in counts:
            counts[name] += 1
    return counts


@pytest.fixture
def server(tmp_path, monkeypatch):
    monkeypatch.setattr(file_cache, "SETTLED_NS", -(10**18))  # trusted at once, as after 2 s
    root = tmp_path / "root"
    root.mkdir()
    _rewrite(root, 0)
    config = ServerConfig(port=0, file_cache=CACHE)
    with built_for_offset_reads(config.serving_store):
        app = App(root)
    server = ThreadServer(app, config).start()
    conn = http.client.HTTPConnection("127.0.0.1", server.port, timeout=10)
    try:
        yield root, conn
    finally:
        conn.close()
        server.stop()
        app.close()


def test_a_warm_pool_leaves_the_collector_nothing_to_walk(server):
    root, conn = server
    gc.collect()
    before = _nests()
    _warm(conn, root, 0)
    gc.collect()  # one collection: it lets go a tuple of atomic values, and no deeper one
    walked = _alive()
    assert sum(walked.values()) < 10, walked  # none a file (a few fixed answers: health, errors)
    assert _nests() - before < FILES // 4, _nests() - before  # a version's headers, its kept bytes: none a file


def _nests() -> int:
    """Tracked tuples that hold tuples."""
    return sum(1 for t in gc.get_objects() if type(t) is tuple and any(type(i) is tuple for i in t))


def test_what_a_warm_pool_leaves_dies_by_reference_count_alone(server, monkeypatch):
    """The proof that untracking them is safe: with the collector off (and the objects left
    tracked, so that they can be counted), rounds of new versions of every file, with evictions,
    leave none of them as garbage the collector would free: whatever of them is alive then is
    still held (by the caches and their bounded tables). One cycle through any of them would
    be a round's worth of garbage each round, never freed once untracked."""
    from axon import untracked as module

    monkeypatch.setattr(module, "_untrack", None)  # tracked, to be counted; nothing else differs
    root, conn = server
    gc.collect()
    gc.disable()
    try:
        for generation in range(4):  # every file a new version each round, read anew
            _rewrite(root, generation)
            _warm(conn, root, generation)
        before = _alive()
        gc.collect()
        after = _alive()
    finally:
        gc.enable()
    assert before == after, (before, after)
    assert after["TrustedFile"] <= CACHE and after["CachedDescriptor"] <= CACHE, after  # and evictions happened
    assert after["Head"] > 0 and after["Prepared"] > 0, after
