"""Bad input to the ``axon`` commands, run as a user runs them (a real process): each is
refused before anything starts, with a message naming what was wrong, and exit status 2."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

import axon

pytestmark = pytest.mark.slow  # a process per bad input


def axon_cli(*argv: str, **env: str) -> subprocess.CompletedProcess:
    environ = {k: v for k, v in os.environ.items() if not k.startswith("AXON_")}
    return subprocess.run([sys.executable, "-m", "axon.cli", *argv], capture_output=True, text=True, timeout=30,
                          env={**environ, **env}, stdin=subprocess.DEVNULL)


@pytest.mark.parametrize(("argv", "env", "said"), [
    (["serve", "--port", "99999"], {}, "argument --port: a port is 0 to 65535 (0: any free port), not 99999"),
    (["serve", "--port", "65536"], {}, "argument --port: a port is 0 to 65535"),
    (["serve"], {"AXON_PORT": "70000"}, "argument --port: a port is 0 to 65535 (0: any free port), not 70000"),
    (["serve", "--certfile", "/nope.pem", "--keyfile", "/nope.key"], {},
     "argument --certfile: cannot read /nope.pem: No such file or directory"),
    (["serve", "--file-cache", "-5"], {}, "argument --file-cache: must be 0 or more, not -5"),
    (["serve", "--file-cache-valid", "-1"], {}, "argument --file-cache-valid: must be 0 or more seconds, not -1"),
    (["serve", "--file-cache-inactive", "-1"], {},
     "argument --file-cache-inactive: must be 0 or more seconds, not -1"),
    (["serve", "--workers", "-1"], {}, "argument --workers: must be 0 or more, not -1"),
    (["serve", "--max-connections", "0"], {}, "argument --max-connections: must be 1 or more, not 0"),
    (["serve", "--graceful-timeout", "nan"], {}, "argument --graceful-timeout: must be 0 or more seconds"),
    (["serve", "--store-timeout", "0"], {}, "argument --store-timeout: must be more than 0 seconds"),
    (["serve", "--object-disk-size", "lots"], {},
     "argument --object-disk-size: a size is a number of bytes with K, M, G or T after it (e.g. 10G), not 'lots'"),
    (["serve", "--port", "0"], {"AXON_BROWSE": "maybe"},
     "AXON_BROWSE must be 1, true, yes or on (or 0, false, no, off), not 'maybe'"),
    (["serve", "--app", "nocolon", "--port", "0"], {}, "--app takes MODULE:ATTR"),
    (["serve", "/no/such/dir", "--port", "0"], {}, "root is not a directory: /no/such/dir"),
    (["serve", "--bogus"], {}, "usage: axon serve"),  # serve's usage, not the top-level one
    (["serve", "--bogus"], {}, "axon serve: error: unrecognized arguments: --bogus"),
    (["fetch", "127.0.0.1:8003", "a.bin"], {}, "argument BASE_URL: base URL must be http:// or https:// with a host"),
    (["sign", "http://h/api/stream-files.zip?file1=b.bin", "a.bin"], {"AXON_SECRET": "s"},
     "with FILEs, name the server's URL without a query"),
    (["serve", "--no-replay", "--port", "0"], {}, "--replay and --no-replay were removed: answers are no longer replayed"),
    (["sign", "--expires-in", "-5", "/files/a.bin"], {"AXON_SECRET": "s"},
     "argument --expires-in: must be 1 second or more, not -5"),
    (["sign", "--expires-at", "5", "/files/a.bin"], {"AXON_SECRET": "s"}, "--expires-at 5 is not in the future"),
    (["fetch", "http://127.0.0.1:9", "a.bin", "--timeout", "-1"], {}, "argument --timeout: must be more than 0"),
    (["fetch", "http://127.0.0.1:9", "a.bin", "--parallel", "many"], {}, "argument --parallel: expected a whole number"),
])  # fmt: skip
def test_bad_input_is_named_and_exits_2(argv, env, said):
    done = axon_cli(*argv, **env)
    assert done.returncode == 2, (done.returncode, done.stderr)
    assert said in done.stderr and "Traceback" not in done.stderr
    assert done.stdout == ""


def test_a_bad_certificate_names_its_files(tmp_path):
    (tmp_path / "c.pem").write_text("not a certificate\n")
    (tmp_path / "k.pem").write_text("not a key\n")
    done = axon_cli("serve", str(tmp_path), "--port", "0", "--certfile", str(tmp_path / "c.pem"),
                    "--keyfile", str(tmp_path / "k.pem"))
    assert done.returncode != 0 and f"--certfile {tmp_path / 'c.pem'} with --keyfile {tmp_path / 'k.pem'}" in done.stderr


def test_version():
    done = axon_cli("--version")
    assert (done.returncode, done.stdout.strip()) == (0, f"axon {axon.__version__}")
