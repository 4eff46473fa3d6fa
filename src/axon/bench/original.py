"""The original: axon-api 0.9.0 from PyPI, deployed as its article did (nginx + uWSGI, 2 x 16).

axon-api is a framework, not an app: its users write a ``main.py`` with the WSGI callable and a
``routes.py``. Ours are the ones its README shows for ``/api/stream-files`` and
``/api/health``, plus a JSON echo route in its own style (its ``POST /api/json`` example) for
the echo scenario. Its import name is ``axon_api``, so it cannot shadow our ``axon``; it still
goes into its own directory under the cache (``pip install --target``), added to uWSGI's path
only, so that the benchmark never changes the environment it runs in.

Like the article's deployment it runs from a working directory holding ``examples/`` (here a
link to the files under test) and its ``logs/app.log``, which the framework appends to on every
request: that cost is part of the original as published.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from .procs import Command

VERSION = "0.9.0"

MAIN_PY = '''\
from axon_api.core.application import ApplicationEngine
from routes import my_routes


def application(environ, start_response):
    return ApplicationEngine(environ, start_response, router=my_routes)
'''

ROUTES_PY = '''\
import json
from urllib.parse import parse_qsl


def my_routes(environ, request_handler):
    method = environ['method']
    path = [part for part in request_handler.path.split('/') if part]
    request_handler.logger.info(f"Route: {method}, {path}")
    response = request_handler.response

    match (method, path):
        case ('GET', ['api', 'stream-files']):
            raw_query_string = environ['query_string']
            if not raw_query_string:
                return response.message("No files specified in query parameters", status_code=400)
            query_params = dict(parse_qsl(raw_query_string))
            files = list(query_params.values())
            if not files:
                return response.message("No valid file parameters found", status_code=400)
            return response.stream(files)

        case ('POST', ['api', 'echo']):
            body_bytes = environ['wsgi_input'].read(environ['content_length'])
            user = json.loads(body_bytes.decode('utf-8'))
            return response.json({"id": user["id"], "name": user["name"], "email": user["email"]})

        case ('GET', ['api', 'health']):
            return response.json({"status": "available"})

        case _:
            return response.message("Not Found", status_code=404)
'''


def install(cache_dir: Path) -> Path:
    """The directory holding ``axon_api`` 0.9.0, installed there from PyPI on first use."""
    target = cache_dir / f"axon-api-{VERSION}"
    if (target / "axon_api" / "core" / "application.py").is_file():
        return target
    target.parent.mkdir(parents=True, exist_ok=True)
    partial = target.with_name(target.name + ".partial")
    # No dependencies: the original is standard library only.
    done = subprocess.run(
        [sys.executable, "-m", "pip", "install", "--quiet", "--disable-pip-version-check", "--no-deps",
         "--target", str(partial), f"axon-api=={VERSION}"],
        capture_output=True, text=True, check=False,
    )
    if done.returncode != 0:
        raise RuntimeError(f"pip could not install axon-api=={VERSION}: {done.stderr.strip()[-500:]}")
    partial.rename(target)  # only a complete install gets the final name
    return target


def prepare_workdir(workdir: Path, root: Path) -> Path:
    """The app's working directory: main.py, routes.py, ``examples`` (and ``pool``, the random
    scenarios' files, when made) -> the files under test, logs/."""
    workdir.mkdir(parents=True, exist_ok=True)
    (workdir / "main.py").write_text(MAIN_PY)
    (workdir / "routes.py").write_text(ROUTES_PY)
    for name in ("examples", "pool"):
        link = workdir / name
        if (root / name).is_dir() and not link.exists():
            os.symlink(root / name, link)
    (workdir / "logs").mkdir(exist_ok=True)
    return workdir


def uwsgi_command(site: Path, workdir: Path, socket_path: Path, processes: int = 2, threads: int = 16) -> Command:
    """uWSGI as the article ran it: 2 processes x 16 threads behind nginx, 64 KB buffers."""
    ini = workdir / "uwsgi.ini"
    ini.write_text(
        "[uwsgi]\n"
        "master = true\n"
        f"processes = {processes}\n"
        f"threads = {threads}\n"
        f"socket = {socket_path}\n"
        f"chdir = {workdir}\n"
        f"pythonpath = {site}\n"
        f"pythonpath = {workdir}\n"
        "module = main:application\n"
        "buffer-size = 65535\n"
        # Our choice, the same for every server: no per-request server log (seed 001: terminal
        # logging alone halved a server's throughput). The app's own log stays, as published.
        "disable-logging = true\n"
        "die-on-term = true\n"
        "vacuum = true\n"
    )
    return Command(["uwsgi", "--ini", str(ini)], "uwsgi")
