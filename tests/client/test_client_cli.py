"""``axon fetch`` on the command line: batches, lists, parallelism, progress, failures."""

from __future__ import annotations

import argparse
import io
import json
from pathlib import Path

import pytest
from multipart_support import CONTENT_TYPE, axon_body
from scripted_server import Recorded, Reply, ScriptedServer

from axon.client import cli
from axon.client.progress import ProgressTracker, format_bytes

NAMES = [f"d{i % 3}/file-{i}.bin" for i in range(7)]


def content(name: str) -> bytes:
    return name.encode() * 50


def honest(request: Recorded) -> Reply:
    return Reply(200, [("Content-Type", CONTENT_TYPE)], axon_body([(p, content(p)) for p in request.files]))


def run_cli(*argv: str) -> int:
    parser = argparse.ArgumentParser(prog="axon")
    cli.add_parser(parser.add_subparsers(dest="command", required=True))
    args = parser.parse_args(["fetch", *argv])
    return args.func(args)


def test_fetch_in_batches(
    http_server: ScriptedServer, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    http_server.reply = honest
    dest = tmp_path / "out"
    assert run_cli(http_server.url, *NAMES, "-o", str(dest), "--batch-size", "3", "--no-progress") == 0
    assert [r.files for r in http_server.requests] == [NAMES[0:3], NAMES[3:6], NAMES[6:7]]
    assert all(r.method == "GET" for r in http_server.requests)
    for name in NAMES:
        assert (dest / name).read_bytes() == content(name)
    out = capsys.readouterr().out
    assert out.startswith("fetched 7 of 7 files") and out.count("\n") == 1


def test_from_list_is_posted_in_parallel(
    http_server: ScriptedServer, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    http_server.reply = honest
    listing = tmp_path / "list.txt"
    listing.write_text("\n".join(NAMES) + "\n\n", encoding="utf-8")
    dest = tmp_path / "out"
    argv = [
        http_server.url,
        "--from-list",
        str(listing),
        "-o",
        str(dest),
        "--batch-size",
        "2",
        "--parallel",
        "3",
    ]
    assert run_cli(*argv, "--no-progress", "-H", "X-Token: abc") == 0
    assert len(http_server.requests) == 4
    assert all(r.method == "POST" and r.headers["x-token"] == "abc" for r in http_server.requests)
    assert sorted(name for r in http_server.requests for name in json.loads(r.body)["files"]) == sorted(NAMES)
    assert all((dest / name).read_bytes() == content(name) for name in NAMES)


def test_failure_exits_non_zero_with_a_message(
    http_server: ScriptedServer, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    def second_batch_missing(request: Recorded) -> Reply:
        if "d0/file-3.bin" in request.files:
            error = {"status": 404, "code": "not_found", "message": "missing", "paths": ["d0/file-3.bin"]}
            return Reply(404, [("Content-Type", "application/json")], json.dumps({"error": error}).encode())
        return honest(request)

    http_server.reply = second_batch_missing
    code = run_cli(http_server.url, *NAMES, "-o", str(tmp_path / "out"), "--batch-size", "3", "--no-progress")
    assert code == 1
    err = capsys.readouterr().err
    assert "axon fetch: error: server answered 404 not_found: missing ['d0/file-3.bin']" in err
    assert "fetched 3 of 7 files" in err
    assert len(http_server.requests) == 2  # the batch after the failure never started


def test_usage_errors(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert run_cli("http://127.0.0.1:9", "-o", str(tmp_path)) == 2
    assert "no files given" in capsys.readouterr().err
    assert run_cli("http://127.0.0.1:9", "../x", "-o", str(tmp_path)) != 0
    assert "refusing to request '../x'" in capsys.readouterr().err
    assert run_cli("http://127.0.0.1:9", "a", "-H", "no-colon", "-o", str(tmp_path)) == 2
    with pytest.raises(SystemExit):
        run_cli("http://127.0.0.1:9", "a", "--batch-size", "0")


def test_plain_progress_without_tqdm(http_server: ScriptedServer, tmp_path: Path) -> None:
    http_server.reply = honest
    from axon.client.fetch import fetch

    stream = io.StringIO()
    tracker = ProgressTracker(len(NAMES), stream=stream, use_tqdm=False)
    fetch(http_server.url, NAMES[:4], tmp_path / "out", progress=tracker.for_batch(4))
    assert tracker.estimated_total is not None and tracker.estimated_total > tracker.bytes_received
    fetch(http_server.url, NAMES[4:], tmp_path / "out", progress=tracker.for_batch(3))
    tracker.close()
    assert tracker.files_done == 7 and tracker.estimated_total == tracker.bytes_received
    last = stream.getvalue().splitlines()[-1]
    assert last.startswith("7/7 files, ") and "/s" in last


def test_tqdm_progress(http_server: ScriptedServer, tmp_path: Path) -> None:
    pytest.importorskip("tqdm")
    http_server.reply = honest
    from axon.client.fetch import fetch

    stream = io.StringIO()
    tracker = ProgressTracker(len(NAMES), stream=stream, use_tqdm=True)
    fetch(http_server.url, NAMES, tmp_path / "out", progress=tracker.for_batch(len(NAMES)))
    tracker.close()
    assert "7/7 files" in stream.getvalue()


def test_format_bytes() -> None:
    assert [format_bytes(n) for n in (0, 1023, 1024, 5 << 20, 3 << 40)] == [
        "0 B",
        "1023 B",
        "1.0 KiB",
        "5.0 MiB",
        "3.0 TiB",
    ]


def test_whole_files_of_a_failed_batch_are_counted(
    http_server: ScriptedServer, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    def cut_in_second_part(request: Recorded) -> Reply:
        body = honest(request).body
        second = body.index(b"Content-Location: /files/" + request.files[1].encode())
        return Reply(200, [("Content-Type", CONTENT_TYPE)], body, cut_after=second + 100)

    http_server.reply = cut_in_second_part
    dest = tmp_path / "out"
    assert run_cli(http_server.url, *NAMES[:3], "-o", str(dest), "--no-progress") == 1
    assert "fetched 1 of 3 files" in capsys.readouterr().err
    assert (dest / NAMES[0]).read_bytes() == content(NAMES[0]) and not (dest / NAMES[1]).exists()


def test_list_from_stdin(
    http_server: ScriptedServer, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    http_server.reply = honest
    monkeypatch.setattr("sys.stdin", io.StringIO("\n".join(NAMES[:2]) + "\n"))
    assert run_cli(http_server.url, "--from-list", "-", "-o", str(tmp_path / "out"), "--no-progress") == 0
    assert [r.files for r in http_server.requests] == [NAMES[:2]]


@pytest.mark.slow  # the real command in a process
@pytest.mark.parametrize("live_axon", ["native"], indirect=True)
def test_the_real_command_counts_in_words_and_keeps_progress_off_a_pipe(live_axon, tmp_path: Path) -> None:
    """``axon fetch`` run as a user runs it, its stderr a pipe (not a terminal): no progress
    lines unless asked for; one file is "1 file"."""
    import os
    import subprocess
    import sys

    live_axon.put("words/one.bin", b"x" * 100_000)
    env = {**os.environ, "AXON_SECRET": live_axon.secret}

    def fetch(*argv: str) -> subprocess.CompletedProcess:
        return subprocess.run([sys.executable, "-m", "axon.cli", "fetch", live_axon.url, "words/one.bin", *argv],
                              capture_output=True, text=True, timeout=60, env=env, stdin=subprocess.DEVNULL)

    done = fetch("--zip", str(tmp_path / "one.zip"), "--unpack", "-o", str(tmp_path / "out"))
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith(f"saved 1 file as {tmp_path / 'one.zip'}") and "unpacked 1 file into" in done.stdout
    assert done.stderr == ""  # no progress into a pipe
    done = fetch("-o", str(tmp_path / "multi"))
    assert done.returncode == 0 and done.stdout.startswith("fetched 1 of 1 file (") and done.stderr == ""
    done = fetch("-o", str(tmp_path / "shown"), "--progress")
    assert done.returncode == 0 and "1/1 files" in done.stderr  # asked for: shown on the pipe


def test_archive_progress_counts_the_files_in_the_archive(live_axon, tmp_path: Path) -> None:
    """``--zip`` saves one file, an archive of four: its progress counts the four."""
    import os
    import subprocess
    import sys

    names = [f"four/{i}.bin" for i in range(4)]
    for name in names:
        live_axon.put(name, os.urandom(50_000))
    done = subprocess.run(
        [sys.executable, "-m", "axon.cli", "fetch", live_axon.url, *names, "--zip", str(tmp_path / "four.zip"),
         "--progress"], capture_output=True, text=True, timeout=60, stdin=subprocess.DEVNULL,
        env={**os.environ, "AXON_SECRET": live_axon.secret})
    assert done.returncode == 0, done.stderr
    assert "4/4 files" in done.stderr and "/1 files" not in done.stderr, done.stderr
    assert done.stdout.startswith(f"saved 4 files as {tmp_path / 'four.zip'} (") and "/s" in done.stdout


def test_help_shows_the_defaults(capsys) -> None:
    from axon.cli import main

    def usage(command: str) -> str:
        with pytest.raises(SystemExit) as exited:
            main([command, "--help"])
        assert exited.value.code == 0
        return " ".join(capsys.readouterr().out.split())  # argparse wraps its lines

    assert "--parallel N batches fetched at once, a connection each (default: 1)" in usage("fetch")
    assert "--workers WORKERS worker processes (default: 1; axon serve's default is one per CPU)" in usage("demo")
