"""The tar format: POSIX ustar with pax headers where needed, read back by tarfile, GNU tar and
bsdtar, hostile names included."""

from __future__ import annotations

import io
import tarfile

from axon.limits import Limits
from axon.plan.batch import plan_batch
from axon.plan.formats import tar
from axon.storage.local import FileStore

from archive_support import HOSTILE, extracted, make_hostile, render, tool

KEY = b"k" * 32
LIMITS = Limits()


def test_tar_round_trip_in_tarfile(root, store):
    paths = ["a.txt", "sub/../b.bin", "empty.txt", "sub/deeper/d.txt"]
    body = render(plan_batch(store, paths, LIMITS, key=KEY, headers={}, fmt=tar))
    assert len(body) % 512 == 0 and body.endswith(bytes(1024))
    with tarfile.open(fileobj=io.BytesIO(body)) as archive:
        members = archive.getmembers()
        # Named by the requested path, normalized.
        assert [m.name for m in members] == ["a.txt", "b.bin", "empty.txt", "sub/deeper/d.txt"]
        for m, path in zip(members, ["a.txt", "b.bin", "empty.txt", "sub/deeper/d.txt"]):
            assert m.isreg() and m.mode == 0o644 and m.uid == 0
            assert m.mtime == (root / path).stat().st_mtime_ns // 10**9
            assert archive.extractfile(m).read() == (root / path).read_bytes()
        assert all(m.pax_headers == {} for m in members)  # ASCII names that fit: plain ustar


def test_hostile_names_come_out_the_same_in_every_tool(root, tmp_path):
    made = make_hostile(root)
    store = FileStore(root)
    response = plan_batch(store, HOSTILE, LIMITS, key=KEY, headers={}, fmt=tar)
    assert dict(response.headers)["Content-Disposition"] == 'attachment; filename="batch.tar"'
    body = render(response)
    with tarfile.open(fileobj=io.BytesIO(body)) as archive:
        assert archive.getnames() == HOSTILE
        assert {m.name: archive.extractfile(m).read() for m in archive.getmembers()} == made
    (tmp_path / "batch.tar").write_bytes(body)
    for argv in (["tar", "-tvf"], ["bsdtar", "-tvf"]):
        assert tool(*argv, str(tmp_path / "batch.tar")).count("\n") == len(HOSTILE)
    for argv in (["tar", "-xf"], ["bsdtar", "-xf"]):
        out = tmp_path / argv[0]
        out.mkdir()
        tool(*argv, str(tmp_path / "batch.tar"), "-C", str(out))
        assert extracted(out) == made, argv


def test_a_path_named_twice_is_two_entries(store):
    body = render(plan_batch(store, ["a.txt", "b.bin", "./a.txt"], LIMITS, key=KEY, headers={}, fmt=tar))
    with tarfile.open(fileobj=io.BytesIO(body)) as archive:
        assert archive.getnames() == ["a.txt", "b.bin", "a.txt"]

