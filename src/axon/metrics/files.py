"""One process's counts in a file of its own, which every other process reads: how the workers of
one server are summed (``Metrics(directory=...)``).
"""

from __future__ import annotations

import mmap
import os
import struct
from pathlib import Path
from typing import Iterator

# Sample keys, as stored in a process's file: "r METHOD STATUS BUCKET" (requests, by bucket of
# their duration: the request counter and the histogram in one), "e STATUS CODE" (errors), and:
STARTED, BYTES, FILES, SUM = "started", "bytes", "files", "sum"

# An 8-byte header holding the bytes used, then entries [u32 key length][key, padded to 8][f64
# value]. Only its own process writes it, and an entry is complete before the header counts it,
# so a reader in another process sees whole entries; 8-byte aligned stores are single writes on
# the platforms we run on.
_USED = struct.Struct("<Q")
_LEN = struct.Struct("<I")
_VALUE = struct.Struct("<d")
_INITIAL = 16 * 1024


class Slots:
    """Named float64 values in a memory-mapped file that other processes read."""

    def __init__(self, path: Path) -> None:
        self.offsets: dict[str, int] = {}
        self.base: dict[str, float] = {}
        fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
        self._file = os.fdopen(fd, "r+b")
        size = os.fstat(fd).st_size
        if size < _INITIAL:
            os.ftruncate(fd, _INITIAL)
        self._map = mmap.mmap(fd, max(size, _INITIAL))
        self._used = _USED.size
        # A file already there is a dead process's whose pid we now have: carry on from its
        # counts, so that the sums never go backwards (and its requests are over).
        for key, offset, value in _entries(self._map):
            self.offsets[key] = offset
            self.base[key] = value
            self._used = offset + _VALUE.size
        if self.base:
            self.base[STARTED] = sum(v for k, v in self.base.items() if k.startswith("r "))
        _USED.pack_into(self._map, 0, self._used)

    def write(self, values: dict[str, float]) -> None:
        base = self.base
        for key in base.keys() - values.keys():
            values[key] = 0
        for key, value in values.items():
            offset = self.offsets.get(key)
            if offset is None:
                offset = self._append(key)
            _VALUE.pack_into(self._map, offset, value + base.get(key, 0))

    def _append(self, key: str) -> int:
        encoded = key.encode("utf-8")
        padded = encoded + b" " * (-(_LEN.size + len(encoded)) % 8)
        start = self._used
        end = start + _LEN.size + len(padded) + _VALUE.size
        if end > len(self._map):
            self._map.resize(max(2 * len(self._map), end))  # grows the file too
        _LEN.pack_into(self._map, start, len(padded))
        self._map[start + _LEN.size : start + _LEN.size + len(padded)] = padded
        offset = end - _VALUE.size
        _VALUE.pack_into(self._map, offset, 0.0)
        self._used = end
        _USED.pack_into(self._map, 0, end)  # publish the entry last
        self.offsets[key] = offset
        return offset


def read_file(path: Path) -> dict[str, float]:
    return {key: value for key, _, value in _entries(path.read_bytes())}


def _entries(data: bytes | mmap.mmap) -> Iterator[tuple[str, int, float]]:
    """(key, offset of its value, value) for each whole entry of a store file's contents."""
    if len(data) < _USED.size:
        return
    (used,) = _USED.unpack_from(data, 0)
    used = min(used, len(data))
    pos = _USED.size
    while pos + _LEN.size <= used:
        (length,) = _LEN.unpack_from(data, pos)
        key_end = pos + _LEN.size + length
        if key_end + _VALUE.size > used:
            return
        key = bytes(data[pos + _LEN.size : key_end]).decode("utf-8").rstrip(" ")
        (value,) = _VALUE.unpack_from(data, key_end)
        yield key, key_end, value
        pos = key_end + _VALUE.size


def process_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True  # alive, just not ours
    return True
