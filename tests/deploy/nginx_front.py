"""Axon behind nginx as one command, so that a suite that starts one server per runtime (the e2e
suite) can run against the very site deploy/install.sh writes:

    python tests/deploy/nginx_front.py ROOT PORT [axon serve options...]

renders the site with ``deploy/install.sh --prefix DIR --no-venv`` (nginx on 127.0.0.1:PORT, Axon
on a free port behind it), starts ``axon serve ROOT`` (this interpreter's) and nginx, and waits.
SIGTERM or SIGINT stops both; either one dying stops the other, and the exit says which.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from axon.bench.procs import free_port

REPO = Path(__file__).resolve().parents[2]


def main(argv: list[str]) -> int:
    if len(argv) < 2:
        print(__doc__, file=sys.stderr)
        return 2
    root, port, extra = argv[0], int(argv[1]), argv[2:]
    nginx = next((p for p in ("/usr/sbin/nginx", "/usr/bin/nginx") if os.path.exists(p)), "nginx")
    with tempfile.TemporaryDirectory(prefix="axon-nginx-") as prefix:
        upstream = free_port()
        subprocess.run(
            ["bash", str(REPO / "deploy/install.sh"), "--prefix", prefix, "--no-venv", "--root", root,
             "--port", str(upstream), "--listen", f"127.0.0.1:{port}"],
            check=True, stdout=subprocess.DEVNULL,
        )  # fmt: skip
        children = [
            subprocess.Popen([sys.executable, "-m", "axon.cli", "serve", root, "--host", "127.0.0.1",
                              "--port", str(upstream), *extra]),
            subprocess.Popen([nginx, "-c", f"{prefix}/etc/nginx/nginx.conf", "-g", "daemon off; error_log stderr warn;"]),
        ]
        stopping = False

        def stop(signum: int, frame: object) -> None:
            nonlocal stopping
            stopping = True

        signal.signal(signal.SIGTERM, stop)
        signal.signal(signal.SIGINT, stop)
        try:
            while not stopping and all(c.poll() is None for c in children):
                time.sleep(0.1)
        finally:
            for child in children:
                if child.poll() is None:
                    child.send_signal(signal.SIGTERM if child is children[0] else signal.SIGQUIT)
            for child in children:
                try:
                    child.wait(10)
                except subprocess.TimeoutExpired:
                    child.kill()
        dead = [c.args[0] for c in children if c.returncode not in (0, -signal.SIGTERM, -signal.SIGQUIT, None)]
        if not stopping:
            print(f"nginx_front: a child stopped: {dead or children}", file=sys.stderr)
            return 1
        return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
