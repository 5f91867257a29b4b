"""The console's job form, in a real headless Chromium: a problem's `param` shown beside its field, a job
created in the form streaming live into its charts, and the prefilled form creating a job of every
method on the demo model."""

from __future__ import annotations

import json
import tarfile
from pathlib import Path

import pytest


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
