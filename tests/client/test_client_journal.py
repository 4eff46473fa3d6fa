"""Resuming from a saved state, in-process: the parser's snapshot, the journal, BatchDownload.

A body cut at every single byte offset (inside part headers, file data, delimiters, the closing
delimiter) is saved, restored and completed, and must give exactly what one uninterrupted pass
gives. The journal is data on disk: a tampered one is discarded without touching any file.
"""

from __future__ import annotations

import json
import random
from email.message import Message
from pathlib import Path

import pytest
from multipart_support import BOUNDARY, CONTENT_TYPE, axon_body, merge_data, parse, random_splits

from axon.client import FetchError, MultipartParser
from axon.client import download as download_module
from axon.client.download import BatchDownload, open_download, prepare_destination
from axon.client.journal import JOURNAL_DIR, Journal

FILES = {
    "a.bin": bytes(range(100)),
    "dir/empty.bin": b"",
    "dir/c.txt": b"looks like a delimiter: \r\n--" + BOUNDARY.encode() + b"--\r\n and more",
}
NAMES = list(FILES)
BODY = axon_body(list(FILES.items()))
ETAG = '"0123456789abcdef"'


def continuation(offset: int) -> Message:
    """The head of a 206 answer continuing BODY from ``offset``."""
    headers = Message()
    headers["Content-Type"] = CONTENT_TYPE
    headers["ETag"] = ETAG
    headers["Content-Range"] = f"bytes {offset}-{len(BODY) - 1}/{len(BODY)}"
    return headers


def listing(directory: Path) -> set[str]:
    return {str(p.relative_to(directory)) for p in directory.rglob("*") if not p.is_dir()}


def cut_at(root: Path, offset: int) -> Journal:
    """A journaled download of BODY that ends after ``offset`` bytes."""
    journal = Journal(root, "http://example.test", NAMES)
    with pytest.raises(FetchError):
        with BatchDownload(root, NAMES, CONTENT_TYPE, len(BODY), journal=journal, etag=ETAG) as download:
            if offset:
                download.feed(BODY[:offset])
            download.finish()
    return journal


def test_parser_snapshot_restores_at_every_offset() -> None:
    whole = parse([BODY])
    for offset in range(len(BODY) + 1):
        first = MultipartParser(BOUNDARY)
        events = first.feed(BODY[:offset]) if offset else []
        # Through JSON-like plain values, as the journal stores it.
        snapshot = json.loads(json.dumps({**first.snapshot(), "pending": first.snapshot()["pending"].hex()}))
        snapshot["pending"] = bytes.fromhex(snapshot["pending"])
        second = MultipartParser.restore(BOUNDARY, snapshot)
        if offset < len(BODY):
            events += second.feed(BODY[offset:])
        events += second.close()
        assert merge_data(events) == whole, offset


def test_a_failed_parser_cannot_be_saved_and_a_bad_snapshot_is_refused() -> None:
    parser = MultipartParser(BOUNDARY)
    with pytest.raises(ValueError):
        parser.feed(b"--" + BOUNDARY.encode() + b"\r\nno header end" + b"x" * 20000)
    with pytest.raises(ValueError, match="cannot be saved"):
        parser.snapshot()
    good = MultipartParser(BOUNDARY).snapshot()
    for bad in ({**good, "state": "ERROR"}, {**good, "remaining": -5}, {**good, "pending": "text"}, {}):
        with pytest.raises(ValueError):
            MultipartParser.restore(BOUNDARY, bad)


@pytest.mark.slow  # a download cut at every offset
def test_download_resumes_at_every_offset(tmp_path: Path) -> None:
    rng = random.Random(5)
    # Every offset costs files and renames: take every third, and every one around each
    # delimiter and header block end (the parser test covers all offsets in memory).
    marks = [i for i in range(len(BODY)) if BODY.startswith((b"\r\n--", b"\r\n\r\n"), i)]
    offsets = set(range(0, len(BODY), 3)) | {i + d for i in marks for d in range(-2, 10)}
    for offset in sorted(o for o in offsets if 0 <= o < len(BODY)):
        root = prepare_destination(tmp_path / f"d{offset}")
        journal = cut_at(root, offset)
        saved = journal.load()
        if saved is None:
            # Only once the closing delimiter is in: every file is already whole.
            assert offset >= len(BODY) - len(b"\r\n")  # only the epilogue's CRLF is missing
            assert listing(root) == set(NAMES)
            continue
        assert saved.offset == offset
        with open_download(
            root, NAMES, 206, continuation(offset), len(BODY) - offset, journal=journal, saved=saved
        ) as download:
            for piece in random_splits(BODY[offset:], rng, 40):
                download.feed(piece)
            result = download.finish()
        assert sorted(f.path for f in result.files) == sorted(NAMES)
        assert result.body_bytes == len(BODY)
        assert listing(root) == set(NAMES), offset  # no temporary file, no journal left
        for path, data in FILES.items():
            assert (root / path).read_bytes() == data, (offset, path)


def saved_inside_a(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    """A journaled download of BODY saved after every chunk, fed 40 bytes into a.bin: its root,
    journal, download, the offset reached and what the journal saved there."""
    monkeypatch.setattr(download_module, "CHECKPOINT_INTERVAL", 0.0)  # save after every chunk
    root = prepare_destination(tmp_path / "dest")
    journal = Journal(root, "http://example.test", NAMES)
    download = BatchDownload(root, NAMES, CONTENT_TYPE, len(BODY), journal=journal, etag=ETAG)
    cut = BODY.index(FILES["a.bin"]) + 40
    download.feed(BODY[:cut])
    saved = journal.load()
    assert saved is not None and saved.offset == cut and saved.part is not None and saved.part.written == 40
    return root, journal, download, cut, saved


def test_a_killed_download_resumes_from_its_last_checkpoint(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    root, journal, _, cut, saved = saved_inside_a(tmp_path, monkeypatch)
    # The process dies after writing more of the part than the journal recorded: no __exit__.
    with open(root / saved.part.temp, "ab") as part:
        part.write(b"bytes the journal never counted")
    assert (root / saved.part.temp).stat().st_size > 40
    with open_download(root, NAMES, 206, continuation(cut), len(BODY) - cut, journal=journal, saved=saved) as resumed:
        resumed.feed(BODY[cut:])
        resumed.finish()
    assert listing(root) == set(NAMES)
    assert all((root / p).read_bytes() == d for p, d in FILES.items())


def test_a_part_finished_after_the_last_save_is_resumed_not_started_over(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Killed after the part the journal names was renamed into place and before the next save:
    the whole file becomes the part's temporary file again, and the download resumes."""
    root, journal, download, cut, saved = saved_inside_a(tmp_path, monkeypatch)
    # The rest of a.bin arrives and it is renamed into place; the process dies before the journal
    # is saved again (the save at the chunk's end is undone: the journal on disk is the first one).
    before = journal.path.read_bytes()
    end = BODY.index(FILES["a.bin"]) + len(FILES["a.bin"])
    download.feed(BODY[cut:BODY.index(b"\r\n\r\n", end) + 4])  # up to the next part's head: a.bin ended
    journal.path.write_bytes(before)
    assert (root / "a.bin").read_bytes() == FILES["a.bin"] and not (root / saved.part.temp).exists()
    again = journal.load()
    assert again is not None and again.offset == cut, "started over"
    with open_download(root, NAMES, 206, continuation(cut), len(BODY) - cut, journal=journal, saved=again) as resumed:
        resumed.feed(BODY[cut:])
        resumed.finish()
    assert listing(root) == set(NAMES)
    assert all((root / p).read_bytes() == d for p, d in FILES.items())


def test_a_continuation_that_does_not_fit_is_refused_and_forgotten(tmp_path: Path) -> None:
    root = prepare_destination(tmp_path / "dest")
    offset = BODY.index(FILES["a.bin"]) + 10
    journal = cut_at(root, offset)
    saved = journal.load()
    assert saved is not None
    wrong = continuation(offset + 1)
    with pytest.raises(FetchError, match="Content-Range"):
        open_download(root, NAMES, 206, wrong, None, journal=journal, saved=saved)
    assert listing(root) == set()  # the part's temporary file and the journal are gone


def test_a_full_answer_to_a_resume_starts_over(tmp_path: Path) -> None:
    root = prepare_destination(tmp_path / "dest")
    journal = cut_at(root, len(BODY) - 100)
    saved = journal.load()
    assert saved is not None
    headers = Message()
    headers["Content-Type"] = CONTENT_TYPE
    with open_download(root, NAMES, 200, headers, len(BODY), journal=journal, saved=saved) as download:
        download.feed(BODY)
        download.finish()
    assert listing(root) == set(NAMES)


@pytest.mark.parametrize(
    "temp", ["../outside.txt", "/etc/passwd", "dir/.a.bin.0123456789ab.part", ".x.0123456789ab.part"]
)
def test_a_tampered_journal_is_discarded_untouched(tmp_path: Path, temp: str) -> None:
    root = prepare_destination(tmp_path / "dest")
    outside = tmp_path / "outside.txt"
    outside.write_bytes(b"keep me")
    journal = cut_at(root, BODY.index(FILES["a.bin"]) + 10)
    data = json.loads(journal.path.read_text())
    data["part"][1] = temp  # a temporary file that is not the one of this part
    journal.path.write_text(json.dumps(data))
    assert journal.load() is None
    assert not journal.path.exists() and not (root / JOURNAL_DIR).exists()
    assert outside.read_bytes() == b"keep me"


def test_a_finished_file_removed_since_means_starting_over(tmp_path: Path) -> None:
    root = prepare_destination(tmp_path / "dest")
    journal = cut_at(root, BODY.index(FILES["dir/c.txt"]) + 3)
    assert journal.load() is not None
    (root / "a.bin").unlink()
    assert journal.load() is None and listing(root) == {"dir/empty.bin"}  # the part's temp file went too
