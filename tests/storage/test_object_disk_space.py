"""The disk tier's bound on a real directory: a temporary file is a live fill's exactly while a
fill holds its flock (whatever process id its name carries); making room deletes by the index,
without reading the directory; the index learns of other processes' fills from the journal."""

from __future__ import annotations

import os
import subprocess
import sys
import time

from axon.storage.object_disk_space import BLOCK, TEMP, Space

KiB = 1024


def put(directory, name: str, size: int, age: float = 0.0) -> str:
    """An object's file of ``size`` bytes, last used ``age`` seconds ago."""
    sub = os.path.join(directory, name[:2])
    os.makedirs(sub, exist_ok=True)
    path = os.path.join(sub, name)
    with open(path, "wb") as f:
        f.write(os.urandom(size))
    if age:
        when = time.time() - age
        os.utime(path, (when, when))
    return path


def commit(space: Space, name: str, size: int) -> str:
    """A fill of ``name`` through ``space``, as the tier makes one."""
    path = os.path.join(space.directory, name[:2], name)
    os.makedirs(os.path.dirname(path), exist_ok=True)
    temp = f"{path}.t.{BLOCK}{TEMP}"
    fd = space.reserve(-(-size // BLOCK) * BLOCK, temp)
    assert fd is not None
    os.pwrite(fd, os.urandom(size), 0)
    space.commit(temp, path, -(-size // BLOCK) * BLOCK, os.fstat(fd).st_blocks * 512)
    os.close(fd)
    return path


def test_a_temporary_file_is_a_live_fills_only_while_one_holds_it(tmp_path):
    space = Space(str(tmp_path), 1 << 20)
    # A dead fill whose name carries a process id that is alive here (its own namespace's
    # number, or one reused): no fill holds it, so it goes.
    orphan = put(tmp_path, f"ab{'0' * 62}-x.{os.getpid()}.{BLOCK}{TEMP}", 100)
    # A live fill in another process, holding its file's flock.
    live = os.path.join(tmp_path, "ab", f"ab{'1' * 62}-y.{1}.{BLOCK}{TEMP}")
    holder = subprocess.Popen(
        [sys.executable, "-c", "import fcntl, os, sys, time; fd = os.open(sys.argv[1], os.O_RDWR | os.O_CREAT); "
         "fcntl.flock(fd, fcntl.LOCK_EX); print(flush=True); time.sleep(30)", live],
        stdout=subprocess.PIPE, text=True)
    try:
        holder.stdout.readline()
        assert space.scan() == BLOCK  # the live fill's reservation
        assert not os.path.exists(orphan) and os.path.exists(live)
    finally:
        holder.kill()
        holder.wait()
    assert space.scan() == 0 and not os.path.exists(live)  # its filler died: it goes


def test_making_room_deletes_by_the_index_without_reading_the_directory(tmp_path, monkeypatch):
    bound = 300 * BLOCK
    space = Space(str(tmp_path), bound)
    space.scan()
    paths = [commit(space, f"{i:02x}{i:062x}-v", BLOCK) for i in range(300)]  # full, over 256 subdirectories
    old = time.time() - 100
    for i, path in enumerate(paths):
        os.utime(path, (old + i, old + i))  # the first is the least recently used
    reads, stats = [], []
    real_scandir, real_lstat = os.scandir, os.lstat
    monkeypatch.setattr(os, "scandir", lambda *a: reads.append(a) or real_scandir(*a))
    monkeypatch.setattr(os, "lstat", lambda *a, **k: stats.append(a) or real_lstat(*a, **k))
    commit(space, "ff" + "f" * 62 + "-w", BLOCK)
    monkeypatch.undo()
    gone = [p for p in paths if not os.path.exists(p)]
    assert reads == []  # no directory read: the index said what to delete
    assert len(gone) == 31 and gone == paths[:31]  # down to 90% of the bound, the oldest first
    assert len(stats) <= 2 * len(gone) + 2  # O(deleted), not O(files)
    assert space.used() == sum(os.lstat(p).st_blocks * 512 for p in paths[31:]) + BLOCK


def test_the_index_learns_of_other_processes_fills_and_their_hits(tmp_path):
    bound = 20 * BLOCK
    mine, other = Space(str(tmp_path), bound), Space(str(tmp_path), bound)
    mine.scan()
    theirs = [commit(other, f"a{i}{'0' * 62}-t", BLOCK) for i in range(5)]  # another process's fills
    ours = [commit(mine, f"b{i}{'0' * 62}-m", BLOCK) for i in range(5)]
    for age, path in enumerate(reversed(theirs + ours)):  # theirs the older, the first the oldest
        os.utime(path, (time.time() - 100 - age, time.time() - 100 - age))
    os.utime(theirs[0])  # a hit on the oldest since it was indexed: it moves up
    for i in range(11):
        commit(mine, f"c{i}{'0' * 62}-m", BLOCK)  # the last is past the bound: room made for it
    gone = [p for p in theirs + ours if not os.path.exists(p)]
    assert gone == theirs[1:4]  # down to 90% of the bound less its block


def test_a_long_journal_is_written_anew_from_what_is_there(tmp_path, monkeypatch):
    import axon.storage.object_disk_space as space_module

    monkeypatch.setattr(space_module, "JOURNAL_SLACK", 3)
    space = Space(str(tmp_path), 1 << 20)
    space.scan()
    longest, previous = 0, None
    for i in range(50):  # an object overwritten again and again: one file there, 50 commits
        path = commit(space, f"{i:02x}{'0' * 62}-v", BLOCK)
        if previous is not None:
            os.unlink(previous)
        previous = path
        longest = max(longest, len((tmp_path / ".journal").read_text().split()))
    assert longest <= 8  # twice one line, and three more (lines of about 70 bytes here)
    assert os.path.join(tmp_path, (tmp_path / ".journal").read_text().split()[-1]) == previous


def test_a_journal_that_cannot_be_written_costs_nothing_but_full_scans(tmp_path):
    (tmp_path / ".journal").mkdir()  # (as a full disk would refuse it)
    space = Space(str(tmp_path), 4 * BLOCK)
    assert space.scan() == 0  # a start still starts
    kept = [commit(space, f"{i:02x}{'0' * 62}-v", BLOCK) for i in range(6)]  # room made by scans
    assert sum(os.path.exists(p) for p in kept) <= 4 and os.path.exists(kept[-1])
    assert space.used() == sum(os.lstat(p).st_blocks * 512 for p in kept if os.path.exists(p))
