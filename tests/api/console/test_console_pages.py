"""The web console at `/`, in a real headless Chromium driven by Playwright (Debian's `chromium`, found
like tests/api/test_docs_browser.py does; nothing is downloaded): served offline, the key gate, every page
rendered at a desktop and a phone viewport with no horizontal overflow, no console error and no request
leaving the app; the job page's charts grow while metrics stream; the manifest and a fork's parent.
Screenshots land in tests/artifacts/console/ (ignored by git)."""

from __future__ import annotations

import json
import secrets
from pathlib import Path

import pytest

from tests.api.console.console_data import (
    ROOT,
    SFT_ROWS,
    VIEWPORTS,
    _events,
    _file,
    _job,
    _manifest,
    _project,
)


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
    assert int(charts.get_attribute("data-points")) == 30 * 9 + 6
    groups = page.eval_on_selector_all(".chart-group", "els => els.map(e => e.dataset.group)")
    # PPO's key metrics lead in their own row; validation reward shares the training reward's chart.
    keys = page.eval_on_selector_all("#key-metrics .chart", "els => els.map(e => e.dataset.metric)")
    assert keys == ["critic/score/mean", "actor/ppo_kl", "actor/entropy", "response_length/mean", "perf/throughput"]
    assert page.get_attribute("#key-metrics .chart[data-metric='critic/score/mean']", "data-points") == str(30 + 6)
    assert groups == ["critic", "actor", "timing_s", "perf"]
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
               heartbeat_at=utcnow(), progress={"step": 0, "total_steps": 20}, manifest=_manifest(file_id, "sft", {}))
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
