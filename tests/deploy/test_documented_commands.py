"""The README's "Running Axon" commands, run as written, serve every URL ``/api/limits`` promises.

A runtime's own cap on the request line (gunicorn's 4,094 bytes, uWSGI's 4 KiB buffer) sits in
front of Axon: a URL under ``max_url_bytes`` that the runtime refuses is a limit the client was
told does not exist. Each command is taken from the README's table and only told where to listen.
"""

from __future__ import annotations

import json
import os
import re
import shlex
import shutil
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path

import pytest
from deploy_rig import HOST, REPO, free_port

from axon.limits import DEFAULT_LIMITS

pytestmark = pytest.mark.slow  # real deployments: containers, installs, nginx in front

# Where each runtime listens, replacing its default port (8000 or 8080, taken on a shared host).
LISTEN = {
    "Axon's server": lambda port: ["--host", HOST, "--port", str(port)],
    "gunicorn": lambda port: ["--bind", f"{HOST}:{port}"],
    "uWSGI": lambda port: ["--http-socket", f"{HOST}:{port}"],
    "waitress": lambda port: [f"--listen={HOST}:{port}"],
    "uvicorn": lambda port: ["--host", HOST, "--port", str(port)],
    "hypercorn": lambda port: ["--bind", f"{HOST}:{port}"],
    "granian": lambda port: ["--host", HOST, "--port", str(port)],
}


def documented_commands() -> dict[str, str]:
    """The runtime table of the README's "Running Axon": name -> command, as printed."""
    section = REPO.joinpath("README.md").read_text().split("\n## Running Axon\n", 1)[1].split("\n## ", 1)[0]
    return dict(re.findall(r"^\| ([^|]+?) \| `([^`]+)` \|$", section, re.M))


COMMANDS = documented_commands()


def test_the_table_is_read():
    assert set(COMMANDS) == set(LISTEN), COMMANDS


def executable(word: str) -> str | None:
    """A command's executable: the one installed beside this interpreter (the venv's) first, as
    scripts/test.sh's PATH finds it."""
    beside = Path(sys.executable).parent / word
    return str(beside) if beside.exists() else shutil.which(word)


def argv_for(name: str, root: Path, port: int) -> tuple[list[str], dict[str, str]]:
    """The documented command's argv and environment, serving ``root`` and listening on ``port``."""
    env = dict(os.environ)
    words = shlex.split(COMMANDS[name].replace("/srv/files", str(root)))
    while "=" in words[0]:  # AXON_ROOT=/srv/files
        key, _, value = words.pop(0).partition("=")
        env[key] = value
    for option in ("--port", "--http-socket"):  # listen where told, not on the documented :8000
        if option in words:
            at = words.index(option)
            del words[at:at + 2]
    words[0] = executable(words[0]) or words[0]
    at = 2 if words[1] == "serve" else 1  # right after the program (waitress's getopt stops at the app)
    return [*words[:at], *LISTEN[name](port), *words[at:]], env


def long_batch(root: Path) -> tuple[str, list[bytes]]:
    """A batch target just under max_url_bytes (and past gunicorn's hard 8,190), and its files."""
    names, bodies, target = [], [], "/api/stream-files?"
    for i in range(DEFAULT_LIMITS.max_files):
        name = f"{i:03d}-" + "n" * 200
        item = f"{'&' if names else ''}file{i + 1}=long/{name}"
        if len(target) + len(item) > DEFAULT_LIMITS.max_url_bytes - 64:
            break
        (root / "long").mkdir(exist_ok=True)
        body = f"file {i}\n".encode()
        (root / "long" / name).write_bytes(body)
        names.append(name)
        bodies.append(body)
        target += item
    assert 8190 < len(target) <= DEFAULT_LIMITS.max_url_bytes
    return target, bodies


def get(url: str) -> tuple[int, bytes]:
    try:
        with urllib.request.urlopen(url, timeout=30) as resp:
            return resp.status, resp.read()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read()


@pytest.fixture(params=sorted(LISTEN))
def documented(request: pytest.FixtureRequest, tmp_path: Path):
    name = request.param
    port = free_port()
    argv, env = argv_for(name, tmp_path, port)
    if not os.path.isabs(argv[0]):
        pytest.skip(f"{argv[0]} is not installed (scripts/setup.sh --all)")
    if name == "Axon's server" and subprocess.run([sys.executable, "-c", "import axon.server.cli"]).returncode != 0:
        pytest.skip("the native server needs the server extra (httptools)")
    log = (tmp_path / "server.log").open("wb")
    proc = subprocess.Popen(argv, env=env, cwd=tmp_path, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    base = f"http://{HOST}:{port}"
    try:
        deadline = time.monotonic() + 30
        while True:
            try:
                with urllib.request.urlopen(f"{base}/api/health", timeout=2):
                    break
            except OSError:
                assert proc.poll() is None, (tmp_path / "server.log").read_text()
                assert time.monotonic() < deadline, f"{name} did not answer /api/health"
                time.sleep(0.1)
        yield name, base, tmp_path
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(10)
        log.close()


def test_a_url_under_max_url_bytes_is_served(documented):
    name, base, root = documented
    status, body = get(f"{base}/api/limits")
    assert status == 200 and json.loads(body)["max_url_bytes"] == DEFAULT_LIMITS.max_url_bytes
    target, bodies = long_batch(root)
    status, body = get(base + target)
    assert status == 200, (name, status, body[:300])
    assert all(b"\r\n\r\n" + part + b"\r\n--" in body for part in bodies)


def test_a_url_over_max_url_bytes_is_axons_json_414(documented):
    """The bound a client meets is Axon's, answered in Axon's shape: the runtime lets it through."""
    name, base, _ = documented
    target = "/api/stream-files?file1=a.txt&pad=" + "x" * DEFAULT_LIMITS.max_url_bytes
    status, body = get(base + target)
    assert status == 414, (name, status, body[:300])
    assert json.loads(body)["error"]["code"] == "uri_too_long", body[:300]
