"""A batch saved as one zip or tar file, resumed after a cut, and unpacked safely: against Axon
under gunicorn (WSGI), uvicorn (ASGI) and its own server, with the standard library reading back."""

from __future__ import annotations

import argparse
import io
import os
import tarfile
import zipfile
from pathlib import Path

import pytest
from cut_proxy import CutProxy
from live_server import LiveAxon, make_files

from axon.client import FetchError, UnsafePathError
from axon.client.errors import BatchTooLarge
from axon.client import cli as fetch_cli
from axon.client.archive import PARTIAL, fetch_archive, unpack


def members(path: Path, fmt: str) -> dict[str, bytes]:
    """What zipfile or tarfile reads back: name -> bytes, in archive order."""
    if fmt == "zip":
        with zipfile.ZipFile(path) as z:
            assert z.testzip() is None
            return {i.filename: z.read(i) for i in z.infolist()}
    with tarfile.open(path) as t:
        return {m.name: t.extractfile(m).read() for m in t.getmembers()}  # type: ignore[union-attr]


def run_cli(*argv: str) -> int:
    parser = argparse.ArgumentParser(prog="axon")
    fetch_cli.add_parser(parser.add_subparsers(dest="command", required=True))
    args = parser.parse_args(["fetch", *argv])
    return args.func(args)


@pytest.mark.parametrize("fmt", ["zip", "tar"])
def test_a_batch_saved_as_one_archive_and_unpacked(live_axon: LiveAxon, tmp_path: Path, fmt: str) -> None:
    files = make_files(live_axon, f"arch-{fmt}")
    names = list(files)
    saved = fetch_archive(live_axon.url, names, tmp_path / f"batch.{fmt}", fmt, secret=live_axon.secret)
    assert saved.path == tmp_path / f"batch.{fmt}" and saved.size == saved.path.stat().st_size
    assert saved.resumed_from == 0 and saved.received == saved.size
    assert members(saved.path, fmt) == files
    assert sorted(os.listdir(tmp_path)) == [f"batch.{fmt}"]  # no partial file, no note left
    written = unpack(saved.path, tmp_path / "out")
    assert written == [tmp_path / "out" / n for n in names]
    assert {n: (tmp_path / "out" / n).read_bytes() for n in names} == files


@pytest.mark.parametrize("fmt", ["zip", "tar"])
def test_an_archive_cut_short_resumes_to_the_same_bytes(live_axon: LiveAxon, tmp_path: Path, fmt: str) -> None:
    files = make_files(live_axon, f"cut-{fmt}")
    names = list(files)
    whole = fetch_archive(live_axon.url, names, tmp_path / f"whole.{fmt}", fmt, secret=live_axon.secret)
    target = tmp_path / f"batch.{fmt}"
    with CutProxy(live_axon.url) as proxy:
        # Each fetch asks for the server's limits first (a connection the proxy passes whole);
        # the second cut is inside the resumed answer.
        proxy.cuts = [None, 123_456, None, 100_000]
        for _ in range(2):
            with pytest.raises(FetchError, match="stopped after"):
                fetch_archive(proxy.url, names, target, fmt, secret=live_axon.secret)
            assert not target.exists()  # complete or absent
        assert (tmp_path / f"batch.{fmt}{PARTIAL}").stat().st_size == 223_456
        result = fetch_archive(proxy.url, names, target, fmt, secret=live_axon.secret)
    assert result.resumed_from == 223_456 and result.received == whole.size - 223_456
    assert target.read_bytes() == whole.path.read_bytes()
    assert members(target, fmt) == files
    assert sorted(os.listdir(tmp_path)) == sorted([f"batch.{fmt}", f"whole.{fmt}"])


def test_a_changed_file_brings_the_whole_new_archive(live_axon: LiveAxon, tmp_path: Path) -> None:
    files = make_files(live_axon, "changed")
    names = list(files)
    target = tmp_path / "batch.zip"
    with CutProxy(live_axon.url) as proxy:
        proxy.cuts = [None, 50_000]  # the limits, then the archive cut short
        with pytest.raises(FetchError):
            fetch_archive(proxy.url, names, target, "zip", secret=live_axon.secret)
        files[names[0]] = os.urandom(300_000)  # the same size, new bytes: a new ETag
        live_axon.put(names[0], files[names[0]])
        result = fetch_archive(proxy.url, names, target, "zip", secret=live_axon.secret)
    assert result.resumed_from == 0  # If-Range did not match: a 200 with the whole archive
    assert members(target, "zip") == files


def test_without_resume_nothing_is_kept(live_axon: LiveAxon, tmp_path: Path) -> None:
    names = list(make_files(live_axon, "noresume"))
    with CutProxy(live_axon.url) as proxy:
        proxy.cuts = [None, 10_000]  # the limits, then the archive cut short
        with pytest.raises(FetchError):
            fetch_archive(proxy.url, names, tmp_path / "b.tar", "tar", secret=live_axon.secret, resume=False)
    assert os.listdir(tmp_path) == []


def test_a_refused_batch_writes_nothing(live_axon: LiveAxon, tmp_path: Path) -> None:
    with pytest.raises(FetchError) as refused:
        fetch_archive(live_axon.url, ["no/such.bin"], tmp_path / "b.zip", "zip", secret=live_axon.secret)
    assert refused.value.status == 404
    assert os.listdir(tmp_path) == []


@pytest.mark.parametrize("method", ["GET", "POST"])
def test_a_list_longer_than_the_server_takes_is_refused_before_sending(
    live_axon: LiveAxon, tmp_path: Path, capsys, method: str
) -> None:
    """One archive is one request: past the server's max_files (1,000, from its /api/limits) it
    is refused up front, naming the limit and what works instead, not answered with a 413."""
    names = [f"many/{i}.bin" for i in range(1001)]
    with pytest.raises(BatchTooLarge, match=r"1001 files do not fit in one archive: .* at most 1000 files"):
        fetch_archive(live_axon.url, names, tmp_path / "b.zip", "zip", method=method, secret=live_axon.secret)
    listing = tmp_path / "paths.txt"
    listing.write_text("".join(f"{n}\n" for n in names), encoding="utf-8")
    assert run_cli(live_axon.url, "--from-list", str(listing), "--tar", str(tmp_path / "b.tar"),
                   "--no-progress", "--secret", live_axon.secret) == 2
    err = capsys.readouterr().err
    assert "at most 1000 files" in err and "/api/limits" in err and "without --zip/--tar" in err
    assert sorted(os.listdir(tmp_path)) == ["paths.txt"]  # no archive, no partial, no note


def test_a_list_too_long_as_json_is_refused_before_sending(live_axon: LiveAxon, tmp_path: Path) -> None:
    names = [("abcdefghij" * 25 + "/") * 5 + str(i) for i in range(900)]  # 900 files, over 1 MiB as JSON
    with pytest.raises(BatchTooLarge, match=r"as JSON it is \d+ bytes, .* at most 1048576 \(max_body_bytes"):
        fetch_archive(live_axon.url, names, tmp_path / "b.zip", "zip", secret=live_axon.secret)
    assert os.listdir(tmp_path) == []


def test_the_cli_saves_and_unpacks(live_axon: LiveAxon, tmp_path: Path, capsys) -> None:
    files = make_files(live_axon, "cli")
    archive, out = tmp_path / "batch.tar", tmp_path / "out"
    argv = [live_axon.url, *files, "--tar", str(archive), "--unpack", "-o", str(out), "--no-progress",
            "--secret", live_axon.secret]
    assert run_cli(*argv) == 0
    assert "saved 3 files" in capsys.readouterr().out
    assert members(archive, "tar") == files
    assert {n: (out / n).read_bytes() for n in files} == files
    # A list from a file is POSTed: the same archive, saved as zip this time.
    listing = tmp_path / "paths.txt"
    listing.write_text("".join(f"{n}\n" for n in files), encoding="utf-8")
    zipped = tmp_path / "batch.zip"
    assert run_cli(live_axon.url, "--from-list", str(listing), "--zip", str(zipped), "--no-progress",
                   "--secret", live_axon.secret) == 0
    assert members(zipped, "zip") == files
    assert run_cli(live_axon.url, "a", "--unpack", "-o", str(out)) == 2  # --unpack needs an archive


# -- unpacking what a server (or anyone) sent: never outside the directory


def zip_of(*names: str) -> bytes:
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w") as z:
        for name in names:
            z.writestr(name, b"x")
    return buffer.getvalue()


def tar_of(*entries: tarfile.TarInfo) -> bytes:
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w") as t:
        for info in entries:
            t.addfile(info, io.BytesIO(b"x" * info.size) if info.isfile() else None)
    return buffer.getvalue()


def entry(name: str, kind: bytes = tarfile.REGTYPE, link: str = "") -> tarfile.TarInfo:
    info = tarfile.TarInfo(name)
    info.type, info.linkname, info.size = kind, link, 1 if kind == tarfile.REGTYPE else 0
    return info


@pytest.mark.parametrize(
    "archive",
    [
        zip_of("ok.txt", "../evil.txt"),
        zip_of("ok.txt", "/etc/evil.txt"),
        zip_of("ok.txt", "a\\..\\..\\evil.txt"),
        tar_of(entry("ok.txt"), entry("../evil.txt")),
        tar_of(entry("ok.txt"), entry("/tmp/evil.txt")),
        tar_of(entry("ok.txt"), entry("link", tarfile.SYMTYPE, "/etc")),
        tar_of(entry("ok.txt"), entry("hard", tarfile.LNKTYPE, "/etc/passwd")),
    ],
    ids=["zip-dotdot", "zip-absolute", "zip-backslash", "tar-dotdot", "tar-absolute", "tar-symlink", "tar-hardlink"],
)
def test_unpack_refuses_an_archive_with_a_way_out(tmp_path: Path, archive: bytes) -> None:
    path = tmp_path / "hostile"
    path.write_bytes(archive)
    with pytest.raises(UnsafePathError):
        unpack(path, tmp_path / "out")
    assert not (tmp_path / "out" / "ok.txt").exists()  # refused before anything was written
    assert not (tmp_path / "evil.txt").exists()


def test_unpack_does_not_follow_a_symlink_already_there(tmp_path: Path) -> None:
    out = tmp_path / "out"
    out.mkdir()
    (tmp_path / "elsewhere").mkdir()
    os.symlink(tmp_path / "elsewhere", out / "sub")
    path = tmp_path / "a.zip"
    path.write_bytes(zip_of("sub/x.txt"))
    with pytest.raises(UnsafePathError):
        unpack(path, out)
    assert os.listdir(tmp_path / "elsewhere") == []


def test_unpack_refuses_what_is_no_archive(tmp_path: Path) -> None:
    path = tmp_path / "x.bin"
    path.write_bytes(b"neither zip nor tar" * 100)
    with pytest.raises(ValueError, match="neither a zip nor a tar"):
        unpack(path, tmp_path / "out")
