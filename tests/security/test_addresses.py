"""Issue 27, items 5 and 6: every URL a tenant can set goes through one public-address check
(`core.addresses`), at creation (API) and at connect time (workers)."""

from __future__ import annotations

import pytest

from core import addresses
from core.config import settings


@pytest.fixture
def public_only(monkeypatch):
    monkeypatch.setattr(settings, "WEBHOOK_ALLOW_PRIVATE", False)


@pytest.mark.parametrize("url", [
    "http://[64:ff9b::a9fe:a9fe]/",  # NAT64 of 169.254.169.254 (cloud metadata)
    "http://[64:ff9b:1::a00:1]/",  # local-use NAT64
    "http://[::127.0.0.1]/",  # IPv4-compatible
    "http://[::ffff:10.0.0.1]/",  # IPv4-mapped
    "http://[2002:7f00:1::]/",  # 6to4 of 127.0.0.1
    "http://[2001:0:4136:e378:8000:63bf:3fff:fdd2]/",  # Teredo
    "http://100.64.0.1/", "http://240.0.0.1/", "http://0.0.0.0/", "http://[::]/",
    "http://8.8.8.8:0/",  # port 0
])
def test_non_public_forms_are_refused(public_only, url):
    with pytest.raises(addresses.UnsafeUrl):
        addresses.check_url(url)


@pytest.mark.parametrize("url", ["http://8.8.8.8:8080/x", "https://[2606:4700::1111]/",
                                 "http://[64:ff9b::808:808]/", "http://[::ffff:8.8.8.8]/"])
def test_public_addresses_pass(public_only, url):
    assert addresses.check_url(url)[1]


def test_port_zero_is_refused_even_where_private_addresses_are_allowed(monkeypatch):
    monkeypatch.setattr(settings, "WEBHOOK_ALLOW_PRIVATE", True)
    assert addresses.check_url("http://127.0.0.1:8080/")[1] == "127.0.0.1"
    with pytest.raises(addresses.UnsafeUrl, match="port"):
        addresses.check_url("http://127.0.0.1:0/")


def test_wandb_base_url_secret_is_checked_at_creation(public_only, client, database):
    import secrets

    from core.db import session_scope
    from core.security import create_api_key, get_or_create_project

    with session_scope() as db:
        project, _ = get_or_create_project(db, f"addr-{secrets.token_hex(4)}")
        auth = {"Authorization": f"Bearer {create_api_key(db, project, admin=True)}"}
    r = client.put("/v1/projects/current/secrets/WANDB_BASE_URL", json={"value": "http://127.0.0.1:9/"},
                   headers=auth)
    assert r.status_code == 422, r.text
    assert r.json()["param"] == "value" and r.json()["code"] == "invalid_url"
    r = client.put("/v1/projects/current/secrets/WANDB_BASE_URL", json={"value": "https://8.8.8.8"}, headers=auth)
    assert r.status_code == 200, r.text
    # Other secrets are opaque.
    r = client.put("/v1/projects/current/secrets/WANDB_API_KEY", json={"value": "http://127.0.0.1:9/"}, headers=auth)
    assert r.status_code == 200, r.text


def test_wandb_base_url_is_checked_at_connect_time(public_only, tmp_path, monkeypatch):
    """A secret stored before the check (or a name that now resolves elsewhere) never reaches W&B."""
    from workers.integrations import WandbSink

    monkeypatch.setenv("WANDB_MODE", "offline")  # nothing would be sent anyway: the check alone refuses
    with pytest.raises(ValueError, match="non-public"):
        WandbSink("job-x", {"project": "p"}, {"WANDB_API_KEY": "k" * 40, "WANDB_BASE_URL": "http://127.0.0.1:9"},
                  tmp_path)


def test_mlflow_tracking_uri_is_checked_at_connect_time(public_only, tmp_path, monkeypatch):
    from workers.integrations import MLflowSink

    monkeypatch.setattr(settings, "MLFLOW_TRACKING_URI_PREFIXES", [])
    with pytest.raises(ValueError, match="non-public"):
        MLflowSink("job-x", {"tracking_uri": "http://127.0.0.1:9", "experiment": "e"}, {}, tmp_path, {})
