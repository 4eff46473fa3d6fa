"""The CRC-32 cache: one read per file version, bounded, never an old CRC for a new version."""

from __future__ import annotations

import mmap
import os
import zlib

import pytest

from axon.errors import FileChanged
from axon.storage.crc_cache import CrcCache, Version, read_crc32


def version(fd):
    st = os.fstat(fd)
    return Version(st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns)


@pytest.fixture
def opened(tmp_path):
    path = tmp_path / "f.bin"
    path.write_bytes(os.urandom(3 * 1024 * 1024 + 17))  # more than one CHUNK
    fd = os.open(path, os.O_RDONLY)
    yield path, fd
    os.close(fd)


def test_computed_once_per_version(opened):
    path, fd = opened
    cache = CrcCache(settled_ns=0)
    v = version(fd)
    assert cache.known(v) is None and cache.crc32(fd, v, read=False) is None  # not known: not read
    assert cache.crc32(fd, v) == zlib.crc32(path.read_bytes())
    assert cache.crc32(fd, v, read=False) == zlib.crc32(path.read_bytes())  # known: not read again


def test_data_in_memory_is_not_read_again(opened):
    path, fd = opened
    cache = CrcCache(settled_ns=0)
    assert cache.crc32(fd, version(fd), data=path.read_bytes()) == zlib.crc32(path.read_bytes())


def test_a_file_changed_since_opened_is_refused(opened):
    path, fd = opened
    cache = CrcCache(settled_ns=0)
    planned = version(fd)
    with open(path, "ab") as out:
        out.write(b"more")
    with pytest.raises(FileChanged):
        cache.crc32(fd, planned)
    assert cache.known(planned) is None


def test_a_file_shorter_than_planned_has_changed(opened):
    path, fd = opened
    with pytest.raises(FileChanged):
        read_crc32(fd, os.fstat(fd).st_size + 1)


def test_a_small_files_crc_is_read_again_once_valid_old_a_large_ones_stands(opened, tmp_path):
    """A second write through one shared mmap leaves a file's version (size and times) as it was:
    a small file's kept CRC is read again after the window, a large one's (costly to read) is not."""
    path, fd = opened
    small = tmp_path / "small.bin"
    small.write_bytes(b"....")
    small_fd = os.open(small, os.O_RDWR)
    now = [0.0]
    cache = CrcCache(settled_ns=0, valid=5.0, monotonic=lambda: now[0])
    try:
        with mmap.mmap(small_fd, 0) as mapped:
            mapped[:] = b"old!"
            versions = [version(small_fd), version(fd)]
            first = [cache.crc32(small_fd, versions[0]), cache.crc32(fd, versions[1])]
            assert first[0] == zlib.crc32(b"old!")
            mapped[:] = b"new!"
            if version(small_fd) != versions[0]:
                pytest.skip("the kernel wrote the page back between the two writes")
            now[0] = 4.9
            assert cache.lookup(versions) == first  # within the window: as kept
            now[0] = 5.0
            assert cache.lookup(versions) == [None, first[1]]  # the small one is due to be read again
            assert cache.crc32(small_fd, versions[0], read=False) is None  # not read where reading is refused
            assert cache.crc32(small_fd, versions[0]) == zlib.crc32(b"new!")
            assert cache.lookup(versions) == [zlib.crc32(b"new!"), first[1]]
    finally:
        os.close(small_fd)


def test_a_file_not_settled_is_not_kept(opened):
    # Changed a moment ago: a second write within the same clock tick could leave its stat as
    # is, so its CRC serves this response only.
    path, fd = opened
    cache = CrcCache()
    v = version(fd)
    cache.crc32(fd, v)
    assert cache.known(v) is None
    later = CrcCache(clock=lambda: v[4] + cache.settled_ns)
    later.crc32(fd, v)
    assert later.known(v) is not None


def test_bounded_least_recently_used(tmp_path):
    cache = CrcCache(size=2, settled_ns=0)
    fds = []
    for i in range(3):
        (tmp_path / f"{i}").write_bytes(b"%d" % i)
        fds.append(os.open(tmp_path / f"{i}", os.O_RDONLY))
    try:
        v = [version(fd) for fd in fds]
        cache.crc32(fds[0], v[0])
        cache.crc32(fds[1], v[1])
        cache.known(v[0])  # used: the oldest is now 1
        cache.crc32(fds[2], v[2])
        assert cache.known(v[1]) is None and cache.known(v[0]) is not None and cache.known(v[2]) is not None
    finally:
        for fd in fds:
            os.close(fd)


def test_lookup_answers_many_versions_at_once_and_keeps_them_recent(tmp_path):
    cache = CrcCache(size=2, settled_ns=0)
    fds, v = [], []
    for i in range(3):
        path = tmp_path / f"f{i}"
        path.write_bytes(bytes([i]) * 10)
        fd = os.open(path, os.O_RDONLY)
        fds.append(fd)
        st = os.fstat(fd)
        v.append(Version(st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns))
    try:
        first = cache.crc32(fds[0], v[0])
        second = cache.crc32(fds[1], v[1])
        assert cache.lookup([v[1], v[2], v[0]]) == [second, None, first]  # v[0] used last
        cache.crc32(fds[2], v[2])  # evicts the least recently used: v[1]
        assert cache.lookup([v[0], v[1], v[2]]) == [first, None, zlib.crc32(bytes([2]) * 10)]
        assert cache.crc32(fds[1], v[1], read=False) is None  # not known: None rather than a read
    finally:
        for fd in fds:
            os.close(fd)
