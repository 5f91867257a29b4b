"""The web console at `/`, in a real headless Chromium driven by Playwright (Debian's `chromium`, found
like tests/api/test_docs_browser.py does; nothing is downloaded). Every page renders at a desktop and a
phone viewport with no horizontal overflow, no console error and no request leaving the app; the job
page's charts grow while metrics stream; the job form shows a problem's `param` next to its field.
Screenshots land in tests/artifacts/console/ (ignored by git)."""

from __future__ import annotations

import hashlib
import json
import os
import secrets
import shutil
import subprocess
import tarfile
from datetime import timedelta
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
ARTIFACTS = ROOT / "tests" / "artifacts" / "console"
BROWSERS = ("chromium", "chromium-browser", "google-chrome-stable", "google-chrome")
VIEWPORTS = {"desktop": {"width": 1280, "height": 800}, "phone": {"width": 390, "height": 844}}
SFT_ROWS = [{"prompt": f"What is {i} + {i}?", "response": f"{2 * i}"} for i in range(12)]


# --- the browser ---------------------------------------------------------------------------------

def _find_browser() -> str | None:
    for name in (os.environ.get("KEEL_CHROMIUM"), *BROWSERS):
        if name and shutil.which(name):
            return shutil.which(name)
    return None


@pytest.fixture(scope="module")
def browser():
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


# --- data: a project with a file, a four-model lineage and a finished job with its events ------------

def _project(name: str) -> tuple[str, str]:
    from core.db import session_scope
    from core.security import create_api_key, get_or_create_project

    with session_scope() as db:
        project, _ = get_or_create_project(db, name)
        return project.id, create_api_key(db, project)


def _file(project_id: str) -> str:
    from core.db import session_scope
    from core.ids import new_id
    from core.models import File
    from core.storage import get_storage

    file_id = new_id("file")
    data = "".join(json.dumps(r) + "\n" for r in SFT_ROWS).encode()
    with get_storage().writer(f"files/{file_id}") as f:
        f.write(data)
    with session_scope() as db:
        db.add(File(id=file_id, project_id=project_id, purpose="sft", filename="arith.jsonl", bytes=len(data),
                    sha256=hashlib.sha256(data + file_id.encode()).hexdigest(), format="jsonl", rows=len(SFT_ROWS),
                    columns=["prompt", "response"], storage_key=f"files/{file_id}"))
    return file_id


def _job(project_id: str, file_id: str, model: str, method: dict, **columns) -> str:
    from core.db import session_scope
    from core.ids import new_id
    from core.models import Job

    spec = {"model": model, "training_file": file_id, "validation_file": None,
            "method": {"hyperparameters": {}, **method}, "seed": 0, "suffix": None, "metadata": {},
            "resources": {"num_workers": 1}, "from_checkpoint": None}
    job_id = new_id("job")
    with session_scope() as db:
        db.add(Job(id=job_id, project_id=project_id, method=method["type"], spec=spec, model=model,
                   training_file_id=file_id, **columns))
    return job_id


def _model(project_id: str, job_id: str, kind: str, base: str, fmt: str = "hf") -> str:
    from sqlalchemy import update

    from core.db import session_scope
    from core.ids import new_id
    from core.models import Job, Model

    model_id = new_id("model")
    with session_scope() as db:
        db.add(Model(id=model_id, project_id=project_id, job_id=job_id, name=f"{kind}-{model_id[-6:]}", kind=kind,
                     format=fmt, base_model=base, path=f"/nonexistent/{model_id}"))
        db.execute(update(Job).where(Job.id == job_id).values(output_model_id=model_id))
    return model_id


def _checkpoint(project_id: str, job_id: str, step: int) -> str:
    """A checkpoint row (no files: the e2e test downloads a real one)."""
    from core.db import session_scope
    from core.ids import new_id
    from core.models import Checkpoint

    ckpt_id = new_id("ckpt")
    with session_scope() as db:
        db.add(Checkpoint(id=ckpt_id, job_id=job_id, project_id=project_id, step=step, path=f"/nonexistent/{ckpt_id}",
                          bytes=1234))
    return ckpt_id


def _events(job_id: str, events: list[tuple[str, dict]]) -> None:
    from core import events as event_log
    from core.db import session_scope

    with session_scope() as db:
        for type_, data in events:
            event_log.append_event(db, job_id, type_, data)


def _metrics(step: int, total: int) -> dict:
    x = step / total
    return {"step": step, "total_steps": total, "values": {
        "critic/score/mean": 0.2 + 0.6 * x, "actor/ppo_kl": 0.01 * (1 + x), "actor/entropy": 2.0 - x,
        "actor/pg_loss": 0.5 * (1 - x), "critic/vf_loss": 1.0 - 0.8 * x, "response_length/mean": 8 + 4 * x,
        "timing_s/step": 1.2, "perf/throughput": 300 + 10 * step, **({"val/reward/mean": 0.3 + 0.5 * x} if step % 5 == 0 else {})}}


@pytest.fixture(scope="module")
def seeded(database):
    """A project holding one file, SFT -> RM -> distilled RM -> PPO models, and a finished PPO job
    whose events include checkpoints and guardrail warnings."""
    from core.models import utcnow

    project_id, key = _project(f"console-{secrets.token_hex(4)}")
    file_id = _file(project_id)
    done = {"status": "succeeded", "started_at": utcnow() - timedelta(minutes=3), "finished_at": utcnow()}
    sft = _job(project_id, file_id, "/models/base", {"type": "sft"}, **done)
    sft_model = _model(project_id, sft, "policy", "/models/base")
    rm = _job(project_id, file_id, sft_model, {"type": "reward_model"}, **done)
    rm_model = _model(project_id, rm, "reward_model", sft_model)
    distill = _job(project_id, file_id, "/models/small", {"type": "rm_distill", "teacher": rm_model}, **done)
    distill_model = _model(project_id, distill, "reward_model", "/models/small", fmt="lora")
    total = 30
    ppo = _job(project_id, file_id, sft_model, {"type": "ppo", "reward": {"model": distill_model}},
               progress={"step": total, "total_steps": total}, **done)
    ppo_model = _model(project_id, ppo, "policy", sft_model)
    events = [("job.status", {"status": "running"}), ("job.placement", {"workers": [  # colocated: one process
        {"role": r, "rank": 0, "node_id": "n1", "node_ip": "10.0.0.1", "pid": 42} for r in ("actor", "critic", "ref", "reward")]})]
    for step in range(1, total + 1):
        events.append(("job.metrics", _metrics(step, total)))
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


# --- tests -----------------------------------------------------------------------------------------

def test_console_is_served_offline_and_kept_out_of_the_schema(client):
    page = client.get("/")
    assert page.status_code == 200 and page.headers["content-type"].startswith("text/html")
    assert "script-src 'self'" in page.headers["content-security-policy"]
    for asset in ("app.js", "api.js", "charts.js", "app.css", "pages/job.js", "vendor/uplot/uPlot.iife.min.js",
                  "vendor/uplot/uPlot.min.css"):
        r = client.get(f"/console/{asset}")
        assert r.status_code == 200, asset
        assert f"/console/{asset}" in page.text or asset not in ("app.js", "app.css", "vendor/uplot/uPlot.iife.min.js")
    assert (ROOT / "api/console/static/vendor/uplot/LICENSE").read_text().startswith("The MIT License")
    for bad in ("/console/nope.js", "/console/../routes/console.py", "/console/vendor/uplot/LICENSE"):
        r = client.get(bad)
        assert r.status_code == 404 and r.headers["content-type"] == "application/problem+json", bad
    paths = client.get("/openapi.json").json()["paths"]
    assert "/" not in paths and not [p for p in paths if p.startswith("/console")]


def test_key_gate(tabs, seeded):
    tab = tabs(None)
    tab.goto("/jobs")
    tab.page.fill("#api-key", "keel_wrong")
    tab.page.click("button[type=submit]")
    tab.page.wait_for_selector(".key-form .error")
    assert "401" in tab.page.inner_text(".key-form") or "unauthorized" in tab.page.inner_text(".key-form")
    tab.page.fill("#api-key", seeded["key"])
    tab.page.click("button[type=submit]")
    tab.page.wait_for_selector(f"#jobs-list a[href='#/jobs/{seeded['ppo_job']}']")
    assert tab.page.evaluate("sessionStorage.getItem('keel.apiKey')") == seeded["key"]
    tab.check("key-gate", "desktop", allow=("status of 401",))


@pytest.mark.parametrize("viewport", VIEWPORTS)
def test_every_page_renders(tabs, seeded, viewport, tmp_path):
    tab = tabs(seeded["key"], viewport)
    page = tab.page

    tab.goto("/jobs")
    page.wait_for_selector(f"#jobs-list a[href='#/jobs/{seeded['ppo_job']}']")
    assert page.locator("#jobs-list tbody tr").count() == 4
    page.select_option("select[data-filter=method]", "ppo")
    page.wait_for_function("() => document.querySelectorAll('#jobs-list tbody tr').length === 1")
    tab.check("jobs", viewport)

    tab.goto(f"/jobs/{seeded['ppo_job']}")
    page.wait_for_selector(".stream-state[data-state=done]")
    charts = page.locator("#charts")
    assert int(charts.get_attribute("data-points")) == 30 * 8 + 6
    groups = page.eval_on_selector_all(".chart-group", "els => els.map(e => e.dataset.group)")
    assert groups[:4] == ["critic", "actor", "response_length", "val"] and {"timing_s", "perf"} <= set(groups)
    assert page.locator("#checkpoints tbody tr").count() == 3
    assert page.locator("#checkpoints button[data-checkpoint]").count() == 3  # downloads: the e2e test
    assert page.locator("#events li[data-type='job.warning']").count() == 2
    assert "placed actor, critic, ref, reward: 1 process on 1 node" in page.inner_text("#events li[data-type='job.placement']")
    assert page.locator(".chart[data-metric='actor/ppo_kl'] canvas").count() == 1
    tab.check("job", viewport)
    # Drag-zoom into steps 10-20 of one chart: its x scale narrows; a double-click restores it.
    chart = page.locator(".chart[data-metric='critic/score/mean'] .u-over")
    box = chart.bounding_box()
    page.mouse.move(box["x"] + box["width"] * 0.3, box["y"] + box["height"] / 2)
    page.mouse.down()
    page.mouse.move(box["x"] + box["width"] * 0.6, box["y"] + box["height"] / 2, steps=5)
    page.mouse.up()
    zoomed = page.evaluate("getComputedStyle(document.querySelector(\".chart[data-metric='critic/score/mean'] .u-select\")).width")
    assert zoomed == "0px"  # the selection is consumed by the zoom
    assert page.get_attribute(".chart[data-metric='critic/score/mean']", "data-zoomed") == "true"
    chart.dblclick()
    assert page.get_attribute(".chart[data-metric='critic/score/mean']", "data-zoomed") == "false"

    tab.goto(f"/files?id={seeded['file']}")
    page.wait_for_selector("#file-preview table")
    assert page.locator("#file-preview tbody tr").count() >= 12
    with page.expect_download() as download:
        page.click("#file-preview button")
    assert download.value.suggested_filename == "arith.jsonl"
    assert Path(download.value.path()).read_text().count("\n") == len(SFT_ROWS)
    upload = tmp_path / "more.jsonl"
    upload.write_text("".join(json.dumps({"prompt": f"p{i}", "response": f"r{i}"}) + "\n" for i in range(5)))
    page.select_option("#purpose", "sft")
    page.set_input_files("#file-input", str(upload))
    page.wait_for_selector(".upload-row a[href^='#/files?id=file-']")
    assert page.inner_text(".upload-row .progress-text") == "done"
    page.click(".upload-row a")
    page.wait_for_selector("#file-preview h3:has-text('more.jsonl')")
    stats = page.locator("#file-preview table").nth(1)
    assert stats.locator("tbody tr").count() == 2 and "prompt" in stats.inner_text()  # the server's column stats
    tab.check("files", viewport)

    tab.goto("/models")
    page.wait_for_selector("#lineage-chain")
    methods = page.eval_on_selector_all("#lineage-chain .lineage-node", "els => els.map(e => e.dataset.method)")
    models = page.eval_on_selector_all("#lineage-chain .lineage-node", "els => els.map(e => e.dataset.model)")
    assert methods == ["sft", "reward_model", "rm_distill", "ppo"] and models == seeded["chain"]
    tab.check("models", viewport)

    tab.goto("/new?method=ppo")
    page.wait_for_selector("#job-form textarea")
    defaults = json.loads(page.input_value("#job-form textarea"))
    assert defaults["actor"]["clip_ratio_c"] == 3.0 and defaults["algorithm"]["adv_estimator"] == "gae"
    tab.check("new-job", viewport)


def test_job_page_charts_grow_while_metrics_stream(tabs, seeded):
    import httpx
    from sqlalchemy import update

    from core.db import session_scope
    from core.models import Job, utcnow

    project_id = _project(f"console-live-{secrets.token_hex(3)}")
    file_id = _file(project_id[0])
    job = _job(project_id[0], file_id, "/models/base", {"type": "sft"}, status="running", started_at=utcnow(),
               heartbeat_at=utcnow(), progress={"step": 0, "total_steps": 20})
    try:
        _events(job, [("job.status", {"status": "running"})] + [("job.metrics", {
            "step": s, "total_steps": 20, "values": {"train/loss": 3.0 / s, "train/lr": 1e-3}}) for s in (1, 2, 3)])
        tab = tabs(project_id[1])
        page = tab.page
        # The first connection drops after 3 events (a proxy cutting it): the page must resume after seq 3
        # with Last-Event-ID, losing and repeating nothing.
        resumed_from = []

        def cut_first_stream(route):
            if resumed_from or route.request.headers.get("last-event-id"):
                resumed_from.append(route.request.headers.get("last-event-id"))
                route.continue_()
                return
            resumed_from.append(None)
            events = httpx.get(f"{tab.base}/v1/jobs/{job}/events", params={"limit": 3},
                               headers={"Authorization": f"Bearer {project_id[1]}"}).json()["data"]
            body = "".join(f"id: {e['seq']}\nevent: {e['type']}\ndata: {json.dumps(e)}\n\n" for e in events)
            route.fulfill(status=200, headers={"Content-Type": "text/event-stream"}, body=body)

        page.route("**/events/stream", cut_first_stream)
        tab.goto(f"/jobs/{job}")
        page.wait_for_function("() => document.querySelector('#charts')?.dataset.points === '6'")
        page.wait_for_selector(".stream-state[data-state=live]")
        assert resumed_from == [None, "3"], resumed_from
        assert page.locator("#events li[data-type='job.status']").count() == 1
        for step in range(4, 11):
            _events(job, [("job.metrics", {"step": step, "total_steps": 20,
                                           "values": {"train/loss": 3.0 / step, "train/lr": 1e-3}})])
            page.wait_for_function(f"() => document.querySelector('#charts')?.dataset.points === '{2 * step}'", timeout=10_000)
        assert page.get_attribute(".chart[data-metric='train/loss']", "data-points") == "10"
        _events(job, [("job.checkpoint", {"checkpoint_id": "ckpt-none", "step": 10, "metrics": {}}),
                      ("job.warning", {"code": "kl_high", "message": "KL high", "data": {"step": 9}})])
        page.wait_for_selector("#events li[data-type='job.warning']")
        assert page.inner_text(".progress-text") == "10/20"
        with session_scope() as db:
            db.execute(update(Job).where(Job.id == job).values(status="cancelled", finished_at=utcnow()))
        _events(job, [("job.status", {"status": "cancelled"}), ("job.done", {"status": "cancelled"})])
        page.wait_for_selector(".stream-state[data-state=done]")
        tab.check("job-live", "desktop")
    finally:
        with session_scope() as db:
            db.execute(update(Job).where(Job.id == job, Job.status == "running").values(status="cancelled"))


def test_job_form_shows_the_problem_param_beside_its_field(tabs, seeded):
    tab = tabs(seeded["key"])
    page = tab.page
    tab.goto("/new?method=sft")
    page.wait_for_selector("#job-form textarea")
    page.fill("[data-param=model]", "/models/base")
    page.fill("[data-param=training_file]", seeded["file"])
    hp = json.loads(page.input_value("#job-form textarea"))
    hp["optim"]["lr"] = -1
    page.fill("#job-form textarea", json.dumps(hp, indent=2))
    page.click("#submit-job")
    error = page.locator("[data-param-error='method.hyperparameters']")
    error.wait_for()
    assert "method.hyperparameters.optim.lr" in error.inner_text()
    assert page.get_attribute("#job-form textarea", "aria-invalid") == "true"
    assert page.evaluate("(t => t.value.slice(t.selectionStart, t.selectionEnd))(document.querySelector('#job-form textarea'))") == '"lr"'

    hp["optim"]["lr"] = 1e-4
    page.fill("#job-form textarea", json.dumps(hp, indent=2))
    page.fill("[data-param=model]", "model-doesnotexist")
    page.click("#submit-job")
    page.locator("[data-param-error=model]").wait_for()
    page.wait_for_function("() => document.querySelector(\"[data-param-error=model]\").textContent.includes('model')")
    assert page.locator("[data-param-error='method.hyperparameters']").inner_text() == ""
    tab.check("new-job-error", "desktop", allow=("status of 422", "status of 404"))


@pytest.mark.slow
def test_a_job_created_in_the_form_streams_live_into_its_charts(tabs, live_server, celery_worker, project_key):
    """The whole path on the live stack: the form creates a tiny SFT job, its page's charts grow point by
    point while the worker trains, then the checkpoint and the output model download as tar archives."""
    import httpx

    from core.config import settings
    from engine.demo import build_demo_assets

    assets = build_demo_assets(Path(settings.model_roots[0]) / "console-demo")
    key = project_key[1]
    with open(assets["sft_train"], "rb") as f:
        r = httpx.post(f"{live_server}/v1/files", headers={"Authorization": f"Bearer {key}"}, data={"purpose": "sft"},
                       files={"file": ("sft_train.parquet", f)}, timeout=60)
    assert r.status_code in (200, 201), r.text
    tab = tabs(key)
    page = tab.page
    tab.goto("/new?method=sft")
    page.wait_for_selector("#job-form textarea")
    page.fill("[data-param=model]", assets["model"])
    page.fill("[data-param=training_file]", r.json()["id"])
    page.fill("#job-form textarea", json.dumps({
        "data": {"train_batch_size": 8, "max_prompt_length": 32, "max_response_length": 32},
        "optim": {"lr": 1e-3}, "trainer": {"total_training_steps": 12, "save_freq": 6}, "max_token_len_per_gpu": 1024}))
    page.click("#submit-job")
    page.wait_for_selector(".stream-state")
    job_id = page.evaluate("location.hash").split("/")[-1]
    assert job_id.startswith("job-")
    # Every value the point count takes, as the page sets it.
    page.evaluate("""() => { const el = document.querySelector('#charts'); window.seen = [el.dataset.points];
        new MutationObserver(() => window.seen.push(el.dataset.points))
          .observe(el, {attributes: true, attributeFilter: ['data-points']}); }""")
    page.wait_for_selector(".stream-state[data-state=done]", timeout=300_000)
    seen = [int(p) for p in page.evaluate("window.seen")]
    assert seen == sorted(seen) and len({p for p in seen if p > 0}) >= 3, f"points did not grow step by step: {seen}"
    page.wait_for_selector(".badge.s-succeeded")
    assert int(page.get_attribute(".chart-group[data-group=train] .chart", "data-points") or 0) >= 2
    page.wait_for_selector("#checkpoints button[data-checkpoint]")
    for button in ("#checkpoints button[data-checkpoint] >> nth=0", "#download-model"):
        with page.expect_download(timeout=120_000) as download:
            page.click(button)
        with tarfile.open(download.value.path()) as tar:
            assert any(n.endswith("config.json") for n in tar.getnames()), button
    tab.check("job-e2e", "desktop")


@pytest.fixture(scope="module")
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


FORM_CASES = {  # method -> (base model asset, training file purpose, extra fields to fill)
    "sft": ("model", "sft", {}),
    "reward_model": ("model", "preference", {}),
    "rm_distill": ("small_model", "preference", {"method.teacher": "model"}),
    "dpo": ("model", "preference", {}),
    "ppo": ("model", "prompts", {"method.reward.function": "gsm8k"}),
    "eval": ("model", "prompts", {"method.reward.function": "gsm8k"}),
}


@pytest.mark.parametrize("method", FORM_CASES)
def test_the_prefilled_form_creates_a_job_on_the_demo_model(tabs, demo_files, method):
    """Submitted as pre-filled (only the references filled in), the form creates the job: the defaults
    it shows are valid for the model (no 422 context_too_long on the demo model's 512-token window)."""
    import httpx

    key, assets, files = demo_files
    model, purpose, extra = FORM_CASES[method]
    tab = tabs(key)
    page = tab.page
    tab.goto(f"/new?method={method}")
    page.wait_for_selector("#job-form textarea")
    shown = json.loads(page.input_value("#job-form textarea"))
    assert shown["data"] and not {"max_prompt_length", "max_response_length", "max_length"} & set(shown["data"])
    page.fill("[data-param=model]", assets[model])
    page.fill("[data-param=training_file]", files[purpose])
    for param, value in extra.items():
        page.fill(f"[data-param='{param}']", assets.get(value, value))
    with page.expect_response(lambda r: r.url.endswith("/v1/jobs") and r.request.method == "POST") as answer:
        page.click("#submit-job")
    response = answer.value
    assert response.status == 201, response.text()
    job = response.json()
    assert job["method"]["type"] == method
    page.wait_for_function(f"() => location.hash === '#/jobs/{job['id']}'")
    httpx.post(f"{tab.base}/v1/jobs/{job['id']}/cancel", headers={"Authorization": f"Bearer {key}"}, timeout=30)
    tab.check(f"new-{method}-created", "desktop")


def test_job_page_shows_the_manifest_and_the_fork_parent(tabs, seeded):
    from sqlalchemy import update

    from core.db import session_scope
    from core.models import Job, utcnow

    project_id, key = _project(f"console-manifest-{secrets.token_hex(3)}")
    file_id = _file(project_id)
    done = {"status": "succeeded", "started_at": utcnow(), "finished_at": utcnow()}
    parent = _job(project_id, file_id, "/models/base", {"type": "sft"}, **done)
    manifest = {"version": 1, "job_id": "x", "attempt": 1, "recorded_at": 1767052800, "method": "sft",
                "packages": {"keel": "0.1.0", "torch": "2.5.1", "transformers": "4.46.0", "peft": None, "vllm": None,
                             "ray": "2.40.0"},
                "config": {"optim": {"lr": 0.001}}, "resources": {"num_workers": 1}, "seeds": {"seed": 5},
                "datasets": {"training_file": {"id": file_id, "sha256": "ab" * 32}, "validation_file": None},
                "base_model": {"ref": "/models/base", "sha256": "cd" * 32, "algorithm": "sampled-sha256-v1"},
                "hardware": {"cpu_model": "Test CPU", "cpu_count": 8, "memory_bytes": 2**34, "gpus": [],
                             "ray_nodes": 2},
                "image_digest": "sha256:" + "ef" * 32, "from_checkpoint": "ckpt-parent",
                "forked_from": {"job": parent, "checkpoint": "ckpt-parent", "step": 4}}
    child = _job(project_id, file_id, "/models/base", {"type": "sft"}, manifest=manifest, **done)
    queued = _job(project_id, file_id, "/models/base", {"type": "sft"})
    with session_scope() as db:
        row = db.get(Job, child)
        db.execute(update(Job).where(Job.id == child).values(spec={
            **row.spec, "from_checkpoint": "ckpt-parent", "forked_from": manifest["forked_from"]}))
    try:
        tab = tabs(key)
        page = tab.page
        tab.goto(f"/jobs/{child}")
        page.wait_for_selector(f".summary a[href='#/jobs/{parent}']")
        assert "at step 4" in page.inner_text(".summary")
        assert not page.is_visible("#manifest-body dl")  # collapsed: read only when opened
        page.click("#manifest > summary")
        page.wait_for_selector("#manifest-body dl")
        text = page.inner_text("#manifest-body")
        for want in ("torch 2.5.1", "vllm —", "seed=5", file_id, "Test CPU × 8", "2 Ray nodes", "sha256:efef"):
            assert want in text, (want, text)
        tab.check("job-manifest", "desktop")

        tab.goto(f"/jobs/{queued}")
        page.wait_for_selector("#manifest > summary")
        page.click("#manifest > summary")
        page.wait_for_selector("#manifest-body p:has-text('Recorded when a worker starts the job.')")
    finally:
        with session_scope() as db:
            db.execute(update(Job).where(Job.id == queued).values(status="cancelled"))
