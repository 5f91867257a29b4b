"""Fixtures of the inference tests: the official `openai` client against a live Keel (API, Celery worker,
Ray on loopback) whose completions Ray Serve answers. One stack per test session: Serve is started once
on the session's Ray and every test shares it."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest

from bench.common import free_ports

openai = pytest.importorskip("openai")

ROOT = Path(__file__).resolve().parents[2]
SERVE_OPTIONS = {"replica_cpus": 0.5, "max_replicas": 1, "idle_s": 600.0}
"""Half a CPU per replica: fine-tuning jobs share the session's 2-CPU Ray with it."""

_START = """
import json, sys
import ray
from engine.serving.deployment import start
ray.init(address=sys.argv[1], log_to_driver=False)
print(start(port=int(sys.argv[2]), options=json.loads(sys.argv[3])), flush=True)
"""


@pytest.fixture(scope="session")
def demo_assets(database) -> dict[str, str]:
    """The demo model and datasets under the deployment's model root (every project may use it)."""
    from core.config import settings
    from engine.demo import build_demo_assets

    return build_demo_assets(Path(settings.model_roots[0]) / "inference-demo")


@pytest.fixture(scope="session")
def serve_url(ray_cluster, keel_home):
    """Serve's ingress on a free loopback port of the session's Ray (`engine.serving.deployment.start`, as
    `keel up` runs it), and the API pointed at it (`KEEL_SERVE_URL`)."""
    from core.config import settings

    port = free_ports(1)[0]
    env = {**os.environ, "RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER": "0", "RAY_USAGE_STATS_ENABLED": "0"}
    log = keel_home / "serve-start.log"
    with open(log, "wb") as out:
        subprocess.run([sys.executable, "-c", _START, ray_cluster, str(port), json.dumps(SERVE_OPTIONS)], cwd=ROOT,
                       env=env, stdout=out, stderr=subprocess.STDOUT, timeout=300, check=True)
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 120
    while True:  # the proxy answers (any status) once the ingress is routed
        try:
            if httpx.get(f"{url}/-/routes", timeout=2, trust_env=False).status_code == 200:
                break
        except httpx.HTTPError:
            pass
        if time.monotonic() > deadline:
            raise RuntimeError(f"Serve did not come up on {url}: {log.read_text()[-2000:]}")
        time.sleep(0.5)
    before = settings.SERVE_URL
    settings.SERVE_URL = url
    yield url
    settings.SERVE_URL = before


@pytest.fixture
def serve_down(monkeypatch):
    """The API pointed at a loopback port nothing listens on."""
    from core.config import settings

    monkeypatch.setattr(settings, "SERVE_URL", f"http://127.0.0.1:{free_ports(1)[0]}")


@pytest.fixture
def oai(live_server, project_key):
    return openai.OpenAI(base_url=f"{live_server}/v1", api_key=project_key[1], max_retries=0, timeout=300)


@pytest.fixture
def other_oai(live_server, other_project_key):
    return openai.OpenAI(base_url=f"{live_server}/v1", api_key=other_project_key[1], max_retries=0, timeout=60)
