"""Fixtures shared by the core's unit tests: a sample root, and helpers to read what a plan says.

Kept small on purpose: the e2e, client, server, bench and deploy suites have their own conftests.
"""

from __future__ import annotations

import email.parser
import email.policy
import os
from pathlib import Path

import pytest

#: The sample root: relative path -> content. Tests add what else they need (symlinks, FIFOs).
SAMPLES: dict[str, bytes] = {
    "a.txt": b"hello, axon\n",
    "b.bin": bytes(range(256)) * 40,  # 10,240 bytes, every byte value, CR and LF included
    "empty.txt": b"",
    "sub/c.json": b'{"c": 3}\n',
    "sub/deeper/d.txt": b"d" * 1000,
    ".hidden": b"hidden\n",
    "sub/.secret": b"secret\n",
}


@pytest.fixture
def root(tmp_path: Path) -> Path:
    """A root directory holding ``SAMPLES``; ``tmp_path / "outside.txt"`` sits next to it."""
    base = tmp_path / "root"
    for name, data in SAMPLES.items():
        path = base / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(data)
    (tmp_path / "outside.txt").write_bytes(b"outside the root\n")
    return base


@pytest.fixture
def store(root: Path):
    from axon.storage.local import FileStore

    return FileStore(root)


def _render(segments) -> bytes:
    """A segment list as the bytes a runtime would send, reading each FileSlice with pread."""
    out = bytearray()
    for seg in segments:
        if isinstance(seg, bytes):
            out += seg
        else:
            data = os.pread(seg.fd, seg.count, seg.offset)
            assert len(data) == seg.count, f"slice {seg} reads {len(data)} bytes"
            out += data
    return bytes(out)


def _parse_multipart(content_type: str, body: bytes):
    """Parse a multipart body with the standard library (an independent parser).

    Returns the ``email.message.EmailMessage`` parts; each part's bytes are
    ``part.get_payload(decode=True)``.
    """
    raw = b"Content-Type: " + content_type.encode("ascii") + b"\r\n\r\n" + body
    msg = email.parser.BytesParser(policy=email.policy.HTTP).parsebytes(raw)
    assert msg.is_multipart(), content_type
    assert not msg.defects, msg.defects
    parts = list(msg.iter_parts())
    for part in parts:
        assert not part.defects, part.defects
    return parts


def _open_fds() -> set[str]:
    return set(os.listdir("/proc/self/fd"))


@pytest.fixture(scope="session")
def render():
    return _render


@pytest.fixture(scope="session")
def parse_multipart():
    return _parse_multipart


@pytest.fixture(scope="session")
def open_fds():
    """A function returning the set of this process's open descriptors.

    Compare with ``open_fds() <= before`` (no new descriptor): the garbage collector may close
    an unrelated one meanwhile (an old FileStore's root), so the sets need not be equal.
    """
    return _open_fds



def pytest_collectstart(collector: pytest.Collector) -> None:
    """``from conftest import ...`` in a test module means the conftest of its own directory.

    The test directories are not packages, so every conftest.py is a module named ``conftest``,
    and ``sys.modules`` keeps whichever was imported last: with two directories named on the
    command line (``pytest tests/storage tests/server``) both are imported before any test module,
    and the first directory's tests would import the second one's. Its own, registered by path,
    is put back just before the module is imported."""
    import sys

    if isinstance(collector, pytest.Module):
        own = collector.config.pluginmanager.get_plugin(str(collector.path.parent / "conftest.py"))
        if own is not None:
            sys.modules["conftest"] = own
