"""Fixtures of the console tests: a headless Chromium (Playwright), tabs that record console errors and
requests leaving the app, a seeded project with a model lineage and a finished PPO job, and the demo
assets' files uploaded. Each is made once for the folder's tests, as when they were one module."""

from __future__ import annotations

import json
import os
import secrets
import shutil
import subprocess
import sys
import time
from datetime import timedelta
from pathlib import Path

import pytest

from tests.api.console.console_data import (
    LONG_TEACHER,
    ROOT,
    VIEWPORTS,
    _checkpoint,
    _events,
    _file,
    _job,
    _manifest,
    _method_metrics,
    _metrics,
    _model,
    _project,
    _samples,
)

PPO_CONFIG = {"algorithm": {"adv_estimator": "gae", "kl_ctrl": {"kl_coef": 0.001}}, "actor": {"optim": {"lr": 1e-6}},
              "data": {"train_batch_size": 8}, "rollout": {"n": 1, "temperature": 1.0, "stop": []}}
ARTIFACTS = ROOT / "tests" / "artifacts" / "console"
BROWSERS = ("chromium", "chromium-browser", "google-chrome-stable", "google-chrome")


def _find_browser() -> str | None:
    for name in (os.environ.get("KEEL_CHROMIUM"), *BROWSERS):
        if name and shutil.which(name):
            return shutil.which(name)
    return None


@pytest.fixture(scope="module")
def browser():
    # Module scope, not package: this folder has no __init__.py, so pytest would keep a "package" fixture
    # for the whole session, and Playwright's sync API holds an event loop on the main thread while it
    # runs, which breaks every later test that calls asyncio.run (or Playwright) in the same session.
    path = _find_browser()
    if path is None:
        proc = subprocess.run(["bash", str(ROOT / "scripts/test-browser.sh")], check=False, capture_output=True,
                              text=True, timeout=900)
        path = _find_browser()
        if path is None:
            pytest.fail(f"headless Chromium is required (scripts/test-browser.sh exited {proc.returncode}):\n"
                        f"{proc.stdout}{proc.stderr}")
    from playwright.sync_api import sync_playwright

    with sync_playwright() as p:
        chromium = p.chromium.launch(executable_path=path, headless=True,
                                     args=["--no-sandbox", "--disable-dev-shm-usage", "--disable-gpu"])
        yield chromium
        chromium.close()


class Tab:
    """A page with its console errors, uncaught exceptions and any request to another origin recorded."""

    def __init__(self, browser, base: str, key: str | None, viewport: dict[str, int]):
        self.base = base
        self.context = browser.new_context(viewport=viewport, accept_downloads=True)
        if key:
            self.context.add_init_script(f"sessionStorage.setItem('keel.apiKey', {json.dumps(key)})")
        self.errors: list[str] = []
        self.outside: list[str] = []
        self.context.route("**/*", self._route)
        self.page = self.context.new_page()
        self.page.on("console", lambda m: self.errors.append(m.text) if m.type == "error" else None)
        self.page.on("pageerror", lambda e: self.errors.append(f"uncaught: {e}"))

    def _route(self, route):
        if route.request.url.startswith(self.base + "/"):
            route.continue_()
        else:  # the console must be self-contained: no CDN, no fonts, nothing outside the app
            self.outside.append(route.request.url)
            route.abort()

    def goto(self, fragment: str) -> None:
        self.page.goto(f"{self.base}/#{fragment}")

    def check(self, name: str, viewport: str, *, allow: tuple[str, ...] = ()) -> Path:
        """Screenshot, then assert no overflow, no console error (but `allow`ed ones) and no outside request."""
        self.page.wait_for_load_state("networkidle")
        ARTIFACTS.mkdir(parents=True, exist_ok=True)
        (ARTIFACTS.parent / ".gitignore").write_text("*\n")  # test output, never committed
        shot = ARTIFACTS / f"{name}-{viewport}.png"
        self.page.screenshot(path=shot, full_page=True)
        print(f"screenshot: {shot}")
        widths = self.page.evaluate("[document.scrollingElement.scrollWidth, innerWidth]")
        if widths[0] > widths[1]:
            wide = self.page.evaluate("[...document.querySelectorAll('body *')].filter(e => "
                                      "e.getBoundingClientRect().left + e.scrollWidth > innerWidth + 1)"
                                      ".slice(-3).map(e => e.tagName + '.' + e.className)")
            pytest.fail(f"{name} overflows horizontally at {viewport}: {widths}; widest: {wide}")
        errors = [e for e in self.errors if not any(a in e for a in allow)]
        assert errors == [], f"console errors on {name} ({viewport}): {errors}"
        assert self.outside == [], f"requests outside the app: {self.outside}"
        return shot

    def close(self) -> None:
        self.context.close()


@pytest.fixture
def tabs(browser, live_server):
    opened: list[Tab] = []

    def open_tab(key: str | None, viewport: str = "desktop") -> Tab:
        tab = Tab(browser, live_server, key, VIEWPORTS[viewport])
        opened.append(tab)
        return tab

    yield open_tab
    for tab in opened:
        tab.close()


@pytest.fixture(scope="package")
def seeded(database):
    """A project holding one file, SFT -> RM -> distilled RM -> PPO models, and a finished PPO job
    whose events include checkpoints and guardrail warnings."""
    from core.models import utcnow

    project_id, key = _project(f"console-{secrets.token_hex(4)}")
    file_id = _file(project_id)
    done = {"status": "succeeded", "started_at": utcnow() - timedelta(minutes=3), "finished_at": utcnow()}
    sft = _job(project_id, file_id, "/models/base", {"type": "sft"}, manifest=_manifest(file_id, "sft", {}), **done)
    sft_model = _model(project_id, sft, "policy", "/models/base")
    rm = _job(project_id, file_id, sft_model, {"type": "reward_model"}, manifest=_manifest(file_id, "reward_model", {}),
              **done)
    rm_model = _model(project_id, rm, "reward_model", sft_model)
    distill = _job(project_id, file_id, "/models/small", {"type": "rm_distill", "teacher": rm_model},
                   manifest=_manifest(file_id, "rm_distill", {}), **done)
    distill_model = _model(project_id, distill, "reward_model", "/models/small", fmt="lora")
    total = 30
    ppo = _job(project_id, file_id, sft_model, {"type": "ppo", "reward": {"model": distill_model}},
               progress={"step": total, "total_steps": total}, manifest=_manifest(file_id, "ppo", PPO_CONFIG), **done)
    ppo_model = _model(project_id, ppo, "policy", sft_model)
    events = [("job.status", {"status": "running"}), ("job.placement", {"workers": [  # colocated: one process
        {"role": r, "rank": 0, "node_id": "n1", "node_ip": "10.0.0.1", "pid": 42} for r in ("actor", "critic", "ref", "reward")]})]
    for step in range(1, total + 1):
        events.append(("job.metrics", _metrics(step, total)))
        events.append(("job.samples", _samples(step)))
        if step == 12:
            events.append(("job.warning", {"code": "kl_high", "message": "step 12: KL 0.31 > 0.2", "data": {"step": 12}}))
        if step == 18:
            events.append(("job.warning", {"code": "rollback", "message": "rolled back to step 10", "data": {"step": 18}}))
        if step % 10 == 0:
            ckpt = _checkpoint(project_id, ppo, step)
            events.append(("job.checkpoint", {"checkpoint_id": ckpt, "step": step, "metrics": {}}))
    events += [("job.status", {"status": "succeeded"}), ("job.done", {"status": "succeeded"})]
    _events(ppo, events)
    return {"key": key, "file": file_id, "ppo_job": ppo, "chain": [sft_model, rm_model, distill_model, ppo_model]}


@pytest.fixture(scope="package")
def method_jobs(database):
    """A project with one finished job per supervised method (SFT, DPO, reward model, distilled RM) whose
    events carry that method's metrics, training and validation: method -> (key, job id)."""
    from core.models import utcnow

    project_id, key = _project(f"console-methods-{secrets.token_hex(4)}")
    file_id = _file(project_id)
    jobs = {}
    for method in ("sft", "dpo", "reward_model", "rm_distill"):
        spec = {"type": method, **({"teacher": LONG_TEACHER} if method == "rm_distill" else {})}
        job = _job(project_id, file_id, "/models/base", spec, status="succeeded", started_at=utcnow() - timedelta(seconds=75),
                   finished_at=utcnow(), progress={"step": 12, "total_steps": 12},
                   manifest=_manifest(file_id, method, {"optim": {"lr": 1e-4}}))
        _events(job, [("job.status", {"status": "running"})]
                + [("job.metrics", _method_metrics(method, step)) for step in range(1, 13)]
                + [("job.status", {"status": "succeeded"}), ("job.done", {"status": "succeeded"})])
        jobs[method] = job
    return key, jobs


@pytest.fixture(scope="package")
def demo_files(database):
    """A project with the demo assets' training files uploaded: (key, assets, purpose -> file id)."""
    from fastapi.testclient import TestClient

    from api.main import create_app
    from core.config import settings
    from engine.demo import build_demo_assets

    assets = build_demo_assets(Path(settings.model_roots[0]) / "console-form-demo")
    _, key = _project(f"console-form-{secrets.token_hex(3)}")
    files = {}
    with TestClient(create_app()) as c:
        for purpose, name in (("sft", "sft_train"), ("preference", "preference_train"), ("prompts", "prompts_train")):
            with open(assets[name], "rb") as f:
                r = c.post("/v1/files", headers={"Authorization": f"Bearer {key}"}, data={"purpose": purpose},
                           files={"file": (f"{name}.parquet", f)})
            assert r.status_code in (200, 201), r.text
            files[purpose] = r.json()["id"]
    return key, assets, files


_SERVE = """
import json, sys
import ray
from engine.serving.deployment import start
ray.init(address=sys.argv[1], log_to_driver=False)
print(start(port=int(sys.argv[2]), options=json.loads(sys.argv[3])), flush=True)
"""
_SERVE_STOP = """
import sys
import ray
from ray import serve
ray.init(address=sys.argv[1], log_to_driver=False)
serve.shutdown()
"""


def _serving(url: str) -> bool:
    import httpx

    try:
        return httpx.get(f"{url}/-/routes", timeout=2, trust_env=False).status_code == 200
    except httpx.HTTPError:
        return False


@pytest.fixture
def serve_url(ray_cluster, keel_home):
    """Ray Serve's ingress on the session's Ray (as `keel up` starts it), a free loopback port, and the
    API pointed at it: the playground's OpenAI route answers through it. Half a CPU, one replica. Serve
    has one proxy per Ray cluster: one already serving is reused, and the one started here is shut down
    after the test, so tests/inference (later in the same session) can start its own on the same Ray."""
    from bench.common import free_ports
    from core.config import settings

    if _serving(settings.SERVE_URL):
        yield settings.SERVE_URL
        return
    port = free_ports(1)[0]
    env = {**os.environ, "RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER": "0", "RAY_USAGE_STATS_ENABLED": "0"}
    options = {"replica_cpus": 0.5, "max_replicas": 1, "idle_s": 600.0}
    log = keel_home / "console-serve.log"
    with open(log, "wb") as out:
        subprocess.run([sys.executable, "-c", _SERVE, ray_cluster, str(port), json.dumps(options)], cwd=ROOT, env=env,
                       stdout=out, stderr=subprocess.STDOUT, timeout=300, check=True)
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 120
    while not _serving(url):  # routed once the proxy lists the ingress
        if time.monotonic() > deadline:
            pytest.fail(f"Serve did not come up on {url}: {log.read_text()[-2000:]}")
        time.sleep(0.5)
    before, settings.SERVE_URL = settings.SERVE_URL, url
    yield url
    settings.SERVE_URL = before
    subprocess.run([sys.executable, "-c", _SERVE_STOP, ray_cluster], cwd=ROOT, env=env, capture_output=True, timeout=120,
                   check=False)
