"""``client/download.py``: a batch's body into files, fed the bytes a real server sent (gunicorn,
uvicorn and Axon's own server): whole or in pieces, each file whole under its name or absent,
a body cut short saved and continued from a 206, and what it reports as it goes."""

from __future__ import annotations

import http.client
import random
from email.message import Message
from pathlib import Path

import pytest
from live_server import LiveAxon, make_files

from axon.batchclient.request import build_request
from axon.client.download import (
    BatchDownload, FetchedFile, forget_if_refused, open_download, plan_resume, prepare_destination,
)
from axon.client.errors import FetchError
from axon.client.journal import JOURNAL_DIR


class Recorder:
    """A fetch's progress, every call in order."""

    def __init__(self) -> None:
        self.calls: list[tuple] = []

    def response_resumed(self, offset: int, length: int) -> None:
        self.calls.append(("resumed", offset, length))

    def response_started(self, content_length: int | None) -> None:
        self.calls.append(("started", content_length))

    def data_received(self, nbytes: int) -> None:
        self.calls.append(("data", nbytes))

    def file_written(self, file: FetchedFile) -> None:
        self.calls.append(("file", file.path, file.size))

    def received(self) -> int:
        return sum(call[1] for call in self.calls if call[0] == "data")


def answer(live: LiveAxon, names: list[str], headers: dict[str, str] | None = None) -> tuple[int, Message, bytes]:
    """The server's answer to the batch of ``names``: status, head, body."""
    request = build_request(live.url, names, headers=headers, secret=live.secret)
    connection = http.client.HTTPConnection(request.host, request.port, timeout=30)
    try:
        connection.request(request.method, request.target, body=request.body or None, headers=dict(request.headers))
        response = connection.getresponse()
        head = Message()
        for name, value in response.getheaders():
            head[name] = value
        return response.status, head, response.read()
    finally:
        connection.close()


def stray(dest: Path) -> list[str]:
    """Temporary files and journals left in ``dest``."""
    return sorted(str(p.relative_to(dest)) for p in dest.rglob("*") if p.name.endswith(".part") or JOURNAL_DIR in p.parts)


@pytest.mark.parametrize("pieces", ["whole", "random pieces"])
def test_a_body_becomes_its_files(live_axon: LiveAxon, tmp_path: Path, pieces: str) -> None:
    files = make_files(live_axon, "download-whole")
    names = list(files)
    status, head, body = answer(live_axon, names)
    assert status == 200
    dest = prepare_destination(tmp_path / "dest")
    progress = Recorder()
    rng = random.Random(7)
    with BatchDownload(dest, names, head["Content-Type"], len(body), progress=progress) as download:
        at = 0
        while at < len(body):
            size = len(body) if pieces == "whole" else rng.randint(1, 70_000)
            download.feed(body[at : at + size])
            at += size
        result = download.finish()
    assert {(dest / name).read_bytes() == data for name, data in files.items()} == {True}
    assert [f.path for f in result.files] == names and result.bytes_written == sum(map(len, files.values()))
    assert result.body_bytes == len(body) and stray(dest) == []
    assert progress.calls[0] == ("started", len(body)) and progress.received() == len(body)
    assert [call[1:] for call in progress.calls if call[0] == "file"] == [(n, len(d)) for n, d in files.items()]


def test_a_body_cut_short_leaves_only_whole_files(live_axon: LiveAxon, tmp_path: Path) -> None:
    """Without a journal: the files finished stay, the one cut short is nowhere."""
    files = make_files(live_axon, "download-cut")
    names = list(files)
    _, head, body = answer(live_axon, names)
    dest = prepare_destination(tmp_path / "dest")
    cut = len(body) - 100_000  # inside the second file
    with pytest.raises(FetchError):
        with BatchDownload(dest, names, head["Content-Type"], len(body)) as download:
            download.feed(body[:cut])
            download.finish()
    assert (dest / names[0]).read_bytes() == files[names[0]]
    assert not (dest / names[1]).exists() and not (dest / names[2]).exists() and stray(dest) == []


def test_a_part_the_batch_did_not_ask_for_is_refused(live_axon: LiveAxon, tmp_path: Path) -> None:
    files = make_files(live_axon, "download-unasked")
    names = list(files)
    _, head, body = answer(live_axon, names)
    dest = prepare_destination(tmp_path / "dest")
    with pytest.raises(FetchError, match="not requested|unexpected|not asked"):
        with BatchDownload(dest, names[1:], head["Content-Type"], len(body)) as download:
            download.feed(body)
    assert list(dest.rglob("*.bin")) == [] and stray(dest) == []


def test_a_saved_download_continues_from_a_206(live_axon: LiveAxon, tmp_path: Path) -> None:
    """Stopped inside a part with a journal: the part's bytes are kept; the next run asks for the
    rest (Range, If-Range), is told where it took over, and ends with every file whole."""
    files = make_files(live_axon, "download-resume")
    names = list(files)
    dest = prepare_destination(tmp_path / "dest")
    journal, saved, extra = plan_resume(dest, live_axon.url, names, None, True)
    assert saved is None and "Range" not in extra
    status, head, body = answer(live_axon, names, extra)
    cut = 250_000  # inside the first file (300,000 bytes)
    with pytest.raises(KeyboardInterrupt):
        with open_download(dest, names, status, head, len(body), journal=journal, saved=saved) as download:
            download.feed(body[:cut])
            raise KeyboardInterrupt  # Ctrl-C between two reads
    assert [p.name.endswith(".part") for p in dest.rglob("*.part")] == [True]  # kept, to resume

    journal, saved, extra = plan_resume(dest, live_axon.url, names, None, True)
    assert saved is not None and saved.offset == cut and extra["Range"] == f"bytes={cut}-"
    status, head, rest = answer(live_axon, names, extra)
    assert status == 206 and len(rest) == len(body) - cut
    progress = Recorder()
    with open_download(dest, names, status, head, len(rest), journal=journal, saved=saved,
                       progress=progress) as download:
        download.feed(rest)
        result = download.finish()
    assert progress.calls[:2] == [("resumed", cut, len(body)), ("started", len(body) - cut)]
    assert progress.received() == len(rest)  # this run's bytes only
    assert {(dest / name).read_bytes() == data for name, data in files.items()} == {True}
    assert result.body_bytes == len(body) and stray(dest) == []


def test_a_416_forgets_what_was_saved(live_axon: LiveAxon, tmp_path: Path) -> None:
    files = make_files(live_axon, "download-416")
    names = list(files)
    dest = prepare_destination(tmp_path / "dest")
    journal, saved, extra = plan_resume(dest, live_axon.url, names, None, True)
    status, head, body = answer(live_axon, names, extra)
    with pytest.raises(KeyboardInterrupt):
        with open_download(dest, names, status, head, len(body), journal=journal, saved=saved) as download:
            download.feed(body[:1000])
            raise KeyboardInterrupt
    journal, saved, _ = plan_resume(dest, live_axon.url, names, None, True)
    assert saved is not None and stray(dest)
    forget_if_refused(416, journal, saved)
    assert stray(dest) == []
