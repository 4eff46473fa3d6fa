"""The README's Quick start on a fresh clone with Debian's own python3 (marked externally managed,
PEP 668): scripts/setup.sh makes .venv with it, and scripts/demo.sh serves from that venv.

PATH holds only the system directories, as on a fresh machine; the clone is this checkout's files
as they are now (tracked and new, not ignored), so uncommitted changes are what is tested.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest
from deploy_rig import HOST, REPO, free_port

SYSTEM_PYTHON = Path("/usr/bin/python3")
SYSTEM_PATH = "/usr/sbin:/usr/bin:/sbin:/bin"

pytestmark = [
    pytest.mark.slow,  # pip installs the package and its server extra into a new venv
    pytest.mark.skipif(not SYSTEM_PYTHON.exists(), reason="no system python3 at /usr/bin/python3"),
    pytest.mark.skipif(shutil.which("git") is None or not (REPO / ".git").exists(), reason="needs git and a checkout"),
]


def fresh_clone(dest: Path) -> Path:
    """This checkout's files (working-tree contents) as a clone would hold them, nothing ignored."""
    listed = subprocess.run(["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"], cwd=REPO,
                            capture_output=True, check=True).stdout.decode().split("\0")
    for name in filter(None, listed):
        source = REPO / name
        if source.is_file():  # a tracked file deleted in the tree is not copied
            (dest / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(source, dest / name)
    return dest


def system_env(home: Path) -> dict[str, str]:
    """A fresh login's environment: the system PATH, and only how pip reaches its index."""
    keep = {k: v for k, v in os.environ.items() if k.startswith("PIP_") or k.lower().endswith("_proxy")}
    return {**keep, "HOME": str(home), "PATH": SYSTEM_PATH, "LANG": "C.UTF-8"}


@pytest.fixture(scope="module")
def clone(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict[str, str], subprocess.CompletedProcess]:
    where = fresh_clone(tmp_path_factory.mktemp("clone"))
    env = system_env(tmp_path_factory.mktemp("home"))
    done = subprocess.run(["scripts/setup.sh"], cwd=where, env=env, capture_output=True, text=True, timeout=900)
    return where, env, done


def test_setup_makes_a_venv_with_the_system_python(clone):
    where, _, done = clone
    assert done.returncode == 0, done.stdout + done.stderr
    config = dict(line.split(" = ", 1) for line in (where / ".venv/pyvenv.cfg").read_text().splitlines() if " = " in line)
    assert config["home"] == str(SYSTEM_PYTHON.parent)
    imported = subprocess.run([where / ".venv/bin/python", "-c", "import axon, httptools; print(axon.__file__)"],
                              capture_output=True, text=True)
    assert imported.stdout.strip() == str(where / "src/axon/__init__.py"), imported.stderr


def test_demo_serves_from_the_venv_and_setup_runs_again_as_a_check(clone):
    where, env, done = clone
    assert done.returncode == 0, done.stdout + done.stderr
    stamp = where / ".venv/.axon-setup"
    installed_at = stamp.stat().st_mtime_ns
    port = free_port()
    log = (where / "demo.log").open("wb")
    demo = subprocess.Popen(["scripts/demo.sh", str(where / "axon-demo"), "--host", HOST, "--port", str(port)],
                            cwd=where, env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    try:
        deadline = time.monotonic() + 120
        while True:
            try:
                with urllib.request.urlopen(f"http://{HOST}:{port}/api/health", timeout=2) as resp:
                    assert json.loads(resp.read()) == {"status": "available"}
                    break
            except OSError:
                assert demo.poll() is None, (where / "demo.log").read_text()
                assert time.monotonic() < deadline, (where / "demo.log").read_text()
                time.sleep(0.2)
        with urllib.request.urlopen(f"http://{HOST}:{port}/files/examples/4kb.bin", timeout=10) as resp:
            assert len(resp.read()) == 4096
    finally:
        if demo.poll() is None:
            os.killpg(demo.pid, signal.SIGINT)  # Ctrl-C, as the README says
        assert demo.wait(30) == 0, (where / "demo.log").read_text()
        log.close()
    assert stamp.stat().st_mtime_ns == installed_at  # nothing installed again


def test_setup_refuses_a_venv_another_python_made(tmp_path):
    """AXON_VENV names a venv made by another interpreter than AXON_PYTHON: an error, before any
    install (CI's run on Debian's python3 must not pass on a venv pyenv's made)."""
    def base(python: str) -> str:
        return subprocess.run([python, "-c", "import sys; print(sys.base_prefix)"], capture_output=True, text=True,
                              check=True).stdout.strip()

    if base(sys.executable) == base(str(SYSTEM_PYTHON)):
        pytest.skip("this Python is the system's: no other one to make the venv with")
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True, timeout=120)
    before = sorted(p.name for p in (venv / "bin").iterdir())
    done = subprocess.run(["scripts/setup.sh"], cwd=REPO, capture_output=True, text=True, timeout=120,
                          env={**os.environ, "AXON_VENV": str(venv), "AXON_PYTHON": str(SYSTEM_PYTHON)})
    assert done.returncode == 1, done
    assert f"{venv} was made by the Python in {base(sys.executable)}" in done.stderr, done.stderr
    assert sorted(p.name for p in (venv / "bin").iterdir()) == before  # nothing installed
