"""attnrec serve's options -> the app's ServingConfig: each option reaches the field it names."""

from __future__ import annotations

from dataclasses import fields
from pathlib import Path

import pytest

from attnrec.cli.serve import _AS_NAMED, ServeOptions
from attnrec.serving.serving_config import ServingConfig


def test_the_options_named_like_a_config_field_set_it_as_given() -> None:
    config_fields = {f.name for f in fields(ServingConfig)}
    option_fields = {f.name for f in fields(ServeOptions)}
    assert set(_AS_NAMED) <= config_fields & option_fields
    cfg = ServeOptions(max_k=7, max_batch=3, inline=True, ui=False, reason_verb="watched").serving_config()
    assert (cfg.max_k, cfg.max_batch, cfg.inline, cfg.ui, cfg.reason_verb) == (7, 3, True, False, "watched")


def test_the_options_named_otherwise_reach_their_fields(tmp_path: Path) -> None:
    root = tmp_path / "models"
    root.mkdir()
    cfg = ServeOptions(
        timeout_body=3.0,
        retry_after=2,
        load_timeout=9.0,
        event_verb=["buy=purchased"],
        models_root=[root],
        cors_origin=["https://shop.example"],
        api_key=["k" * 16],
        admin_key=["a" * 16],
    ).serving_config()
    assert (cfg.body_timeout_s, cfg.retry_after_s, cfg.load_timeout_s) == (3.0, 2, 9.0)
    assert cfg.event_verbs["buy"] == "purchased"
    assert cfg.models_roots == (root.resolve(),)
    assert cfg.cors_origins == ("https://shop.example",)
    assert cfg.api_keys == frozenset({"k" * 16}) and cfg.admin_keys == frozenset({"a" * 16})
    assert cfg.reload_on_sighup and cfg.store is None


def test_a_bad_setting_is_refused_before_any_store_is_opened(tmp_path: Path) -> None:
    store = tmp_path / "events.sqlite"
    with pytest.raises(ValueError, match="must be positive"):
        ServeOptions(max_k=0, store=str(store)).serving_config()
    assert not store.exists()


def test_serve_without_options_serves_the_configs_defaults(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("ATTNREC_API_KEYS", "ATTNREC_ADMIN_KEYS", "ATTNREC_MANIFEST_KEY"):
        monkeypatch.delenv(name, raising=False)
    given, default = ServeOptions().serving_config(), ServingConfig()
    differing = [f.name for f in fields(ServingConfig) if getattr(given, f.name) != getattr(default, f.name)]
    assert differing == ["reload_on_sighup"]  # attnrec serve reloads on SIGHUP; the library's app need not
