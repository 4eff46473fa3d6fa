"""Fixtures shared by the core's unit tests: a sample root, and helpers to read what a plan says.

Kept small on purpose: the e2e, client, server, bench and deploy suites have their own conftests.
"""

from __future__ import annotations

import email.parser
import email.policy
import os
import re
from pathlib import Path

import pytest
from hypothesis import settings

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


# ------------------------------------------------------------------- the fast loop's examples

#: In the fast loop each property test runs this share of the examples its ``@settings`` asks
#: for (at least ``FAST_EXAMPLES_FLOOR``); the full run, which CI is, runs them all.
FAST_EXAMPLES_SHARE = 10
FAST_EXAMPLES_FLOOR = 20
settings.register_profile("fast", deadline=None)


def fast_examples(asked: int) -> int:
    return max(min(asked, FAST_EXAMPLES_FLOOR), asked // FAST_EXAMPLES_SHARE)


def fast_loop(config: pytest.Config) -> bool:
    """The ``fast`` profile: named with ``--hypothesis-profile``, or the fast loop's
    ``-m "not slow"`` (README, "Development") when no profile is named."""
    named = config.getoption("--hypothesis-profile", None)
    return named == "fast" or (named is None and "not slow" in (config.getoption("markexpr", "") or ""))


#: A test module all of whose tests are slow: ``pytestmark = pytest.mark.slow``, or a list of
#: marks that begins with it.
ALL_SLOW = re.compile(r"^pytestmark = \[?\s*pytest\.mark\.slow\b", re.MULTILINE)


def pytest_ignore_collect(collection_path: Path, config: pytest.Config) -> bool | None:
    """The fast loop does not import a module all of whose tests it would deselect: the
    engines, browsers and linters those import would cost each worker seconds."""
    if (
        (config.getoption("markexpr", "") or "").strip() == "not slow"
        and collection_path.suffix == ".py"
        and collection_path.name.startswith("test_")
        and ALL_SLOW.search(collection_path.read_text(encoding="utf-8"))
    ):
        return True
    return None  # not False: that would overrule pytest's own --ignore


def pytest_configure(config: pytest.Config) -> None:
    if fast_loop(config):
        settings.load_profile("fast")


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """A test's own ``@settings(max_examples=...)`` wins over any profile: the fast loop scales
    it down here instead."""
    if fast_loop(config):
        for item in items:
            use_fast_examples(getattr(item, "obj", None))


def use_fast_examples(test) -> None:
    """Have the ``@given`` test ``test`` run :func:`fast_examples` of its examples. Hypothesis
    reads a test's settings from this attribute at each call; were it gone, all would run."""
    own = getattr(test, "_hypothesis_internal_use_settings", None)
    if getattr(test, "is_hypothesis_test", False) and own is not None and not getattr(test, "_fast_examples", False):
        test._hypothesis_internal_use_settings = settings(own, max_examples=fast_examples(own.max_examples))
        test._fast_examples = True


# ------------------------------------------------------------------- the workers' shares

#: Modules that use one session server, given to one worker as a unit by ``--dist loadfile``
#: (which would otherwise hand them out one by one, and each worker start the server for its
#: own): the modules' path prefix -> the unit's name.
SHARED_SERVER_MODULES = {"tests/storage/test_object": "SeaweedFS"}


@pytest.hookimpl(optionalhook=True)  # pytest-xdist's hook, when it is installed
def pytest_xdist_make_scheduler(config: pytest.Config, log):
    if config.getoption("dist", None) != "loadfile":
        return None
    from xdist.scheduler import LoadFileScheduling

    class SharedServerScheduling(LoadFileScheduling):
        def _split_scope(self, nodeid: str) -> str:
            module = super()._split_scope(nodeid)
            return next((unit for prefix, unit in SHARED_SERVER_MODULES.items() if module.startswith(prefix)), module)

    return SharedServerScheduling(config, log)
