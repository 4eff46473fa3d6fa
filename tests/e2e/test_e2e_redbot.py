"""REDbot, an HTTP linter nobody here wrote, finds nothing at its "bad" level, on every runtime.

Each case is one request REDbot makes and then probes on its own (a range, both validators, gzip
negotiation: see e2e_redbot). A failure lists every note at warning level or above, so it tells
what to fix; warnings alone do not fail.
"""

from __future__ import annotations

import sys

import pytest

if sys.version_info < (3, 11):  # pyproject's test extra installs REDbot only there
    pytest.skip("REDbot needs Python 3.11 or later", allow_module_level=True)

from e2e_redbot import BAD, lint
from e2e_wire import batch_target

pytestmark = [pytest.mark.slow, pytest.mark.timeout(120)]  # every runtime over real sockets

# Longer than the 97 bytes REDbot's range probe asks for: on a shorter body the probe covers it
# all, and REDbot warns that the 206 is as long as the 200 (true, but of the probe, not Axon).
FILE = "/files/examples/a.bin"
BATCH = batch_target(["examples/small.txt", "deep/dir/c.bin"])
MISSING = "examples/no-such-file.txt"


def url(server, target: str) -> str:
    return f"http://127.0.0.1:{server.port}{target}"


def check(report, status: int) -> None:
    if report.status != status or report.error or report.at(BAD):
        pytest.fail(f'expected {status} and nothing "bad"\n{report.describe()}', pytrace=False)


@pytest.mark.parametrize(
    ("target", "status"),
    [(FILE, 200), (BATCH, 200), (f"/files/{MISSING}", 404), (batch_target([MISSING]), 404)],
    ids=["file", "batch", "file-404", "batch-404"],
)
def test_redbot_finds_nothing_bad(server, target, status):
    check(lint(url(server, target)), status)


@pytest.mark.parametrize("target", [FILE, BATCH], ids=["file", "batch"])
def test_redbot_finds_nothing_bad_in_a_304(server, target):
    etag = server.get(target).header("ETag")
    check(lint(url(server, target), [("If-None-Match", etag)]), 304)
