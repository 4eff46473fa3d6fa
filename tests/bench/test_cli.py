"""``axon bench``'s command line, run as a user runs it: against an ``axon serve`` whose root is
not the ``--files-dir`` given, the run fails and says which URL, file and directory; ``--help``
is plain text that counts the runtimes as the README does."""

from __future__ import annotations

import argparse
import subprocess
import sys
from pathlib import Path

import pytest

from axon.bench import cli, procs, targets


def _axon(*args: str, timeout: float = 60) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "axon.cli", *args], capture_output=True, text=True,
                          timeout=timeout, stdin=subprocess.DEVNULL)


@pytest.mark.slow  # a server started, the bench's files made
def test_files_dir_that_is_not_the_servers_root_fails_saying_where(tmp_path: Path):
    served, elsewhere = tmp_path / "served", tmp_path / "elsewhere"
    served.mkdir()
    port = procs.free_port()
    server = procs.start(procs.Command([sys.executable, "-m", "axon.cli", "serve", str(served), "--port", str(port),
                                        "--workers", "1"], "axon", {}), None, tmp_path / "axon.log")
    try:
        procs.wait_ready(f"http://127.0.0.1:{port}/api/health")
        done = _axon("bench", f"http://127.0.0.1:{port}", "--files-dir", str(elsewhere), "--scenarios", "T1,F8",
                     "--burst", "1", "--sustained", "0", "--no-pin", "--no-chart", "--out", str(tmp_path / "out"))
    finally:
        procs.stop(server)
    assert done.returncode == 1, done.stderr
    assert f"GET http://127.0.0.1:{port}/api/stream-files?file1=examples/8kb.bin answered 404" in done.stderr
    assert f"GET http://127.0.0.1:{port}/files/examples/8kb.bin answered 404" in done.stderr
    assert f"under {elsewhere}, which must be the server's root" in done.stderr


def test_help_is_plain_text_and_counts_the_runtimes_as_the_readme_does():
    done = _axon("bench", "--help")
    assert done.returncode == 0
    assert "``" not in done.stdout and "Axon x" not in done.stdout
    assert "Axon on five runtimes" in done.stdout
    readme = (Path(__file__).parents[2] / "README.md").read_text()
    assert "Axon on five runtimes" in readme


def _settings(*args: str):
    parser = argparse.ArgumentParser()
    cli.configure(parser)
    return cli.settings_from(parser.parse_args(list(args)))


def test_rate_fraction_is_checked_before_anything_runs():
    settings = _settings("--compare", "--rate-fraction", "0.7")
    assert (settings.rate_fraction, settings.rate_reference, settings.rate) == (0.7, "nginx", None)
    assert [p for p, _ in settings.phases()] == ["burst", "sustained", "rate"]
    assert _settings("http://127.0.0.1:1", "--name", "mine", "--rate-fraction", "0.7").rate_reference == "mine"
    for bad, says in [(["--rate", "100"], "not both"), ([], "above 0"), (["--burst", "0", "--sustained", "0"], "closed-loop")]:
        fraction = "0" if says == "above 0" else "0.7"
        with pytest.raises(ValueError, match=says):
            _settings("--compare", "--rate-fraction", fraction, *bad)
    chosen = targets.select("axon,gunicorn,nginx")
    assert [t.name for t in cli.reference_first(chosen)] == ["nginx", "axon", "gunicorn"]
    with pytest.raises(ValueError, match="add nginx to --targets"):
        cli.reference_first(targets.select("axon"))
    done = _axon("bench", "--compare", "--targets", "axon", "--rate-fraction", "0.7", "--no-chart")
    assert done.returncode == 2 and "add nginx to --targets" in done.stderr
