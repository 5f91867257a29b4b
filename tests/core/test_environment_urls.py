"""core.environments: a job's remote environment URL passes the public-address check, whatever
KEEL_WEBHOOK_ALLOW_PRIVATE says, unless its host is in KEEL_ENV_ALLOWED_HOSTS."""

from __future__ import annotations

import pytest

from core.addresses import UnsafeUrl
from core.config import settings
from core.environments import allowed_hosts, check_environment_url, environment_url_problem


@pytest.fixture(autouse=True)
def private_webhooks_allowed(monkeypatch):
    monkeypatch.setattr(settings, "WEBHOOK_ALLOW_PRIVATE", True)  # must not lift the environments' rule
    monkeypatch.setattr(settings, "ENV_ALLOWED_HOSTS", [])


@pytest.mark.parametrize("url", ["http://127.0.0.1:8000", "http://10.1.2.3/env", "http://[::1]:80",
                                 "http://[::ffff:192.168.0.1]", "http://169.254.169.254/latest"])
def test_a_private_address_is_refused(url):
    with pytest.raises(UnsafeUrl, match="KEEL_ENV_ALLOWED_HOSTS"):
        check_environment_url(url)
    assert environment_url_problem({"type": "openenv", "url": url})[0] == "url"


def test_an_allow_listed_host_passes_and_others_stay_refused(monkeypatch):
    monkeypatch.setattr(settings, "ENV_ALLOWED_HOSTS", [" 127.0.0.1", "[::1]", "Envs.Internal"])
    assert allowed_hosts() == ("127.0.0.1", "::1", "envs.internal")
    for url in ("http://127.0.0.1:8000", "https://[::1]:9/x", "http://ENVS.internal:8000"):
        check_environment_url(url)
        assert environment_url_problem({"type": "openenv", "url": url}) is None
    with pytest.raises(UnsafeUrl):
        check_environment_url("http://10.0.0.1:8000")


@pytest.mark.parametrize(("url", "reason"), [
    ("ws://8.8.8.8/ws", "absolute http"), ("8.8.8.8:80", "absolute http"),
    ("http://user:pw@8.8.8.8", "credentials"), ("http://8.8.8.8:0", "port"), ("http://8.8.8.8:99999", "port"),
])
def test_a_malformed_url_is_refused_even_when_allow_listed(monkeypatch, url, reason):
    monkeypatch.setattr(settings, "ENV_ALLOWED_HOSTS", ["8.8.8.8"])
    with pytest.raises(UnsafeUrl, match=reason):
        check_environment_url(url)


def test_a_public_address_passes():
    check_environment_url("http://8.8.8.8:8000/envs/echo")


def test_only_openenv_specs_are_checked():
    assert environment_url_problem({"type": "echo_token"}) is None
    assert environment_url_problem(None) is None
    assert environment_url_problem({"type": "openenv"}) == ("url", "must be an absolute http:// or https:// URL")
