"""The scenario matrix and the requests it turns into, per kind of server."""

from __future__ import annotations

from urllib.parse import parse_qsl, urlsplit

import pytest

from axon.bench import scenarios
from axon.bench.scenarios import (AXON, ORIGINAL, STATIC, as_distinct, ensure_files, ensure_pool, find, matrix,
                                  pool_name, real, request_for, select)

KB = 1024


def test_matrix_is_the_articles_plus_ours():
    names = [s.name for s in matrix()]
    assert names == ["T1", "T2", "T3", "T4", "T5", "T6", "T7", "T8", "B32", "F8", "F64", "F512",
                     "health", "error", "echo"]
    by = {s.name: s for s in matrix()}
    # The article's table: file count, size each, payload total.
    expected = {"T1": (1, 8), "T2": (2, 4), "T3": (1, 64), "T4": (2, 32),
                "T5": (1, 256), "T6": (2, 128), "T7": (1, 512), "T8": (2, 256), "B32": (32, 4)}
    for name, (count, size_kb) in expected.items():
        assert (by[name].file_count, by[name].file_size) == (count, size_kb * KB)
    assert [by[f"T{i}"].payload // KB for i in range(1, 9)] == [8, 8, 64, 64, 256, 256, 512, 512]
    assert by["error"].expect_status == 404 and by["T1"].expect_status == 200


def test_batch_urls_name_the_files_in_order_as_the_article_did():
    t2 = request_for(select("T2")[0], AXON)
    assert t2.method == "GET" and t2.per_batch == 1
    parts = urlsplit(t2.target)
    assert parts.path == "/api/stream-files"
    assert parse_qsl(parts.query) == [("file1", "examples/4kb.bin"), ("file2", "examples/4kb.bin")]
    assert "examples/4kb.bin" in t2.target  # slashes left readable, as in the article's commands

    b32 = request_for(select("B32")[0], AXON)
    pairs = parse_qsl(urlsplit(b32.target).query)
    assert [k for k, _ in pairs] == [f"file{i}" for i in range(1, 33)]
    assert len({v for _, v in pairs}) == 32  # 32 distinct files: 32 opens, not one file 32 times


def test_static_dialect_sends_one_file_and_counts_the_batch():
    t8 = request_for(select("T8")[0], STATIC)
    assert (t8.method, t8.target, t8.per_batch) == ("GET", "/files/examples/256kb.bin", 2)
    b32 = request_for(select("B32")[0], STATIC)
    assert b32.target.startswith("/files/examples/small/") and b32.per_batch == 32
    assert request_for(select("error")[0], STATIC).target == "/files/" + scenarios.MISSING_FILE
    assert request_for(select("echo")[0], STATIC) is None  # nothing to compare with


def test_baselines():
    assert request_for(select("health")[0], AXON).target == "/api/health"
    assert request_for(select("health")[0], STATIC).target == "/api/health"
    error = request_for(select("error")[0], AXON)
    assert parse_qsl(urlsplit(error.target).query) == [("file1", scenarios.MISSING_FILE)]
    echo = request_for(select("echo")[0], AXON)
    assert (echo.method, echo.target) == ("POST", "/api/echo")
    assert echo.body == scenarios.ECHO_BODY and ("Content-Type", "application/json") in echo.headers


def test_select_groups_names_and_order():
    assert [s.name for s in select("article")] == [f"T{i}" for i in range(1, 9)]
    assert [s.name for s in select("echo, t1,health,T1")] == ["T1", "health", "echo"]  # matrix order, once each
    # Real traffic first, then the article's matrix and the baselines.
    assert [s.name for s in select("all")] == ["R1", "R32", "R256", "F1"] + [s.name for s in matrix()]
    with pytest.raises(ValueError, match="unknown scenario"):
        select("T9")


def test_ensure_files_makes_every_file_a_scenario_names(tmp_path):
    root = ensure_files(tmp_path / "files")
    for scenario in matrix():
        for name in scenario.files:
            assert (root / name).stat().st_size == scenario.file_size
    assert not (root / scenarios.MISSING_FILE).exists()


def test_archive_scenarios_are_the_same_batches_at_the_archive_urls():
    names = [s.name for s in select("archive")]
    assert names == ["T8", "T8.zip", "T8.zip.cold", "T8.tar", "B32", "B32.zip", "B32.zip.cold", "B32.tar"]
    for base in ("T8", "B32"):
        plain = request_for(select(base)[0], AXON)
        for fmt in ("zip", "tar"):
            scenario = select(f"{base}.{fmt}")[0]
            assert (scenario.format, scenario.cold) == (fmt, False)
            assert scenario.files == select(base)[0].files and scenario.expect_status == 200
            request = request_for(scenario, AXON)
            # The same query, at the URL a browser's link names: no Accept header needed.
            assert request.target == plain.target.replace("/api/stream-files?", f"/api/stream-files.{fmt}?")
            assert request.headers == () and request.per_batch == 1
        cold = select(f"{base}.zip.cold")[0]
        assert cold.cold and cold.format == "zip"
        assert request_for(cold, AXON).target == request_for(select(f"{base}.zip")[0], AXON).target
    assert select("b32.ZIP")[0].name == "B32.zip"  # names are case-blind, as the others
    assert select("B32.zip")[0].label == "32x4KB zip" and select("T8.zip.cold")[0].label == "2x256KB zip, CRCs cold"


def test_archives_stay_out_of_all_and_off_a_static_server():
    assert not any(s.format != "multipart" for s in select("all"))  # "all" is the article's run, as before
    assert request_for(select("B32.tar")[0], STATIC) is None  # nginx has no archive of many files
    assert request_for(select("T8.zip.cold")[0], STATIC) is None


def test_cold_scenarios_get_a_server_serving_the_app_that_keeps_no_crc(tmp_path):
    from axon.bench import targets
    from axon.bench.echo_app import cold_app, app

    warm = targets.Context(tmp_path, tmp_path, 8000, tmp_path)
    cold = targets.Context(tmp_path, tmp_path, 8000, tmp_path, cold_crc=True)
    for name in ("axon", "uvicorn", "gunicorn", "granian", "uwsgi"):
        argv = " ".join(targets.TARGETS[name].commands(warm)[0].argv)
        cold_argv = " ".join(targets.TARGETS[name].commands(cold)[0].argv)
        assert "echo_app:cold_" not in argv and "echo_app:cold_" in cold_argv, name
    assert cold_app.store.crcs.size == 0 and app.store.crcs.size > 0


def test_single_file_scenarios_ask_files_for_the_file_a_batch_of_one_carries():
    by = {s.name: s for s in matrix()}
    for single, batch in (("F8", "T1"), ("F64", "T3"), ("F512", "T7")):
        assert by[single].kind == "file" and by[single].files == by[batch].files
        expected = "/files/" + by[batch].files[0]
        for dialect in (AXON, STATIC):  # the same URL on Axon and on a static server
            request = request_for(by[single], dialect)
            assert (request.method, request.target, request.per_batch) == ("GET", expected, 1)
        assert request_for(by[batch], ORIGINAL).target.startswith("/api/stream-files?")
        assert request_for(by[single], ORIGINAL) is None  # the original has no /files/
    assert by["F512"].label == "/files/ 512KB" and by["F8"].expect_status == 200
    assert [s.name for s in select("files")] == ["F8", "F64", "F512"]


def test_granian_static_serves_the_root_at_files_beside_a_minimal_app(tmp_path):
    from axon.bench import targets

    target = targets.TARGETS["granian-static"]
    assert target.dialect is STATIC
    ctx = targets.Context(tmp_path / "root", tmp_path / "work", 8123, tmp_path / "cache")
    (command,) = target.commands(ctx)
    argv = command.argv
    assert argv[argv.index("--static-path-mount") + 1] == str(ctx.root)
    assert argv[argv.index("--static-path-route") + 1] == "/files"
    assert argv[-1] == targets.STATIC_APP and argv[argv.index("--port") + 1] == "8123"


def test_real_traffic_draws_from_the_pool_for_every_request():
    assert [s.name for s in select("real")] == ["R1", "R32", "R256", "F1"]
    by = {s.name: s for s in real()}
    for name, count in (("R1", 1), ("R32", 32), ("R256", 256)):
        scenario = by[name]
        assert (scenario.kind, scenario.file_count, scenario.file_size) == ("batch", count, 4 * KB)
        assert scenario.pool == scenarios.POOL_FILES == 10_000
        request = request_for(scenario, AXON)
        assert (request.draw.count, request.draw.pool, request.draw.batch) == (count, 10_000, True)
        assert request.per_batch == 1 and request.dynamic
        # The probe's request names the pool's first files, in the form the draws take.
        assert parse_qsl(urlsplit(request.target).query) == [(f"file{i + 1}", pool_name(i)) for i in range(count)]
        assert len(request.target) < 16 * KB  # within axon serve's URL limit, R256 included
        static = request_for(scenario, STATIC)  # nginx: one random file a request, n requests a batch
        assert (static.target, static.per_batch, static.draw.count, static.draw.batch) == (
            "/files/pool/00/00000.bin", count, 1, False)
        assert request_for(scenario, ORIGINAL).draw.batch  # the original has the batch API
    f1 = by["F1"]
    for dialect in (AXON, STATIC):
        request = request_for(f1, dialect)
        assert (request.target, request.per_batch, request.draw.count, request.draw.batch) == (
            "/files/pool/00/00000.bin", 1, 1, False)
    assert request_for(f1, ORIGINAL) is None  # no /files/
    assert by["R32"].label == "32x4KB random of 10,000" and by["F1"].label == "/files/ 4KB random of 10,000"
    with pytest.raises(ValueError, match="distinct files"):
        scenarios.Draw(33, 32, True)


def test_distinct_variants_carry_a_header_that_changes_and_do_the_same_work():
    assert [s.name for s in select("distinct")] == ["T1~", "T3~", "B32~", "health~"]
    assert [s.name for s in select("health~, t1~, T1, R1")] == ["R1", "T1~", "health~", "T1"]  # real traffic first
    for name in ("T1", "T3", "B32", "health", "echo", "B32.zip"):
        base = find(name)
        variant = as_distinct(base)
        assert variant.name == name + "~" and variant.distinct and find(variant.name) == variant
        assert variant.label.endswith(", a new header each request")
        for dialect in (AXON, STATIC):
            plain, distinct = request_for(base, dialect), request_for(variant, dialect)
            if plain is None:
                assert distinct is None
                continue
            assert (distinct.target, distinct.per_batch, distinct.draw) == (plain.target, plain.per_batch, None)
            assert distinct.distinct_header == scenarios.DISTINCT_HEADER and not plain.dynamic and distinct.dynamic
    assert as_distinct(find("R32")) == find("R32")  # random files are never the same request twice
    assert as_distinct(as_distinct(find("T1"))) == as_distinct(find("T1"))


@pytest.mark.slow  # writes the 10,000-file pool
def test_the_pool_is_made_once_distinct_and_in_small_directories(tmp_path):
    root = tmp_path / "files"
    assert ensure_pool(root, count=2500) == 2500
    names = [pool_name(i) for i in range(2500)]
    contents = {(root / n).read_bytes() for n in names}
    assert len(contents) == 2500 and {len(c) for c in contents} == {4 * KB}  # every file its own bytes
    dirs = sorted(p for p in (root / "pool").iterdir())
    assert [d.name for d in dirs] == ["00", "01", "02"] and max(len(list(d.iterdir())) for d in dirs) <= 1000
    before = {p: p.stat().st_mtime_ns for p in (root / n for n in names)}
    assert ensure_pool(root, count=2500) == 0  # idempotent: nothing written again
    assert {p: p.stat().st_mtime_ns for p in before} == before
    (root / names[7]).write_bytes(b"short")  # a damaged file is made again, with the same bytes
    (root / names[2000]).unlink()
    assert ensure_pool(root, count=2500) == 2
    assert {(root / n).read_bytes() for n in names} == contents


@pytest.mark.slow
def test_ensure_files_makes_the_whole_pool_only_when_asked(tmp_path):
    root = ensure_files(tmp_path / "files")
    assert not (root / "pool").exists()
    root = ensure_files(tmp_path / "files", pool=True)
    assert sum(1 for _ in (root / "pool").rglob("*.bin")) == scenarios.POOL_FILES
    assert (root / pool_name(scenarios.POOL_FILES - 1)).stat().st_size == 4 * KB
