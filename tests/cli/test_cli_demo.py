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
