"""The console as an ML engineer reads a run, in Debian's Chromium: each method's key metrics lead the
job page above the fold at 1280x800 and 390x844; smoothing changes the plotted values (read from the
chart's own data) and the view (smoothing, log scale, x axis, search, pins) lives in the URL; train and
validation share a chart; a one-point all-zero series gets a readable range; the samples table shows
the logged samples per step; the configuration as JSON and YAML; two jobs overlaid; the trainers page;
the playground streaming two models on the live OpenAI route (slow: it starts Ray Serve); and an axe-core pass (vendored, tests/api/console/vendor/axe-core) with no serious or critical
violation. Screenshots land in tests/artifacts/console/."""

from __future__ import annotations

import json
import secrets

import pytest

from tests.api.console.console_data import LONG_TEACHER, ROOT, VIEWPORTS, _project, _trainer

AXE = ROOT / "tests/api/console/vendor/axe-core/axe.min.js"
KEY_METRICS = {
    "ppo": ["critic/score/mean", "actor/ppo_kl", "actor/entropy", "response_length/mean", "perf/throughput"],
    "sft": ["train/loss", "train/token_accuracy", "train/lr", "perf/tokens_per_s"],
    "dpo": ["train/loss", "rewards/accuracies", "rewards/margins", "perf/tokens_per_s"],
    "reward_model": ["rm/accuracy", "rm/margin_mean", "rm/loss"],
    "rm_distill": ["distill/loss", "distill/agreement", "distill/kl"],
}


def plotted(page, metric: str) -> list[list[float | None]]:
    """The chart's uPlot data: [x, y per series] as drawn."""
    return page.evaluate("m => document.querySelector(`.chart[data-metric='${m}']`).plot.data", metric)


def open_job(tab, job_id: str, query: str = "") -> None:
    tab.goto(f"/jobs/{job_id}{query}")
    tab.page.wait_for_selector(".stream-state[data-state=done]")
    tab.page.wait_for_function("() => document.querySelector('#key-metrics .chart canvas')")


def axe_violations(page) -> list[dict]:
    """axe-core's serious and critical violations on the page as it is now."""
    if not page.evaluate("typeof axe !== 'undefined'"):
        page.evaluate(AXE.read_text())  # through the debugger protocol: the console's CSP does not apply
    return page.evaluate("""async () => (await axe.run(document, {resultTypes: ['violations']})).violations
        .filter(v => ['serious', 'critical'].includes(v.impact))
        .map(v => ({id: v.id, impact: v.impact, nodes: v.nodes.slice(0, 3).map(n => n.target.join(' '))}))""")


@pytest.mark.parametrize("viewport", VIEWPORTS)
def test_key_metrics_lead_each_method_above_the_fold(tabs, seeded, method_jobs, viewport):
    key, jobs = method_jobs
    for method, job_id, api_key in [("ppo", seeded["ppo_job"], seeded["key"]),
                                    *[(m, j, key) for m, j in jobs.items()]]:
        tab = tabs(api_key, viewport)
        open_job(tab, job_id)
        page = tab.page
        names = page.eval_on_selector_all("#key-metrics .chart", "els => els.map(e => e.dataset.metric)")
        assert names == KEY_METRICS[method], method
        first = page.locator("#key-metrics .chart").first.bounding_box()
        assert first["y"] + first["height"] <= VIEWPORTS[viewport]["height"], (method, first)
        # The key row comes before every other section of the page.
        order = page.evaluate("[...document.querySelectorAll('main section.card, main .summary')].map(e => e.id || e.className)")
        assert order[0] == "card key-card", order
        if method == "rm_distill":  # a long path is cut in the middle: both ends stay readable
            teacher = page.locator(".summary dd .ident").nth(1)
            assert teacher.get_attribute("title") == LONG_TEACHER
            text = teacher.inner_text()
            assert text.startswith("/models/a-rather") and text.endswith("teacher-final") and "…" in text
        tab.check(f"job-{method}", viewport)
        tab.close()


def test_train_and_validation_share_a_chart_and_flat_series_get_a_range(tabs, method_jobs):
    key, jobs = method_jobs
    tab = tabs(key)
    open_job(tab, jobs["sft"])
    page = tab.page
    x, train, val = plotted(page, "train/loss")
    assert x == list(range(1, 13)) and None not in train
    assert [v is not None for v in val] == [s % 4 == 0 for s in range(1, 13)]
    assert page.locator(".chart[data-metric='val/loss']").count() == 0
    assert page.locator(".chart[data-metric='train/loss'] .legend-item").all_inner_texts() == ["train/loss", "val/loss"]
    # One point, all zero: both axes get room around it instead of an empty span.
    assert plotted(page, "train/skipped_step") == [[12], [0]]
    scales = page.evaluate("() => { const s = document.querySelector(\".chart[data-metric='train/skipped_step']\").plot.scales;"
                           " return [s.x.min, s.x.max, s.y.min, s.y.max]; }")
    assert scales[0] < 12 < scales[1] and scales[2] < 0 < scales[3], scales
    tab.check("job-sft-detail", "desktop")


def test_smoothing_log_scale_x_axis_search_and_pins_change_the_charts_and_stay_in_the_url(tabs, seeded):
    tab = tabs(seeded["key"])
    page = tab.page
    open_job(tab, seeded["ppo_job"])
    x, raw = plotted(page, "critic/vf_loss")
    assert x == list(range(1, 31))

    page.locator("#smoothing").fill("0.9")
    page.wait_for_function("() => document.querySelector(\".chart[data-metric='critic/vf_loss']\").plot.data.length === 3")
    _, raw_again, smooth = plotted(page, "critic/vf_loss")
    assert raw_again == raw and smooth != raw
    last, want = 0.0, []
    for n, v in enumerate(raw, 1):  # TensorBoard's debiased EMA
        last = last * 0.9 + 0.1 * v
        want.append(last / (1 - 0.9 ** n))
    assert smooth == pytest.approx(want)
    assert smooth[-1] > raw[-1]  # a falling loss: the average lags above it
    assert "smooth=0.9" in page.url

    page.check("#log-scale")
    page.wait_for_selector(".chart[data-metric='critic/vf_loss'][data-log=true]")
    assert page.evaluate("document.querySelector(\".chart[data-metric='critic/vf_loss']\").plot.scales.y.distr") == 3

    page.select_option("#x-axis", "tokens")
    page.wait_for_function("() => document.querySelector(\".chart[data-metric='critic/vf_loss']\").plot.data[0][0] === 1000")
    assert plotted(page, "critic/vf_loss")[0] == [1000 * s for s in range(1, 31)]
    page.select_option("#x-axis", "time")
    page.wait_for_function("() => document.querySelector(\".chart[data-metric='critic/vf_loss']\").plot.data[0][0] === 0")

    page.fill("#metric-search", "vf_loss")
    page.wait_for_function("() => [...document.querySelectorAll('#charts .chart')].filter(c => !c.hidden).length === 1")
    page.fill("#metric-search", "")
    page.click(".chart[data-metric='actor/pg_loss'] .pin")
    page.wait_for_selector(".chart-group[data-group=pinned] .chart[data-metric='actor/pg_loss']")
    groups = page.eval_on_selector_all(".chart-group", "els => els.map(e => e.dataset.group)")
    assert groups[0] == "pinned"
    assert "pin=actor%2Fpg_loss" in page.url and "x=time" in page.url and "log=1" in page.url

    # The same URL, opened again, shows the same view.
    page.reload()
    page.wait_for_selector(".chart-group[data-group=pinned] .chart[data-metric='actor/pg_loss'] canvas")
    assert page.input_value("#smoothing") == "0.9" and page.is_checked("#log-scale")
    assert page.input_value("#x-axis") == "time"
    tab.check("job-view", "desktop")


def test_samples_table_and_configuration(tabs, seeded):
    tab = tabs(seeded["key"], "phone")
    page = tab.page
    open_job(tab, seeded["ppo_job"])
    page.wait_for_selector("#samples table[data-step='30']")
    rows = page.locator("#samples tbody tr")
    assert rows.count() == 3
    assert "What is 30 + 0?" in rows.nth(0).inner_text() and "It is 30." in rows.nth(0).inner_text()
    assert page.get_attribute("#samples", "data-steps") == "30"
    page.select_option("#samples-step", "5")
    page.wait_for_selector("#samples table[data-step='5']")
    second = page.locator("#samples tbody tr").nth(1).inner_text()
    assert "What is 5 + 1?" in second and "It is 6." in second and second.rstrip().endswith("0")

    config = json.loads(page.inner_text("#config-text"))
    assert config["algorithm"]["adv_estimator"] == "gae" and config["rollout"]["stop"] == []
    page.click("#config button[data-format=yaml]")
    yaml = page.inner_text("#config-text")
    assert "adv_estimator: gae" in yaml and "stop: []" in yaml and "  kl_ctrl:\n    kl_coef: 0.001" in yaml
    assert page.inner_text("#duration") == "3m 0s"
    assert ":" in page.inner_text(".summary dd:below(dt:has-text('Started'))")  # to the second
    tab.check("job-samples", "phone")


@pytest.mark.parametrize("viewport", VIEWPORTS)
def test_compare_overlays_two_jobs_with_a_settings_diff(tabs, method_jobs, viewport):
    key, jobs = method_jobs
    tab = tabs(key, viewport)
    page = tab.page
    tab.goto("/jobs")
    for method in ("sft", "dpo"):
        page.check(f"input[data-compare='{jobs[method]}']")
    page.click("#compare")
    page.wait_for_function("() => document.querySelector(\".chart[data-metric='train/loss']\")?.plot?.data.length === 5")
    x, sft_loss, dpo_loss, sft_val, dpo_val = plotted(page, "train/loss")
    assert x == list(range(1, 13)) and None not in sft_loss and None not in dpo_loss and sft_loss != dpo_loss
    assert [v is not None for v in sft_val] == [v is not None for v in dpo_val] == [s % 4 == 0 for s in range(1, 13)]
    colours = page.eval_on_selector_all(".chart[data-metric='train/loss'] .legend-item .run-swatch",
                                        "els => els.map(e => e.style.background)")
    assert colours[0] != colours[1] and colours[0] == colours[2] and colours[1] == colours[3]  # a colour per run
    legend = page.locator(".chart[data-metric='train/loss'] .legend-item").all_inner_texts()
    assert legend == ["run 1 train/loss", "run 2 train/loss", "run 1 val/loss", "run 2 val/loss"]
    diff = page.inner_text("#config-diff")
    assert "method" in diff and "sft" in diff and "dpo" in diff and "optim.lr" not in diff  # same lr: not a difference
    tab.check("compare", viewport)


def test_trainers_page_lists_a_trainer_its_loss_and_operations(tabs, database):
    project_id, key = _project(f"console-trainers-{secrets.token_hex(3)}")
    trainer = _trainer(project_id, [2.0, 1.5, 1.2, 1.0])
    tab = tabs(key)
    page = tab.page
    tab.goto("/trainers")
    page.wait_for_selector(f"#trainers-list a[href='#/trainers?id={trainer}']")
    assert "idle" in page.inner_text("#trainers-list tbody tr")
    tab.check("trainers", "desktop")
    page.click(f"#trainers-list a[href='#/trainers?id={trainer}']")
    page.wait_for_function("() => document.querySelector(\".chart[data-metric='loss']\")?.plot")
    assert plotted(page, "loss") == [[1, 2, 3, 4], [2.0, 1.5, 1.2, 1.0]]
    assert page.locator("#operations tbody tr").count() == 8
    tab.check("trainer", "desktop")
    page.once("dialog", lambda d: d.accept())
    page.click("#delete-trainer")
    page.wait_for_selector(".page-head .badge.s-deleted")


def test_accessibility_has_no_serious_violations(tabs, seeded, method_jobs, database):
    key, jobs = method_jobs
    pages = {"jobs": (seeded["key"], "/jobs"), "job": (seeded["key"], f"/jobs/{seeded['ppo_job']}"),
             "models": (seeded["key"], "/models"), "files": (seeded["key"], f"/files?id={seeded['file']}"),
             "new": (seeded["key"], "/new?method=ppo"), "trainers": (seeded["key"], "/trainers"),
             "playground": (seeded["key"], "/playground"),
             "compare": (key, f"/compare?jobs={jobs['sft']},{jobs['dpo']}")}
    found = {}
    for name, (api_key, fragment) in pages.items():
        tab = tabs(api_key)
        tab.goto(fragment)
        tab.page.wait_for_load_state("networkidle")
        found[name] = axe_violations(tab.page)
        tab.close()
    assert not any(found.values()), found


def test_memory_plan_is_a_table_of_gib_per_role_and_worker(tabs, demo_files):
    key, assets, files = demo_files
    tab = tabs(key, "phone")
    page = tab.page
    tab.goto("/new?method=ppo")
    page.wait_for_selector("#job-form textarea")
    page.fill("[data-param=model]", assets["model"])
    page.fill("[data-param=training_file]", files["prompts"])
    page.fill("[data-param='method.reward.function']", "gsm8k")
    page.click("#dry-run")
    page.wait_for_selector("#memory-plan table")
    roles = page.eval_on_selector_all("#memory-plan tbody th", "els => els.map(e => e.textContent)")
    assert set(roles) >= {"actor", "critic", "per worker"}, roles
    cells = page.eval_on_selector_all("#memory-plan tbody tr.total td", "els => els.map(e => e.textContent)")
    assert len(cells) == 6 and all(float(c) >= 0 for c in cells) and float(cells[4]) > 0  # GiB, device total
    assert "GiB" in page.inner_text("#memory-plan")
    tab.check("new-memory-plan", "phone")


@pytest.mark.slow
def test_playground_streams_a_model_beside_its_base(tabs, demo_files, serve_url):
    """On the live OpenAI route (Ray Serve on the session's Ray): a project model's base is offered
    beside it; greedy, each pane streams what the route answers for the same conversation, and a
    second turn carries each side's own reply."""
    import httpx

    from core.db import session_scope
    from core.models import File
    from tests.api.console.console_data import _model

    key, assets, files = demo_files
    tab = tabs(key)
    page = tab.page
    with session_scope() as db:
        project_id = db.get(File, files["sft"]).project_id
    model = _model(project_id, None, "policy", assets["model"], path=assets["model"])  # weights as its base's
    tab.goto("/playground")
    page.wait_for_selector(f"#pg-models option[value='{model}']", state="attached")
    page.fill("#pg-model", model)
    page.dispatch_event("#pg-model", "change")
    assert page.input_value("#pg-other") == assets["model"]  # its base, filled in
    page.fill("#pg-temperature", "0")
    page.fill("#pg-max-tokens", "12")
    types = []
    page.on("response", lambda r: types.append(r.headers.get("content-type", "")) if r.url.endswith("/chat/completions") else None)
    for turn, question in enumerate(("What is 2 + 2?", "And 3 + 3?"), 1):
        page.fill("#pg-message", question)
        page.click("#pg-send")
        page.wait_for_function(f"() => document.querySelectorAll('.pg-assistant').length === {2 * turn} && "
                               "!document.querySelector('.pg-assistant[data-state=streaming]')", timeout=240_000)
        states = page.eval_on_selector_all(".pg-pane", "els => els.map(e => e.innerText)")
        assert page.locator(".pg-assistant[data-state=done]").count() == 2 * turn, states
    assert types and all(t.startswith("text/event-stream") for t in types), types
    first = {"role": "user", "content": "What is 2 + 2?"}
    for name in (model, assets["model"]):
        shown = page.locator(f".pg-pane[data-model='{name}'] .pg-assistant").first.inner_text()
        answer = httpx.post(f"{tab.base}/v1/chat/completions", headers={"Authorization": f"Bearer {key}"}, timeout=120,
                            json={"model": name, "temperature": 0, "max_tokens": 12, "messages": [first]}).json()
        assert shown == answer["choices"][0]["message"]["content"], (name, answer)
    assert page.locator(".pg-pane").count() == 2 and page.locator(".pg-user").count() == 4
    tab.check("playground", "desktop")
