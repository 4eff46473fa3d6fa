"""axon:// against servers unlike the default one, under uvicorn: one whose batches hold fewer
bytes than the files asked (a 413 halves the batch until it passes), one from before
``/api/limits`` (its 404 means Limits' defaults, and ranges go as ranged GETs; a listing it lacks
is said to be off), and one whose listing fails (an error, never an empty directory)."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import textwrap
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from fsspec_served import SMALL_FILES, counting_fs
from live_server import free_port, healthy

from axon.fsspec.errors import ListingOff

APPS = '''
from axon import App, Limits
from axon.asgi import create_app
from axon.errors import NotFound, ServiceUnavailable

small = create_app(app=App(limits=Limits(max_batch_bytes=20_000)))

before_limits = App()

@before_limits.route("/api/limits", blocking=False)
def no_limits(request):
    raise NotFound("no such endpoint", code="no_route")  # as a server from before /api/limits

before_limits = create_app(app=before_limits)

failing_listing = App(browse=True)

@failing_listing.route("/browse/<path:path>", blocking=False)
def unavailable(request):
    raise ServiceUnavailable("the listing is down")

failing_listing = create_app(app=failing_listing)
'''


@contextlib.contextmanager
def uvicorn(app: str, root: Path, app_dir: Path) -> Iterator[str]:
    port = free_port()
    argv = [sys.executable, "-m", "uvicorn", "--app-dir", str(app_dir), f"apps:{app}",
            "--host", "127.0.0.1", "--port", str(port), "--log-level", "warning"]
    env = {k: v for k, v in os.environ.items() if k != "AXON_SECRET"}
    env["AXON_ROOT"] = str(root)
    process = subprocess.Popen(argv, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                               start_new_session=True)
    try:
        deadline = time.monotonic() + 20
        while not healthy(port):
            assert process.poll() is None and time.monotonic() < deadline, f"uvicorn {app} did not start"
            time.sleep(0.05)
        yield f"127.0.0.1:{port}"
    finally:
        os.killpg(process.pid, signal.SIGTERM)
        process.wait(10)


@pytest.fixture(scope="module")
def app_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    folder = tmp_path_factory.mktemp("apps")
    (folder / "apps.py").write_text(textwrap.dedent(APPS))
    return folder


def test_a_batch_over_the_byte_limit_is_halved_until_it_passes(corpus: Path, app_dir: Path):
    names = [f"data/small/f{i:03}.bin" for i in range(SMALL_FILES)]
    fits = [n for n in names if (corpus / n).stat().st_size <= 20_000]
    too_big = [n for n in names if n not in fits]
    assert fits and too_big  # the corpus has both
    with uvicorn("small", corpus, app_dir) as netloc:
        fs, seen = counting_fs()
        got = fs.cat([f"{netloc}/{n}" for n in names], on_error="return")
    assert {n: got[f"{netloc}/{n}"] for n in fits} == {n: (corpus / n).read_bytes() for n in fits}
    for n in too_big:  # alone and still too large: its own error, the others served
        assert isinstance(got[f"{netloc}/{n}"], OSError) and "413" in str(got[f"{netloc}/{n}"])
    assert seen.count(("POST", "/api/stream-files")) > 2


def test_a_server_from_before_the_limits_gets_defaults_and_ranged_gets(corpus: Path, app_dir: Path):
    names = [f"data/small/f{i:03}.bin" for i in range(1, 11)]
    with uvicorn("before_limits", corpus, app_dir) as netloc:
        fs, seen = counting_fs()
        whole = fs.cat([f"{netloc}/{n}" for n in names])
        ranges = fs.cat_ranges([f"{netloc}/{n}" for n in names], [-5] * 10, [None] * 10)
    assert whole == {f"{netloc}/{n}": (corpus / n).read_bytes() for n in names}
    assert ranges == [(corpus / n).read_bytes()[-5:] for n in names]
    assert seen.count(("GET", "/api/limits")) == 1  # asked once, its 404 remembered
    assert seen.count(("POST", "/api/stream-files")) == 1  # the whole files, in one batch
    assert sorted(path for method, path in seen if method == "GET" and path != "/api/limits") == sorted(
        f"/files/{n}" for n in names)  # one ranged GET per range


def test_a_server_that_does_not_say_and_has_no_listing_is_said_to_list_none(corpus: Path, app_dir: Path):
    with uvicorn("before_limits", corpus, app_dir) as netloc:
        fs, seen = counting_fs()
        with pytest.raises(ListingOff, match="axon serve --browse"):
            fs.find(f"{netloc}/data/tree")
        with pytest.raises(ListingOff, match="axon serve --browse"):
            fs.exists(f"{netloc}/data/tree")
        assert fs.exists(f"{netloc}/data/tree/top.txt") and not fs.exists(f"{netloc}/data/nope")
    assert ("GET", "/browse/data/tree/") in seen  # asked: its /api/limits did not say


def test_a_failing_listing_is_an_error_not_an_empty_directory(corpus: Path, app_dir: Path):
    with uvicorn("failing_listing", corpus, app_dir) as netloc:
        fs, _ = counting_fs()
        for call in (fs.find, fs.glob, fs.ls, fs.walk):
            path = f"{netloc}/data/small" + ("/*.bin" if call == fs.glob else "")
            with pytest.raises(ConnectionError, match="503: the listing is down"):
                list(call(path))
