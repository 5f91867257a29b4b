"""What the deployment tests read: the compose file, the Kubernetes manifests, pyproject and the
settings, parsed once; and the Dockerfile and `ray start` argument readers they share."""

from __future__ import annotations

import re
import tomllib
from pathlib import Path

import yaml

from core.config import Settings

ROOT = Path(__file__).resolve().parent.parent
COMPOSE = yaml.safe_load((ROOT / "docker-compose.yml").read_text())
SERVICES = COMPOSE["services"]
K8S = [doc for path in sorted((ROOT / "deploy/k8s").glob("*.yaml"))
       for doc in yaml.safe_load_all(path.read_text()) if doc]
PYPROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text())
VERSION = PYPROJECT["project"]["version"]
SETTINGS = set(Settings.model_fields)
RAY_ENV = {"RAY_AUTH_MODE", "RAY_AUTH_TOKEN", "RAY_USAGE_STATS_ENABLED"}
"""The non-KEEL variables a Keel container may set: Ray's own."""
ENTRYPOINT = "/app/docker/worker-entrypoint.sh"


def instructions(dockerfile: str) -> list[tuple[str, str]]:
    text = re.sub(r"\\\n", " ", (ROOT / dockerfile).read_text())
    lines = [line.strip() for line in text.splitlines()]
    return [(line.split(None, 1)[0].upper(), line.split(None, 1)[1]) for line in lines
            if line and not line.startswith("#")]


def option(args: list[str], name: str) -> str | None:
    for i, arg in enumerate(args):
        if arg.startswith(f"--{name}="):
            return arg.split("=", 1)[1]
        if arg == f"--{name}":
            return args[i + 1]
    return None
