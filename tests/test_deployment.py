"""docker-compose.yml and the Dockerfiles agree with the settings (Docker cannot run here, so the
files are parsed and cross-checked)."""

from __future__ import annotations

import re
from pathlib import Path

import yaml

from core.config import Settings

ROOT = Path(__file__).resolve().parent.parent
COMPOSE = yaml.safe_load((ROOT / "docker-compose.yml").read_text())
SERVICES = COMPOSE["services"]


def test_compose_has_every_service_with_health_checks():
    assert set(SERVICES) == {"postgres", "redis", "migrate", "api", "worker", "ray-head", "ray-worker"}
    for name in ("postgres", "redis", "api", "ray-head"):
        assert "healthcheck" in SERVICES[name], name
    assert SERVICES["migrate"]["command"] == ["keel", "migrate"]
    assert SERVICES["migrate"]["restart"] == "no"


def test_images_and_dockerfiles():
    assert SERVICES["api"]["image"] == "keel-api" and SERVICES["migrate"]["build"]["dockerfile"] == "docker/api.Dockerfile"
    assert SERVICES["worker"]["build"]["dockerfile"] == "docker/worker.Dockerfile"
    for name in ("worker", "ray-head", "ray-worker"):
        assert SERVICES[name]["image"] == "keel-worker", name
    api_docker = (ROOT / "docker/api.Dockerfile").read_text()
    assert not re.search(r"\b(torch|ray|transformers|peft)\b", api_docker.split("RUN", 1)[1].split("EXPOSE")[0])
    assert "torch" in (ROOT / "docker/worker.Dockerfile").read_text()


def test_dependencies_order_the_start():
    assert SERVICES["migrate"]["depends_on"]["postgres"]["condition"] == "service_healthy"
    for name in ("api", "worker"):
        assert SERVICES[name]["depends_on"]["migrate"]["condition"] == "service_completed_successfully"
    assert SERVICES["worker"]["depends_on"]["ray-head"]["condition"] == "service_healthy"
    assert SERVICES["ray-worker"]["depends_on"]["ray-head"]["condition"] == "service_healthy"


def test_environment_names_real_settings_and_points_at_the_services():
    env = SERVICES["api"]["environment"]
    known = set(Settings.model_fields)
    for key in env:
        assert key.startswith("KEEL_") and key.removeprefix("KEEL_") in known, key
    for name in ("migrate", "api", "worker"):
        assert SERVICES[name]["environment"] == env, name
    assert "@postgres:5432" in env["KEEL_DATABASE_URL"]
    assert env["KEEL_BROKER_URL"].startswith("redis://redis:6379")
    assert env["KEEL_REDIS_URL"].startswith("redis://redis:6379")
    assert env["KEEL_RAY_ADDRESS"] == "ray-head:6379"
    assert env["KEEL_ENV"] == "production" and "KEEL_SECRET_KEY" in env
