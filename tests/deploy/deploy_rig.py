"""The deploy suite's rig: running deploy/install.sh, and starting Axon and nginx on loopback."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request
from dataclasses import dataclass
from pathlib import Path

from axon.bench.procs import free_port

REPO = Path(__file__).resolve().parents[2]
INSTALL = REPO / "deploy" / "install.sh"


def copy_checkout(dest: Path) -> Path:
    """What pip builds this checkout from (pyproject.toml, README.md, src/), copied to ``dest``:
    frozen for the session, and a build's egg-info never lands in the checkout."""
    for name in ("pyproject.toml", "README.md"):
        shutil.copy2(REPO / name, dest / name)
    shutil.copytree(REPO / "src", dest / "src", ignore=shutil.ignore_patterns("__pycache__", "*.egg-info"))
    return dest
HOST = "127.0.0.1"
KiB, MiB, GiB = 1024, 1024 * 1024, 1024 * 1024 * 1024


def nginx_binary() -> str | None:
    return shutil.which("nginx") or (shutil.which("nginx", path="/usr/sbin:/sbin") or None)


def run_install(*args: str, check: bool = True) -> subprocess.CompletedProcess:
    done = subprocess.run(["bash", str(INSTALL), *args], capture_output=True, text=True, timeout=300)
    if check and done.returncode != 0:
        raise AssertionError(f"install.sh {' '.join(args)} failed ({done.returncode}):\n{done.stdout}\n{done.stderr}")
    return done


def snapshot(prefix: Path) -> dict[str, tuple[int, bytes]]:
    """Every file and link the script owns under ``prefix`` (the venv's insides excluded): path ->
    (mtime_ns, content or link target)."""
    out = {}
    for path in sorted(prefix.rglob("*")):
        rel = path.relative_to(prefix).as_posix()
        if rel.startswith("opt/axon/venv/") and rel != "opt/axon/venv/axon-install.stamp":
            continue
        if rel.startswith(("var/", "run/")):
            continue  # nginx's own logs and pid
        if path.is_symlink():
            out[rel] = (path.lstat().st_mtime_ns, os.readlink(path).encode())
        elif path.is_file():
            out[rel] = (path.stat().st_mtime_ns, path.read_bytes())
    return out


@dataclass
class Install:
    prefix: Path
    root: Path
    port: int  # axon serve's
    listen: int  # nginx's
    first: subprocess.CompletedProcess  # the first run's output
    args: list[str]  # the options it ran with

    @property
    def unit(self) -> Path:
        return self.prefix / "etc/systemd/system/axon.service"

    @property
    def site(self) -> Path:
        return self.prefix / "etc/nginx/sites-available/axon"

    @property
    def snippet(self) -> Path:
        return self.prefix / "etc/nginx/snippets/axon-proxy.conf"

    @property
    def nginx_conf(self) -> Path:
        return self.prefix / "etc/nginx/nginx.conf"

    @property
    def env_file(self) -> Path:
        return self.prefix / "etc/axon/axon.env"

    @property
    def venv(self) -> Path:
        return self.prefix / "opt/axon/venv"


# -- the running stack ---------------------------------------------------------------------------

# The app behind nginx: Axon's own, with metrics on, so that the suite can scrape it through nginx.
APP_MODULE = """
import os
from axon import App
from axon.metrics import instrument
from axon.wsgi import create_app

app = App(os.environ["AXON_ROOT"])
if not os.environ.get("DEPLOY_SERVER_METRICS"):  # else axon serve --metrics does it
    instrument(app)


@app.route("/test/headers", blocking=False)
def headers(request):  # what nginx passed on, for the suite to check
    return request.headers


application = create_app(app=app)
"""


def native_server_available() -> bool:
    return subprocess.run([sys.executable, "-c", "import axon.server.cli"], capture_output=True).returncode == 0


def native_server_has_metrics() -> bool:
    done = subprocess.run([sys.executable, "-m", "axon.cli", "serve", "--help"], capture_output=True, text=True)
    return "--metrics" in done.stdout


@dataclass
class Stack:
    install: Install
    axon: subprocess.Popen
    nginx: subprocess.Popen
    runtime: str  # "native" or "gunicorn"

    @property
    def url(self) -> str:
        return f"http://{HOST}:{self.install.listen}"

    @property
    def upstream_url(self) -> str:
        return f"http://{HOST}:{self.install.port}"


def _start(argv: list[str], log: Path, **kwargs) -> subprocess.Popen:
    with open(log, "wb") as out:
        return subprocess.Popen(argv, stdout=out, stderr=subprocess.STDOUT, start_new_session=True, **kwargs)


def _stop(proc: subprocess.Popen) -> None:
    try:
        os.killpg(proc.pid, signal.SIGTERM)
        proc.wait(10)
    except ProcessLookupError:
        pass
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(5)


def wait_ok(url: str, procs: list[subprocess.Popen], logs: list[Path], timeout: float = 30.0) -> None:
    deadline = time.monotonic() + timeout
    while True:
        try:
            with urllib.request.urlopen(url, timeout=2) as r:
                if r.status == 200:
                    return
        except (OSError, urllib.error.HTTPError):
            pass
        dead = [p for p in procs if p.poll() is not None]
        if dead or time.monotonic() > deadline:
            raise AssertionError(f"{url} never answered:\n" + "\n".join(log.read_text(errors="replace") for log in logs))
        time.sleep(0.1)


