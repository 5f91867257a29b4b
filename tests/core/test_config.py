"""Deployment settings: embedded defaults, env parsing, the production secret guard."""

import pytest
from pydantic import ValidationError

from core.config import Settings


def test_embedded_defaults_live_under_home(tmp_path, monkeypatch):
    for key in ("KEEL_DATABASE_URL", "KEEL_BROKER_URL", "KEEL_STORAGE_URL"):
        monkeypatch.delenv(key, raising=False)
    s = Settings(HOME=tmp_path)
    assert s.database_url == f"sqlite:///{tmp_path / 'keel.db'}"
    assert s.broker_url == f"sqla+sqlite:///{tmp_path / 'broker.db'}"
    assert s.storage_url == str(tmp_path / "artifacts")


def test_model_roots_accept_commas_and_json(monkeypatch, tmp_path):
    monkeypatch.setenv("KEEL_MODEL_ROOTS", f"{tmp_path}/a,{tmp_path}/b")
    assert Settings().model_roots == [str(tmp_path / "a"), str(tmp_path / "b")]
    monkeypatch.setenv("KEEL_MODEL_ROOTS", f'["{tmp_path}/c"]')
    assert Settings().model_roots == [str(tmp_path / "c")]


def test_production_refuses_placeholder_secret(monkeypatch):
    monkeypatch.delenv("KEEL_SECRET_KEY", raising=False)
    with pytest.raises(ValidationError, match="KEEL_SECRET_KEY"):
        Settings(ENV="production")
    assert Settings(ENV="production", SECRET_KEY="s3cr3t-" + "x" * 20).ENV == "production"
