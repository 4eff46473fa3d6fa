"""Two nodes serving copies of one tree (other inodes, other ctimes, another machine-id) with
``--portable-identity`` and one shared key give every file the same ETag and every batch the same
bytes, boundary included: a download begun on one resumes on the other."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest

from conftest import FILES, Client, batch_target

pytestmark = pytest.mark.slow  # several axon serve nodes

MTIME_NS = 1_700_000_000_987_654_321
SECRET = {"AXON_IDENTITY_SECRET": "shared by every node", "AXON_SECRET": ""}
BATCH = ["a.txt", "mid.bin", "sub/c.json", "small/f01.bin", "b.bin", "a.txt"]


@pytest.fixture(scope="module")
def trees(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """Two copies of the served files, as two hosts would hold them: same bytes and mtimes."""
    out = []
    for n in (1, 2):
        base = tmp_path_factory.mktemp(f"node{n}")
        for name, data in FILES.items():
            path = base / name
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_bytes(data)
            os.utime(path, ns=(MTIME_NS, MTIME_NS))
        out.append(base)
    return out[0], out[1]


def _other_machine_id(tmp_path: Path) -> list[str]:
    """A wrapper that runs the server with its own /etc/machine-id (a mount namespace), where
    this machine allows it: the key must come from the shared secret, not from the host."""
    if os.geteuid() != 0 or not shutil.which("unshare") or not os.path.exists("/etc/machine-id"):
        return []
    fake = tmp_path / "machine-id"
    fake.write_text("0123456789abcdef0123456789abcdef\n")
    return ["unshare", "--mount", "--propagation", "private", "sh", "-c",
            'mount --bind "$0" /etc/machine-id && exec "$@"', str(fake)]  # fmt: skip


@pytest.fixture
def nodes(spawn, trees, tmp_path):
    def start(*flags: str):
        one = spawn("--workers", "1", *flags, env=SECRET, serve_root=trees[0])
        two = spawn("--workers", "1", *flags, env=SECRET, serve_root=trees[1], wrap=_other_machine_id(tmp_path))
        return one.port, two.port

    return start


def _get(port: int, target: str, headers: dict[str, str] | None = None):
    with Client(port) as c:
        return c.get(target, headers)


TARGETS = [
    "/files/mid.bin",
    batch_target(BATCH),
    "/api/stream-files.zip?" + batch_target(BATCH).partition("?")[2],
    "/api/stream-files.tar?" + batch_target(BATCH).partition("?")[2],
]


def test_every_node_gives_the_same_identity_and_bytes(nodes) -> None:
    ports = nodes("--portable-identity")
    for target in TARGETS:
        one, two = (_get(port, target) for port in ports)
        assert one.status == two.status == 200, (target, one.body[:200], two.body[:200])
        assert one.header("etag") == two.header("etag"), target
        assert one.header("content-type") == two.header("content-type"), target  # the boundary
        assert one.header("last-modified") == two.header("last-modified")
        assert one.body == two.body, target
    with Client(ports[0]) as a, Client(ports[1]) as b:
        body = b'{"files": ["a.txt", "b.bin"]}'
        one, two = (c.request("POST", "/api/stream-files", {"Content-Type": "application/json"}, body) for c in (a, b))
    assert one.status == two.status == 200 and one.body == two.body and one.header("etag") == two.header("etag")


def test_a_batch_begun_on_one_node_resumes_on_the_other(nodes) -> None:
    first, second = nodes("--portable-identity")
    for target in TARGETS[1:]:
        whole = _get(first, target)
        cut = len(whole.body) // 3  # the connection to the first node broke here
        rest = _get(second, target, {"Range": f"bytes={cut}-", "If-Range": whole.header("etag")})
        assert rest.status == 206, (target, rest.body[:200])
        assert rest.header("content-range") == f"bytes {cut}-{len(whole.body) - 1}/{len(whole.body)}"
        assert whole.body[:cut] + rest.body == whole.body


def test_without_it_the_nodes_disagree(nodes) -> None:
    # The control: the same copies and key, named by inode and ctime, are different resources.
    first, second = nodes()
    for target in TARGETS[:2]:
        one, two = _get(first, target), _get(second, target)
        assert one.header("etag") != two.header("etag"), target
    whole = _get(first, TARGETS[1])
    rest = _get(second, TARGETS[1], {"Range": "bytes=100-", "If-Range": whole.header("etag")})
    assert rest.status == 200  # If-Range failed: the whole batch again, never a splice
