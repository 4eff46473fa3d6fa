"""The shell scripts a user or CI runs, without running what they install: shellcheck finds
nothing in any of them, and deploy/install.sh offers only options that work."""

from __future__ import annotations

import os
import re
import shutil
import subprocess

import pytest
from deploy_rig import INSTALL, REPO

SCRIPTS = [INSTALL, REPO / "deploy/render.sh", *sorted((REPO / "scripts").glob("*.sh")), REPO / ".ci/run"]


@pytest.mark.slow  # a second or more per script
@pytest.mark.skipif(shutil.which("shellcheck") is None, reason="shellcheck is not installed (apt-get install shellcheck)")
def test_shellcheck():
    done = subprocess.run(["shellcheck", *map(str, SCRIPTS)], capture_output=True, text=True)
    assert done.returncode == 0, done.stdout


def test_install_help_lists_the_options_it_parses_and_no_pypi():
    done = subprocess.run(["bash", str(INSTALL), "--help"], capture_output=True, text=True, check=True)
    offered = set(re.findall(r"^  (--[a-z-]+)", done.stdout, re.M)) | set(re.findall(r"^  --\S+ .*?(--[a-z-]+) ", done.stdout, re.M))
    parsed = set(re.findall(r"^ +(--[a-z-]+)\)", INSTALL.read_text(), re.M))
    assert offered == parsed
    assert "pypi" not in done.stdout.lower()  # axon-stream is not published there


def test_install_refuses_source_pypi_before_doing_anything(tmp_path):
    prefix = tmp_path / "prefix"
    done = subprocess.run(["bash", str(INSTALL), "--prefix", str(prefix), "--no-venv", "--source", "pypi"],
                          capture_output=True, text=True)
    assert done.returncode == 1 and "not published on PyPI" in done.stderr, done
    assert not prefix.exists()


def test_setup_leaves_alone_a_directory_that_is_not_a_venv(tmp_path):
    kept = tmp_path / "mine"
    kept.mkdir()
    (kept / "notes.txt").write_text("not a venv\n")
    done = subprocess.run(["bash", str(REPO / "scripts/setup.sh")], env={**os.environ, "AXON_VENV": str(kept)},
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 1 and "is not a virtual environment" in done.stderr, done
    assert (kept / "notes.txt").read_text() == "not a venv\n"
