"""The environment, read in one place: what each AXON_* variable sets, and its default."""

from __future__ import annotations

import pytest

from axon.app import App
from axon.config import Environment, environment, flag, must_be, variable
from axon.storage.local import FileStore


def test_defaults_when_nothing_is_set():
    assert environment({}) == Environment()
    assert environment({}).cache_control is None  # unset, as opposed to "" (none)


def test_every_variable():
    env = environment({
        "AXON_ROOT": "/srv", "AXON_SECRET": "s", "AXON_CACHE_CONTROL": "", "AXON_NO_OPENAT2": "1",
        "AXON_METRICS_DIR": "/run/m", "AXON_LOOP": "AsyncIO", "AXON_NO_SENDFILE": "yes", "AXON_BROWSE": "on",
        "AXON_IDENTITY_SECRET": "i", "AXON_PORTABLE_IDENTITY": "1",
        "AXON_STORE_TIMEOUT": "2.5", "AXON_OBJECT_CACHE": "0", "AXON_NO_OBJECT_LISTING": "1",
        "AXON_PURE_PYTHON": "yes", "AXON_NO_LOOP_LAG": "1",
    })
    assert env == Environment("/srv", "s", "", False, "/run/m", "asyncio", False, True,
                              identity_secret="i", portable_identity=True, store_timeout=2.5,
                              object_cache_mib=0, object_listing=False, pure_python=True, loop_lag=False)


def test_empty_is_unset_and_flags_take_true_words():
    assert variable("AXON_X", "d", {"AXON_X": ""}) == "d"
    assert [flag("F", {"F": v}) for v in ("1", "TRUE", " yes ", "on", "0", "no", "")] == [True] * 4 + [False] * 3


def test_the_app_and_the_store_take_their_defaults_from_it(tmp_path, monkeypatch):
    monkeypatch.setenv("AXON_ROOT", str(tmp_path))
    monkeypatch.setenv("AXON_SECRET", "from-env")
    monkeypatch.setenv("AXON_CACHE_CONTROL", "max-age=5")
    monkeypatch.setenv("AXON_NO_OPENAT2", "1")
    monkeypatch.setenv("AXON_BROWSE", "1")
    app = App()
    assert app.store.root == str(tmp_path.resolve()) and app.verifier is not None
    assert app.cache_control == "max-age=5"
    assert app.match("GET", "/browse/")  # the listing is on
    assert app.store._openat2 is None  # the portable walk
    # Parameters win over the environment.
    app = App(tmp_path, secret="", cache_control="no-store")
    assert app.verifier is None and app.cache_control == "no-store"
    monkeypatch.delenv("AXON_NO_OPENAT2")
    assert FileStore(tmp_path, openat2=False)._openat2 is None


def test_a_switch_set_to_no_known_word_is_an_error_naming_it():
    import pytest

    for word in ("0", "false", "No", "OFF", ""):
        assert flag("AXON_BROWSE", {"AXON_BROWSE": word}) is False
    with pytest.raises(ValueError, match="AXON_BROWSE must be 1, true, yes or on .* not 'maybe'"):
        environment({"AXON_BROWSE": "maybe"})


def test_a_number_that_is_not_one_is_an_error_naming_it():
    import pytest

    assert environment({"AXON_STORE_TIMEOUT": "2.5", "AXON_OBJECT_CACHE": "0"}).object_cache_mib == 0
    for env, said in [
        ({"AXON_STORE_TIMEOUT": "soon"}, "AXON_STORE_TIMEOUT must be a number, not 'soon'"),
        ({"AXON_STORE_TIMEOUT": "0"}, "AXON_STORE_TIMEOUT must be more than 0, not '0'"),
        ({"AXON_OBJECT_CACHE": "-1"}, "AXON_OBJECT_CACHE must be 0 or more, not '-1'"),
        ({"AXON_OBJECT_CACHE": "1.5"}, "AXON_OBJECT_CACHE must be a whole number, not '1.5'"),
    ]:
        with pytest.raises(ValueError) as caught:
            environment(env)
        assert str(caught.value) == said


def test_sizes_take_binary_units_and_name_the_variable_when_wrong():
    import pytest

    from axon.config import OBJECT_DISK_SIZE, parse_size

    assert [parse_size(s) for s in ("4096", "1k", "512M", "512MiB", "10G", "1.5T", "2gb")] == [
        4096, 1024, 512 << 20, 512 << 20, 10 << 30, 3 << 39, 2 << 30]
    assert environment({}).object_disk_size == OBJECT_DISK_SIZE and environment({}).object_disk_cache is None
    chosen = environment({"AXON_OBJECT_DISK_CACHE": "/var/cache/axon", "AXON_OBJECT_DISK_SIZE": "1m"})
    assert (chosen.object_disk_cache, chosen.object_disk_size) == ("/var/cache/axon", 1 << 20)
    for text, said in [("lots", "a number of bytes"), ("0", "more than 0"), ("-1G", "more than 0"), ("1X", "a number")]:
        with pytest.raises(ValueError, match=f"AXON_OBJECT_DISK_SIZE (is|must be) {said}"):
            environment({"AXON_OBJECT_DISK_SIZE": text})


@pytest.mark.parametrize(("value", "positive", "said"), [
    (0, False, None), (2.5, False, None), (0, True, "more than 0"), (-1, False, "0 or more"),
    (float("nan"), False, "0 or more"), (float("inf"), True, "more than 0"),
])
def test_one_rule_for_an_amount_of_0_or_more(value, positive, said):
    # The environment's numbers, the server's seconds flags and the object source's arguments ask it.
    assert must_be(value, positive=positive) == said
