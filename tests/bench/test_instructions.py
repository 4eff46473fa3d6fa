"""scripts/instructions.py: the requests it measures, above all those that never repeat."""

from __future__ import annotations

import importlib.util
import os
from pathlib import Path
from urllib.parse import parse_qsl, urlsplit

import pytest

from axon.bench.scenarios import POOL_FILE_SIZE, POOL_FILES, pool_name

SCRIPT = Path(__file__).resolve().parents[2] / "scripts" / "instructions.py"


@pytest.fixture(scope="module")
def script():
    spec = importlib.util.spec_from_file_location("instructions", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _target(request: bytes) -> str:
    line = request.split(b"\r\n", 1)[0].decode()
    method, target, version = line.split(" ")
    assert (method, version) == ("GET", "HTTP/1.1") and request.endswith(b"\r\n\r\n")
    return target


def test_random_kinds_draw_new_pool_files_for_every_request(script):
    pool = {pool_name(i) for i in range(POOL_FILES)}
    assert (script.POOL_FILES, script.POOL_FILE_SIZE) == (POOL_FILES, POOL_FILE_SIZE)
    r32 = script.request_maker("R32", script.KINDS["R32"], seed=1)
    batches = [tuple(v for _, v in parse_qsl(urlsplit(_target(r32(i))).query)) for i in range(200)]
    assert all(len(set(b)) == 32 and set(b) <= pool for b in batches)
    assert len(set(batches)) == 200
    f1 = script.request_maker("F1", script.KINDS["F1"], seed=1)
    files = [_target(f1(i)) for i in range(200)]
    assert all(t.startswith("/files/") and t[len("/files/"):] in pool for t in files)
    assert len(set(files)) > 150


def test_new_kinds_change_a_header_and_the_others_repeat_their_bytes(script):
    for name in ("health_new", "T1_new", "B32_new"):
        make = script.request_maker(name, script.KINDS[name])
        assert _target(make(0)) == script.KINDS[name.removesuffix("_new")]
        assert len({make(i) for i in range(100)}) == 100, name
    same = script.request_maker("T1", script.KINDS["T1"])
    assert same(0) == same(1) == b"GET /api/stream-files?file1=f8k.bin HTTP/1.1\r\nHost: x\r\n\r\n"


@pytest.mark.slow  # writes the 10,000-file pool
def test_the_pool_it_makes_is_the_bench_pool(script, tmp_path, monkeypatch):
    monkeypatch.setattr(script, "POOL_FILES", 1200)
    script.make_pool(str(tmp_path))
    made = sorted(str(p.relative_to(tmp_path)) for p in tmp_path.rglob("*.bin"))
    assert made == sorted(pool_name(i) for i in range(1200))
    assert {os.path.getsize(tmp_path / n) for n in made} == {POOL_FILE_SIZE}
