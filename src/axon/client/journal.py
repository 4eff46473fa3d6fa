"""Where an interrupted batch download stands, saved so a later fetch can resume it.

Axon gives a batch a strong ``ETag`` (the same batch of unchanged files is the same bytes), so
an interrupted download can ask for the rest: ``Range: bytes=<offset>-`` with
``If-Range: <etag>``. To continue from an arbitrary byte, three things are saved, in one small
JSON file per batch, ``DEST/.axon-partial/<key>.json``:

* the body ``offset`` reached, with the ``etag``, ``content_type`` (the boundary) and ``length``;
* the multipart parser's snapshot at exactly that offset (its state, its counters, and the few
  bytes it holds back: bounded by the part header limit), so a cut inside part headers or
  inside a delimiter resumes as exactly as one inside file data;
* the files already complete, and the part in progress: its temporary file (beside its final
  name, as always) and how many of its bytes were written.

The part's bytes are not copied anywhere: they are already in its temporary file, which a resume
truncates to the saved count (it may hold more if the process died after a write but before a
save) and appends to. Memory stays constant, and every file still ends up whole or absent.

The journal is written whenever a download stops on an error it can recover from (the network,
an interruption) and every second meanwhile, so even a killed process loses at most a second.
A part begun after the last save has a temporary file no journal names; its name is the batch's
and the part's (:meth:`Journal.part_token`), so the next run of the batch writes over it.
"""

from __future__ import annotations

import base64
import contextlib
import hashlib
import json
import os
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from .paths import resolve_destination

__all__ = ["JOURNAL_DIR", "Journal", "SavedBatch", "SavedPart"]

JOURNAL_DIR = ".axon-partial"
_VERSION = 1
_TEMP_NAME = re.compile(r"\.(?P<name>.+)\.[0-9a-f]{12}\.part")


@dataclass(frozen=True)
class SavedPart:
    path: str  # as requested
    temp: str  # the temporary file, relative to the destination
    declared: int
    written: int


@dataclass(frozen=True)
class SavedBatch:
    etag: str
    content_type: str
    length: int  # of the whole body
    offset: int  # body bytes received and parsed
    parser: dict[str, Any]  # MultipartParser.snapshot()
    done: list[tuple[str, int]] = field(default_factory=list)  # (path, size) of whole files
    part: SavedPart | None = None


class Journal:
    """The saved state of one batch (a base URL and a list of paths) in one destination."""

    def __init__(self, root: Path, base_url: str, files: list[str]) -> None:
        self.root = root
        # GET or POST, the same list from the same server is the same batch.
        key = hashlib.sha256(json.dumps([base_url.rstrip("/"), files]).encode("utf-8")).hexdigest()[:32]
        self.key = key
        self.path = root / JOURNAL_DIR / f"{key}.json"

    def part_token(self, index: int) -> str:
        """The 12 hex digits in the temporary file's name of part ``index`` of this batch: the
        same in every run of it, so a run writes over what a killed one left unrecorded."""
        return hashlib.sha256(f"{self.key}/{index}".encode("ascii")).hexdigest()[:12]

    def load(self) -> SavedBatch | None:
        """The saved state, or None if there is none usable (an unusable one is discarded)."""
        try:
            saved = _decode(json.loads(self.path.read_text(encoding="utf-8")))
        except (FileNotFoundError, NotADirectoryError):
            return None
        except (OSError, ValueError, KeyError, TypeError):
            self.remove()  # unreadable or not ours: its part's temporary file cannot be trusted
            return None
        try:
            if saved.part is not None:
                temp = self.temp_path(saved.part)
                if not temp.exists():
                    # Finished and renamed into place before the next save could name the part
                    # after it (a process killed in between): its bytes are whole in the file,
                    # which becomes the temporary file again and is written on from the offset.
                    target = resolve_destination(self.root, saved.part.path)
                    if target.stat().st_size == saved.part.declared:
                        os.replace(target, temp)
                if temp.stat().st_size < saved.part.written:
                    raise ValueError("the part's temporary file is shorter than saved")
            for path, size in saved.done:
                # A file finished before but since removed or changed here: start over.
                if resolve_destination(self.root, path).stat().st_size != size:
                    raise ValueError(f"{path!r} is no longer as it was written")
        except (OSError, ValueError):
            self.discard(saved)
            return None
        return saved

    def save(self, saved: SavedBatch) -> None:
        self.path.parent.mkdir(exist_ok=True)
        temp = self.path.with_suffix(f".{os.getpid()}.tmp")
        temp.write_text(json.dumps(_encode(saved)), encoding="utf-8")
        os.replace(temp, self.path)  # readers see the old state or the new one, never half

    def discard(self, saved: SavedBatch | None) -> None:
        """Forget ``saved`` for good: its part's temporary file and the journal."""
        if saved is not None and saved.part is not None:
            with contextlib.suppress(OSError, ValueError):
                os.unlink(self.temp_path(saved.part))
        self.remove()

    def remove(self) -> None:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(self.path)
        with contextlib.suppress(OSError):
            self.path.parent.rmdir()  # only if no other batch left its journal there

    def temp_path(self, part: SavedPart) -> Path:
        """The part's temporary file, checked to be one the client made (the journal is data)."""
        temp = Path(part.temp)
        match = _TEMP_NAME.fullmatch(temp.name)
        expected_parent = Path(*Path(part.path).parts[:-1])
        if match is None or match["name"] != Path(part.path).name or temp.parent != expected_parent:
            raise ValueError(f"not a temporary file of {part.path!r}: {part.temp!r}")
        return self.root / temp


def _encode(saved: SavedBatch) -> dict[str, Any]:
    parser = dict(saved.parser, pending=base64.b64encode(saved.parser["pending"]).decode("ascii"))
    part = saved.part
    return {
        "version": _VERSION,
        "etag": saved.etag,
        "content_type": saved.content_type,
        "length": saved.length,
        "offset": saved.offset,
        "parser": parser,
        "done": [list(d) for d in saved.done],
        "part": None if part is None else [part.path, part.temp, part.declared, part.written],
    }


def _decode(data: dict[str, Any]) -> SavedBatch:
    if data["version"] != _VERSION:
        raise ValueError("journal of another version")
    parser = dict(data["parser"])
    parser["pending"] = base64.b64decode(parser["pending"], validate=True)
    part = None
    if data["part"] is not None:
        path, temp, declared, written = data["part"]
        part = SavedPart(str(path), str(temp), _count(declared), _count(written))
        if part.written > part.declared:
            raise ValueError("more written than declared")
    saved = SavedBatch(
        str(data["etag"]),
        str(data["content_type"]),
        _count(data["length"]),
        _count(data["offset"]),
        parser,
        [(str(p), _count(size)) for p, size in data["done"]],
        part,
    )
    # A body received whole has nothing left to resume (and Range would be unsatisfiable).
    if not saved.offset < saved.length or not saved.etag.startswith('"'):
        raise ValueError("nothing to resume")
    return saved


def _count(value: Any) -> int:
    if type(value) is not int or value < 0:
        raise ValueError(f"not a byte count: {value!r}")
    return value
