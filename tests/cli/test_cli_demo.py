"""`keel demo`'s pipeline is valid for the API: every step's request passes the real schema."""

from __future__ import annotations


def test_every_demo_step_is_a_valid_job_request():
    from api.schemas.jobs import JobCreate
    from keel_cli.demo import PIPELINE, _resolve

    assets = {"model": "/models/demo/model", "small_model": "/models/demo/small_model"}
    outputs = {step["name"]: f"model-{step['name'].replace('_', '')}" for step in PIPELINE}
    methods = []
    for step in PIPELINE:
        body = {"model": _resolve(step["model"], assets, outputs), "training_file": "file-x",
                "method": _resolve(step["method"], assets, outputs)}
        job = JobCreate.model_validate(body)
        methods.append(job.method.type)
        assert job.method.hyperparameters.trainer.total_training_steps <= 30  # tiny: minutes on a laptop
    assert methods == ["sft", "reward_model", "rm_distill", "ppo"]
    # Each step builds on the output model of an earlier one.
    assert PIPELINE[1]["model"] == "output:sft" and PIPELINE[2]["method"]["teacher"] == "output:reward_model"
    assert PIPELINE[3]["method"]["reward"]["model"] == "output:rm_distill"


def test_the_demo_ends_with_next_steps_and_where_ppo_saved_its_model(monkeypatch):
    from keel_cli.client import base_url
    from keel_cli.demo import next_steps

    monkeypatch.delenv("KEEL_URL", raising=False)
    monkeypatch.setenv("KEEL_PORT", "8123")  # where `keel up` listens with the same environment
    rows = [{"step": "sft", "status": "succeeded", "job": "job-a", "output_model": "model-sft"},
            {"step": "ppo", "status": "succeeded", "job": "job-p", "output_model": "model-ppo"}]
    text = next_steps(rows, base_url())
    assert "model model-ppo (job job-p)" in text and "keel models download model-ppo ./ppo-model" in text
    assert "console:  http://127.0.0.1:8123/" in text and "http://127.0.0.1:8123/docs" in text
    assert "model-ppo" not in next_steps(rows[:1], base_url())  # PPO never ran: no model to point at


def test_the_demo_ppo_has_no_overfit_check_to_trip():
    """PPO's end-of-run overfit check (greedy validation vs sampled training reward, margin 0.05 on raw
    reward-model scores) warned on every demo run; the demo's PPO step has no validation file."""
    from keel_cli.demo import PIPELINE

    ppo = next(step for step in PIPELINE if step["name"] == "ppo")
    assert "val" not in ppo
    assert all("val" in step for step in PIPELINE if step["name"] != "ppo")  # the others still validate
