"""What an App is built from: Settings, read from the environment once, and App(...)'s keywords
as its fields."""

from __future__ import annotations

import pytest

from axon.app import App
from axon.limits import Limits
from axon.settings import DEFAULT_CACHE_CONTROL, Settings


def test_the_environment_gives_the_settings():
    assert Settings.from_env({}) == Settings()
    env = {"AXON_ROOT": "/srv", "AXON_SECRET": "s", "AXON_CACHE_CONTROL": "", "AXON_BROWSE": "1",
           "AXON_PORTABLE_IDENTITY": "1", "AXON_IDENTITY_SECRET": "i"}
    assert Settings.from_env(env) == Settings(root="/srv", secret="s", cache_control="", browse=True,
                                              portable_identity=True, identity_secret="i")
    assert Settings.from_env({}).cache_control == DEFAULT_CACHE_CONTROL  # unset, not "" (none)


def test_a_header_value_is_checked_when_the_settings_are_made():
    with pytest.raises(ValueError, match="cache_control must not contain CR, LF or NUL"):
        Settings(cache_control="no-cache\r\nX-Evil: 1")


def test_the_key_of_batch_identities_is_the_identity_secret_else_the_secret():
    assert Settings(secret="s", identity_secret="i").key_secret == "i"
    assert Settings(secret="s").key_secret == "s"
    assert Settings(secret="").key_secret is None


def test_an_app_is_built_from_settings_and_its_keywords_win(tmp_path, monkeypatch):
    monkeypatch.setenv("AXON_BROWSE", "1")  # not read: the settings are given
    settings = Settings(root=tmp_path, limits=Limits(max_files=7), cache_control="max-age=5")
    app = App(settings=settings)
    assert app.settings is settings and app.store.root == str(tmp_path.resolve())
    assert (app.limits.max_files, app.cache_control, app.browse, app.verifier) == (7, "max-age=5", False, None)
    app = App(settings=settings, browse=True, secret="s")
    assert app.browse and app.verifier is not None and app.cache_control == "max-age=5"
    assert app.match("GET", "/browse/")


def test_without_settings_the_app_reads_the_environment(tmp_path, monkeypatch):
    monkeypatch.setenv("AXON_ROOT", str(tmp_path))
    monkeypatch.setenv("AXON_CACHE_CONTROL", "max-age=9")
    app = App()
    assert app.settings == Settings.from_env() and app.cache_control == "max-age=9"
