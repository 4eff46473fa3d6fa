"""Fixtures for the deploy suite: deploy/install.sh run in --prefix mode, and nginx running the
site it wrote in front of Axon on loopback.

``installed`` runs the script once per session with a real virtual environment (about 12 s, most
of it pip), so the tests check the very files a host would get. ``stack`` then starts Axon (the
native ``axon serve`` when it is there, else gunicorn) on the port the site proxies to, and nginx
with the ``nginx.conf`` that --prefix mode writes around the site. Both run in their own process
groups and are killed at the end, pass or fail.
"""

from __future__ import annotations

import os
import sys
import textwrap
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent))

from deploy_rig import (  # noqa: E402
    APP_MODULE,
    HOST,
    GiB,
    Install,
    KiB,
    Stack,
    _start,
    _stop,
    copy_checkout,
    free_port,
    native_server_available,
    native_server_has_metrics,
    nginx_binary,
    run_install,
    wait_ok,
)


@pytest.fixture(scope="session")
def installed(tmp_path_factory: pytest.TempPathFactory) -> Install:
    # From a copy of the checkout, frozen for the session: a rerun must find the same source.
    source = copy_checkout(tmp_path_factory.mktemp("source"))
    prefix = tmp_path_factory.mktemp("prefix")
    port, listen = free_port(), free_port()
    args = ["--prefix", str(prefix), "--source", str(source), "--port", str(port), "--listen", f"{HOST}:{listen}"]
    first = run_install(*args)
    return Install(prefix, prefix / "srv/axon", port, listen, first, args)


@pytest.fixture(scope="session")
def stack(installed: Install, tmp_path_factory: pytest.TempPathFactory):
    nginx = nginx_binary()
    if nginx is None:
        pytest.skip("nginx is not installed (apt-get install nginx)")
    work = tmp_path_factory.mktemp("stack")
    data = installed.root / "data"
    data.mkdir(exist_ok=True)
    (data / "a.bin").write_bytes(os.urandom(300 * KiB))
    with open(data / "big.bin", "wb") as f:
        f.truncate(GiB)  # sparse: reads as zeros, costs no disk
    (work / "deploy_app.py").write_text(textwrap.dedent(APP_MODULE))
    env = dict(os.environ, AXON_ROOT=str(installed.root), PYTHONPATH=f"{work}{os.pathsep}{os.environ.get('PYTHONPATH', '')}")
    env.pop("AXON_METRICS_DIR", None)
    if native_server_available():
        runtime = "native"
        argv = [sys.executable, "-m", "axon.cli", "serve", str(installed.root), "--host", HOST,
                "--port", str(installed.port), "--app", "deploy_app:app"]
        if native_server_has_metrics():  # as the unit runs it: several workers, --metrics
            argv += ["--workers", "2", "--metrics"]
            env["DEPLOY_SERVER_METRICS"] = "1"
        else:
            argv += ["--workers", "1"]
    else:
        pytest.importorskip("gunicorn")
        runtime = "gunicorn"
        # gthread keeps connections alive, as nginx's upstream keepalive expects; its idle
        # timeout is set above the site's (10 s) as Axon's own is.
        argv = [sys.executable, "-m", "gunicorn", "--worker-class", "gthread", "--threads", "8",
                "--workers", "1", "--keep-alive", "15", "--bind", f"{HOST}:{installed.port}",
                "--log-level", "warning", "deploy_app:application"]
    axon_log, nginx_log = work / "axon.log", work / "nginx.log"
    axon = _start(argv, axon_log, env=env, cwd=work)
    front = _start([nginx, "-c", str(installed.nginx_conf), "-g", "daemon off;"], nginx_log)
    try:
        wait_ok(f"http://{HOST}:{installed.port}/api/health", [axon], [axon_log])
        wait_ok(f"http://{HOST}:{installed.listen}/api/health", [axon, front], [axon_log, nginx_log])
        yield Stack(installed, axon, front, runtime)
    finally:
        _stop(front)
        _stop(axon)
