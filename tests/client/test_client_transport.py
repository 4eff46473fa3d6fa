"""The blocking transport's failures, through the real command: a server that is down is named
by host and port (what a user fixes), as every reader of ``axon://`` names it."""

from __future__ import annotations

import socket
import subprocess
import sys
from pathlib import Path


def test_a_server_that_is_down_is_named_by_host_and_port(tmp_path: Path) -> None:
    with socket.socket() as sock:  # a port nothing listens on: bound, then closed
        sock.bind(("127.0.0.1", 0))
        origin = f"http://127.0.0.1:{sock.getsockname()[1]}"
    done = subprocess.run([sys.executable, "-m", "axon.cli", "fetch", origin, "a.bin", "-o", str(tmp_path)],
                          capture_output=True, text=True, timeout=60, stdin=subprocess.DEVNULL)
    assert done.returncode != 0
    assert f"{origin}: failed while connecting" in done.stderr and "Traceback" not in done.stderr
