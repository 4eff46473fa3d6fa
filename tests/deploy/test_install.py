"""deploy/install.sh in --prefix mode: what it writes, that the checkers accept it, and that a
second run changes nothing."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import time
import urllib.error
import urllib.request
from pathlib import Path

import pytest
from deploy_rig import (
    HOST,
    INSTALL,
    REPO,
    Install,
    free_port,
    nginx_binary,
    run_install,
    snapshot,
)

from axon.limits import DEFAULT_LIMITS

pytestmark = pytest.mark.slow  # real deployments: containers, installs, nginx in front


def directives(path: Path) -> list[tuple[str, str]]:
    """(key, value) for each ``Key=value`` line of a unit file, comments left out."""
    out = []
    for line in path.read_text().splitlines():
        if line and not line.startswith(("#", "[")) and "=" in line:
            key, _, value = line.partition("=")
            out.append((key, value))
    return out


def nginx_test(conf: Path) -> subprocess.CompletedProcess:
    return subprocess.run([nginx_binary(), "-t", "-c", str(conf)], capture_output=True, text=True)


def test_writes_the_unit_site_env_and_venv(installed: Install):
    for path in (installed.unit, installed.site, installed.snippet, installed.env_file, installed.nginx_conf):
        assert path.is_file(), path
    link = installed.prefix / "etc/nginx/sites-enabled/axon"
    assert os.readlink(link) == str(installed.site)
    assert (installed.root / "examples/hello.txt").read_text() == "Hello from Axon.\n"
    assert installed.env_file.stat().st_mode & 0o777 == 0o640
    # Nothing on the system was touched: in prefix mode the system actions are only printed.
    out = installed.first.stdout
    for action in ("useradd --system", "systemctl daemon-reload", "systemctl enable axon.service",
                   "systemctl restart axon.service", "systemctl reload nginx.service"):
        assert f"would run: {action}" in out or f"would run: id -u axon || {action}" in out, action


def test_the_venv_runs_axon(installed: Install):
    python = installed.venv / "bin/python"
    done = subprocess.run([python, "-c", "import axon, axon.metrics, sys; print(axon.__version__, sys.prefix)"],
                          capture_output=True, text=True, check=True)
    version, prefix = done.stdout.split()
    assert prefix == str(installed.venv)
    import axon

    assert version == axon.__version__
    assert subprocess.run([installed.venv / "bin/axon", "--help"], capture_output=True).returncode == 0


def test_unit_runs_axon_serve_hardened(installed: Install):
    unit = dict(directives(installed.unit))
    assert unit["ExecStart"] == (
        f"{installed.venv}/bin/axon serve {installed.root} --host 127.0.0.1 --port {installed.port}"
        f" --workers {os.cpu_count()} --graceful-timeout 30"
    )
    assert unit["User"] == unit["Group"] == "axon"
    assert unit["Restart"] == "on-failure"
    assert unit["LimitNOFILE"] == "65536"
    assert int(unit["LimitNOFILE"]) > DEFAULT_LIMITS.max_files
    for key, want in {
        "NoNewPrivileges": "yes", "ProtectSystem": "strict", "ProtectHome": "yes", "PrivateTmp": "yes",
        "ReadOnlyPaths": str(installed.root), "CapabilityBoundingSet": "",
        "RestrictAddressFamilies": "AF_INET AF_INET6 AF_UNIX", "EnvironmentFile": f"-{installed.env_file}",
    }.items():
        assert unit[key] == want, key
    assert int(unit["TimeoutStopSec"]) > 30  # past the graceful timeout


@pytest.mark.skipif(shutil.which("systemd-analyze") is None, reason="systemd-analyze is not installed")
def test_systemd_analyze_verifies_the_unit(installed: Install):
    done = subprocess.run(["systemd-analyze", "verify", str(installed.unit)], capture_output=True, text=True)
    assert done.returncode == 0 and not done.stderr.strip(), done.stderr
    # And its exposure score (0 = locked down, 10 = none at all) stays low.
    done = subprocess.run(["systemd-analyze", "security", "--offline=true", str(installed.unit)],
                          capture_output=True, text=True)
    found = re.search(r"Overall exposure level for axon\.service: ([0-9.]+)", done.stdout)
    assert found, done.stdout[-500:] + done.stderr
    assert float(found.group(1)) <= 2.0, done.stdout


@pytest.mark.skipif(shutil.which("systemd-analyze") is None, reason="systemd-analyze is not installed")
def test_systemd_analyze_catches_a_broken_unit(installed: Install, tmp_path: Path):
    """The check above would fail on a bad unit: it is not vacuous in this container."""
    bad = tmp_path / "axon.service"
    bad.write_text(installed.unit.read_text().replace(f"{installed.venv}/bin/axon", "/nonexistent/axon"))
    assert subprocess.run(["systemd-analyze", "verify", str(bad)], capture_output=True).returncode != 0


@pytest.mark.skipif(nginx_binary() is None, reason="nginx is not installed")
def test_nginx_accepts_the_site(installed: Install):
    done = nginx_test(installed.nginx_conf)
    assert done.returncode == 0, done.stderr


def test_site_is_tuned_for_long_streams(installed: Install):
    site, snippet = installed.site.read_text(), installed.snippet.read_text()
    assert f"server 127.0.0.1:{installed.port};" in site
    assert re.search(r"^\s*keepalive 32;", site, re.M)
    assert f"listen {HOST}:{installed.listen};" in site
    assert f"include {installed.snippet};" in site
    settings = dict(re.findall(r"^(\w+) (.+);$", snippet, re.M))
    assert settings["proxy_buffering"] == "off"
    assert settings["proxy_http_version"] == "1.1"
    assert 'proxy_set_header Connection "";' in snippet
    assert settings["client_max_body_size"] == f"{DEFAULT_LIMITS.max_body_bytes // (1024 * 1024)}m"
    count, size = settings["large_client_header_buffers"].split()
    assert int(size.rstrip("k")) * 1024 > DEFAULT_LIMITS.max_url_bytes
    assert settings["gzip"] == "off"
    assert "X-Forwarded-For $proxy_add_x_forwarded_for" in snippet
    assert "max_ranges" not in settings  # left to Axon


def test_second_run_changes_nothing(installed: Install):
    before = snapshot(installed.prefix)
    again = run_install(*installed.args)
    assert snapshot(installed.prefix) == before
    assert "wrote " not in again.stdout and "installed Axon" not in again.stdout
    for action in ("daemon-reload", "restart", "reload nginx"):
        assert action not in again.stdout, again.stdout


def test_a_changed_option_rewrites_what_it_touches(tmp_path: Path):
    args = ["--prefix", str(tmp_path), "--no-venv", "--listen", f"{HOST}:{free_port()}"]
    run_install(*args, "--port", "8100")
    env_file = tmp_path / "etc/axon/axon.env"
    env_file.write_text(env_file.read_text() + "AXON_ACCESS_LOG=1\n")  # the user's edit
    before = snapshot(tmp_path)
    done = run_install(*args, "--port", "8101")
    after = snapshot(tmp_path)
    changed = {k for k in after if before.get(k) != after[k]}
    assert changed == {"etc/systemd/system/axon.service", "etc/nginx/sites-available/axon"}
    assert "would run: systemctl daemon-reload" in done.stdout
    assert "would run: systemctl restart axon.service" in done.stdout
    assert "would run: systemctl reload nginx.service" in done.stdout
    assert env_file.read_text().endswith("AXON_ACCESS_LOG=1\n")  # never overwritten


def test_the_default_site_steps_aside_for_a_catch_all(tmp_path: Path):
    enabled = tmp_path / "etc/nginx/sites-enabled"
    enabled.mkdir(parents=True)
    (enabled / "default").symlink_to("/etc/nginx/sites-available/default")
    run_install("--prefix", str(tmp_path), "--no-venv", "--listen", f"{HOST}:{free_port()}")
    assert not (enabled / "default").is_symlink() and (enabled / "axon").is_symlink()


@pytest.mark.parametrize("args, message", [
    (["--port", "http"], "--port"),
    (["--workers", "0"], "--workers"),
    (["--root", "relative/dir"], "absolute"),
    (["--root", "/srv/with space"], "--root"),
    (["--cert", "/etc/hostname"], "--cert and --key"),
    (["--listen", "localhost:80"], "--listen"),
    (["--bogus"], "unknown option"),
])  # fmt: skip
def test_bad_options_are_refused(tmp_path: Path, args: list[str], message: str):
    done = run_install("--prefix", str(tmp_path), "--no-venv", *args, check=False)
    assert done.returncode != 0 and message in done.stderr, done.stderr
    assert not (tmp_path / "etc").exists()  # refused before writing anything


def test_system_mode_needs_root_or_prefix():
    command = ["bash", str(INSTALL)]
    if os.geteuid() == 0:  # as root, system mode would install for real: ask as nobody
        command = ["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups", *command]
    done = subprocess.run(command, capture_output=True, text=True)
    assert done.returncode != 0 and "--prefix" in done.stderr


def test_render_refuses_a_placeholder_without_value(tmp_path: Path):
    template = tmp_path / "t.in"
    template.write_text("a @ONE@ b @TWO@\n")
    render = REPO / "deploy/render.sh"
    done = subprocess.run(["sh", render, template, "ONE=x|y&z\\w"], capture_output=True, text=True)
    assert done.returncode != 0 and "@TWO@" in done.stderr
    done = subprocess.run(["sh", render, template, "ONE=x|y&z\\w", "TWO=/a/b"], capture_output=True, text=True)
    assert done.stdout == "a x|y&z\\w b /a/b\n"


# -- HTTPS ---------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def certificate(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    if shutil.which("openssl") is None:
        pytest.skip("openssl is not installed")
    where = tmp_path_factory.mktemp("tls")
    cert, key = where / "cert.pem", where / "key.pem"
    subprocess.run(["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "2", "-subj", "/CN=localhost",
                    "-keyout", key, "-out", cert], capture_output=True, check=True)
    return cert, key


@pytest.mark.skipif(nginx_binary() is None, reason="nginx is not installed")
def test_tls_site(tmp_path: Path, certificate: tuple[Path, Path]):
    cert, key = certificate
    https = free_port()
    run_install("--prefix", str(tmp_path), "--no-venv", "--listen", f"{HOST}:{free_port()}",
                "--https-listen", f"{HOST}:{https}", "--cert", str(cert), "--key", str(key))
    site = (tmp_path / "etc/nginx/sites-available/axon").read_text()
    assert f"ssl_certificate {cert};" in site and f"ssl_certificate_key {key};" in site
    assert f"return 301 https://$host:{https}$request_uri;" in site
    assert re.search(rf"listen {HOST}:{https} ssl( http2)?;", site)
    assert "http2" in site  # on the listen line (nginx < 1.25.1) or as "http2 on;"
    done = nginx_test(tmp_path / "etc/nginx/nginx.conf")
    assert done.returncode == 0, done.stderr


@pytest.mark.skipif(nginx_binary() is None, reason="nginx is not installed")
def test_axon_down_is_a_json_502(tmp_path: Path):
    listen = free_port()
    run_install("--prefix", str(tmp_path), "--no-venv", "--listen", f"{HOST}:{listen}", "--port", str(free_port()))
    nginx = subprocess.Popen([nginx_binary(), "-c", str(tmp_path / "etc/nginx/nginx.conf"), "-g", "daemon off;"],
                             stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 10
        while True:
            try:
                with urllib.request.urlopen(f"http://{HOST}:{listen}/api/health", timeout=2):
                    raise AssertionError("something answers on a port nobody listens on")
            except urllib.error.HTTPError as exc:
                assert exc.code == 502 and exc.headers["Content-Type"] == "application/json"
                assert json.loads(exc.read())["error"]["code"] == "upstream_unavailable"
                break
            except OSError:  # nginx not listening yet
                assert time.monotonic() < deadline
                time.sleep(0.05)
    finally:
        nginx.terminate()
        nginx.wait(10)
