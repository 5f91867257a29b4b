"""engine.methods.ppo end to end on the demo assets (CPU, local Ray): metrics, reward model wiring, learning,
rollback, resume, data parallelism, watchdog."""

from __future__ import annotations

import dataclasses
import math
import time
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file

from engine.config import JobRequest, ModelConfig, PPOConfig, Resources, build_config
from engine.errors import Cancelled, Diverged, StepTimeout
from engine.methods.ppo import PPOTrainer, run_ppo
from engine.rewards.rules import register_reward, unregister_reward
from engine.runtime.reporting import RecordingReporter

pytestmark = pytest.mark.slow

REQUIRED_METRICS = (
    "actor/pg_loss", "actor/entropy", "actor/pg_clipfrac", "actor/pg_clipfrac_lower", "actor/ppo_kl",
    "actor/grad_norm", "critic/vf_loss", "critic/vf_clipfrac", "critic/score/mean", "critic/rewards/mean",
    "critic/advantages/var", "critic/values/mean", "critic/vf_explained_var", "actor/reward_kl_penalty",
    "actor/reward_kl_penalty_coeff", "response_length/mean", "response_length/clip_ratio", "timing_s/gen",
    "timing_s/ref", "timing_s/values", "timing_s/adv", "timing_s/update_critic", "timing_s/update_actor",
    "timing_s/step", "timing_s/snapshot", "perf/throughput", "train/response_tokens",
    "rollout/logprob_diff/mean", "rollout/logprob_diff/max",
)
TINY = {
    "data": {"train_batch_size": 4, "max_prompt_length": 32, "max_response_length": 8},
    "actor": {"ppo_mini_batch_size": 2, "ppo_epochs": 1, "optim": {"lr": 1e-4}},
    "rollout": {"n": 2},
}


def merge(base: dict, extra: dict) -> dict:
    out = dict(base)
    for key, value in extra.items():
        out[key] = merge(out[key], value) if isinstance(value, dict) and isinstance(out.get(key), dict) else value
    return out


def make_request(assets, tmp: Path, *, steps: int = 2, overrides: dict | None = None, reward: dict | None = None,
                 workers: int = 1, validation: bool = True, resume_from: str | None = None,
                 checkpoint_dir: Path | None = None) -> JobRequest:
    cfg = build_config(PPOConfig, merge(merge(TINY, {"trainer": {"total_training_steps": steps}}), overrides or {}))
    return JobRequest(
        job_id="ppo-test", method="ppo", config=cfg, model_path=assets["model"],
        training_file=assets["prompts_train"], validation_file=assets["prompts_val"] if validation else None,
        output_dir=str(tmp / "out"), checkpoint_dir=str(checkpoint_dir or tmp / "ckpt"), seed=7,
        reward=reward or {"function": "gsm8k"}, resources=Resources(num_workers=workers),
        resume_from=resume_from)


def weights(out_dir: str) -> dict[str, torch.Tensor]:
    return load_file(str(Path(out_dir) / "model.safetensors"))


def assert_same_weights(a: dict[str, torch.Tensor], b: dict[str, torch.Tensor], atol: float = 0.0) -> None:
    assert a.keys() == b.keys()
    for key, value in a.items():
        torch.testing.assert_close(value, b[key], rtol=0.0, atol=atol, msg=key)


@pytest.fixture(scope="module")
def baseline(demo_assets, ray_local, tmp_path_factory):
    """4 steps, gsm8k rule reward, checkpoint every 2 steps, one worker: shared by several tests."""
    tmp = tmp_path_factory.mktemp("ppo-baseline")
    reporter = RecordingReporter()
    request = make_request(demo_assets, tmp, steps=4, overrides={"trainer": {"save_freq": 2, "test_freq": 2}})
    started = time.perf_counter()
    result = run_ppo(request, reporter)
    return {"request": request, "reporter": reporter, "result": result, "seconds": time.perf_counter() - started}


def test_gsm8k_run_reports_every_metric(baseline):
    reporter, result = baseline["reporter"], baseline["result"]
    assert reporter.steps() == [1, 2, 3, 4]
    for event in reporter.of("metrics")[1:]:  # [0]: the validation before training
        missing = [m for m in REQUIRED_METRICS if m not in event["values"]]
        assert not missing, f"step {event['step']} lacks {missing}"
        assert event["total_steps"] == 4
        assert all(isinstance(v, float) for v in event["values"].values())
        assert event["values"]["train/response_tokens"] >= event["values"]["response_length/mean"] > 0
    # Validation on test_freq steps and at the end; the overfit check at the end.
    # ... and before training (`trainer.val_before_train`), at step 0.
    assert [e["step"] for e in reporter.of("metrics") if "val/reward/mean" in e["values"]] == [0, 2, 4]
    assert all(0.0 < e["values"]["val/distinct_responses"] <= 1.0
               for e in reporter.of("metrics") if "val/reward/mean" in e["values"])
    assert "val/overfit_gap" in result.metrics and math.isfinite(result.metrics["val/overfit_gap"])
    assert [c["step"] for c in reporter.of("checkpoint")] == [2, 4]
    assert all((Path(c["path"]) / "COMPLETE").is_file() for c in reporter.of("checkpoint"))
    assert result.model_format == "hf" and result.model_kind == "policy"
    assert (Path(result.output_dir) / "model.safetensors").is_file()
    assert not reporter.of("warning")


def test_each_step_logs_a_few_decoded_samples(baseline):
    """`job.samples` (the console's samples table): up to 4 rows a step, the prompt as the dataset wrote
    it, the response decoded, the reward a float that the step's score range holds."""
    reporter = baseline["reporter"]
    samples = reporter.of("samples")
    assert [e["step"] for e in samples] == [1, 2, 3, 4]
    metrics = {e["step"]: e["values"] for e in reporter.of("metrics")}
    for event in samples:
        assert 1 <= len(event["rows"]) <= 4
        for row in event["rows"]:
            assert row["prompt"] and isinstance(row["response"], str) and len(row["response"]) <= 600
            values = metrics[event["step"]]
            assert values["critic/score/min"] - 1e-6 <= row["reward"] <= values["critic/score/max"] + 1e-6


def test_reward_model_run(demo_assets, ray_local, tmp_path):
    from engine.models import load_reward_model, load_tokenizer, save_model

    torch.manual_seed(0)
    rm = load_reward_model(demo_assets["model"], ModelConfig())
    save_model(rm, load_tokenizer(demo_assets["model"]), tmp_path / "rm")
    reporter = RecordingReporter()
    # Each role in its own placement group and process (4 x 0.5 CPU fits the 2-CPU local Ray).
    request = make_request(demo_assets, tmp_path, steps=2, reward={"model_path": str(tmp_path / "rm")},
                           overrides={"trainer": {"critic_warmup": 1}})
    request = dataclasses.replace(request, resources=Resources(cpus_per_worker=0.5, colocate=False))
    result = run_ppo(request, reporter)
    assert reporter.steps() == [1, 2]
    warmup, trained = (e["values"] for e in reporter.of("metrics") if e["step"] > 0)
    # Step 1 only trains the critic (critic_warmup=1); step 2 trains both.
    assert not [m for m in REQUIRED_METRICS if m not in warmup and m != "timing_s/update_actor"
                and not m.startswith(("actor/pg_", "actor/entropy", "actor/ppo_kl", "actor/grad_norm"))]
    assert "actor/pg_loss" not in warmup and warmup["guardrails/kl"] == 0.0
    assert all(m in trained for m in REQUIRED_METRICS)
    scores = reporter.series("critic/score/mean")
    assert all(math.isfinite(s) for s in scores) and any(s != 0.0 for s in scores)  # real RM scores
    assert "val/reward/mean" in result.metrics


def test_reward_rises_on_a_learnable_task(demo_assets, ray_local, tmp_path):
    """A rule reward the tiny random model can climb: the share of response tokens in the lower half
    of the vocabulary (about 0.5 at the start)."""
    def lower_half(response, ground_truth, *, response_ids, **_):
        return sum(t < 512 for t in response_ids) / max(1, len(response_ids))

    register_reward("test_lower_half")(lower_half)
    try:
        reporter = RecordingReporter()
        overrides = {
            "data": {"train_batch_size": 8},
            "actor": {"ppo_mini_batch_size": 4, "ppo_epochs": 2, "optim": {"lr": 1e-3}},
            "critic": {"optim": {"lr": 1e-3}},
            "algorithm": {"kl_ctrl": {"type": "fixed", "kl_coef": 0.0}},
            # The policy is meant to move far from the reference here: warnings, no rollback.
            "guardrails": {"warn_kl": 0.2, "rollback_kl": 100.0},
        }
        run_ppo(make_request(demo_assets, tmp_path, steps=24, overrides=overrides, validation=False,
                             reward={"function": "test_lower_half"}), reporter)
    finally:
        unregister_reward("test_lower_half")
    scores = reporter.series("critic/score/mean")
    first, last = sum(scores[:5]) / 5, sum(scores[-5:]) / 5
    assert last > first + 0.15, scores
    warnings = reporter.of("warning")
    assert warnings and {w["code"] for w in warnings} == {"kl_high"}
    assert all(w["data"]["kl"] > 0.2 for w in warnings)


def test_nan_reward_rolls_back_once_and_recovers(demo_assets, ray_local, tmp_path):
    flag = tmp_path / "nan-once"
    flag.write_text("armed")

    def nan_once(response, ground_truth, **info):
        if flag.exists():  # runs in the reward worker: a file is the "once" shared with the test
            flag.unlink()
            return math.nan
        return 0.5

    register_reward("test_nan_once")(nan_once)
    try:
        reporter = RecordingReporter()
        # LoRA: the snapshot holds the adapter, the reference is the actor without it.
        result = run_ppo(make_request(demo_assets, tmp_path, steps=3, validation=False,
                                      overrides={"model": {"lora_rank": 4, "lora_alpha": 8}},
                                      reward={"function": "test_nan_once"}), reporter)
    finally:
        unregister_reward("test_nan_once")
    rollbacks = [w for w in reporter.of("warning") if w["code"] == "rollback"]
    assert len(rollbacks) == 1
    assert rollbacks[0]["data"]["step"] == 1 and "reward" in rollbacks[0]["data"]["nonfinite"]
    assert rollbacks[0]["data"]["clip_ratio"] == pytest.approx(0.1)
    assert reporter.steps() == [1, 2, 3]
    last = reporter.of("metrics")[-1]["values"]
    assert last["guardrails/rollbacks"] == 1.0
    assert last["actor/lr"] == pytest.approx(0.5e-4)
    assert all(math.isfinite(v) for v in last.values())
    assert result.model_format == "lora" and (Path(result.output_dir) / "adapter").is_dir()


def test_kl_spike_rolls_back_once_and_recovers(demo_assets, ray_local, tmp_path):
    from engine.roles.remote import get

    reporter = RecordingReporter()
    trainer = PPOTrainer(make_request(demo_assets, tmp_path, steps=3, validation=False), reporter)
    fired = []

    def corrupt_policy(role):  # runs in the actor worker (a local function travels by value)
        from engine.rollout.sampling import weights_fingerprint

        with torch.no_grad():
            role.model.get_output_embeddings().weight.mul_(50.0)
        role.rollout.fingerprint = weights_fingerprint(role.model)  # as if sampled so: not a sync fault

    def spike(tr: PPOTrainer, step: int) -> None:
        if step == 2 and not fired:
            fired.append(step)
            get(tr.roles["actor"].submit_all("apply", corrupt_policy))

    trainer.fault_hook = spike
    trainer.fit()
    rollbacks = [w for w in reporter.of("warning") if w["code"] == "rollback"]
    assert len(rollbacks) == 1
    assert rollbacks[0]["data"]["step"] == 2
    assert rollbacks[0]["data"]["kl"] > 0.3
    assert reporter.steps() == [1, 2, 3]
    assert all(kl < 0.3 for kl in reporter.series("guardrails/kl"))


def test_rollback_budget_spent_raises_diverged(demo_assets, ray_local, tmp_path):
    register_reward("test_always_nan")(lambda response, ground_truth, **info: math.nan)
    try:
        reporter = RecordingReporter()
        with pytest.raises(Diverged) as err:
            run_ppo(make_request(demo_assets, tmp_path, steps=2, validation=False,
                                 overrides={"guardrails": {"max_rollbacks": 1}},
                                 reward={"function": "test_always_nan"}), reporter)
    finally:
        unregister_reward("test_always_nan")
    assert err.value.code == "diverged"
    assert err.value.data["rollbacks"] == 1 and len(err.value.data["history"]) == 2
    assert len([w for w in reporter.of("warning") if w["code"] == "rollback"]) == 1
    assert reporter.steps() == []


def test_resume_after_kill_matches_uninterrupted_run(baseline, demo_assets, ray_local, tmp_path):
    overrides = {"trainer": {"save_freq": 2, "test_freq": 2}}
    stopped = RecordingReporter(stop_after_step=2)
    with pytest.raises(Cancelled):
        run_ppo(make_request(demo_assets, tmp_path / "a", steps=4, overrides=overrides), stopped)
    assert stopped.steps() == [1, 2]
    checkpoint = stopped.of("checkpoint")[-1]["path"]
    resumed = RecordingReporter()
    result = run_ppo(make_request(demo_assets, tmp_path / "b", steps=4, overrides=overrides,
                                  resume_from=checkpoint), resumed)
    assert resumed.steps() == [3, 4]
    base = baseline["reporter"]
    for name in ("actor/pg_loss", "critic/vf_loss", "critic/score/mean"):
        assert stopped.series(name) + resumed.series(name) == pytest.approx(base.series(name), rel=1e-5, abs=1e-7)
    assert_same_weights(weights(result.output_dir), weights(baseline["result"].output_dir), atol=1e-6)


def test_two_workers_match_one(baseline, demo_assets, ray_local, tmp_path):
    reporter = RecordingReporter()
    result = run_ppo(make_request(demo_assets, tmp_path, steps=4, workers=2,
                                  overrides={"trainer": {"save_freq": 2, "test_freq": 2}}), reporter)
    base = baseline["reporter"]
    assert reporter.steps() == base.steps()
    for name in ("actor/pg_loss", "actor/ppo_kl", "critic/vf_loss", "critic/score/mean", "actor/grad_norm"):
        assert reporter.series(name) == pytest.approx(base.series(name), rel=1e-3, abs=1e-5), name
    assert_same_weights(weights(result.output_dir), weights(baseline["result"].output_dir), atol=1e-4)


def test_step_watchdog_raises_step_timeout(demo_assets, ray_local, tmp_path):
    trainer = PPOTrainer(make_request(demo_assets, tmp_path, steps=2, validation=False,
                                      overrides={"guardrails": {"step_timeout_s": 2.0}}), RecordingReporter())
    trainer.fault_hook = lambda tr, step: time.sleep(2.5)
    with pytest.raises(StepTimeout) as err:
        trainer.fit()
    assert err.value.code == "step_timeout" and err.value.data["step"] == 1


def test_reward_filter_and_replay(demo_assets, ray_local, tmp_path):
    """PF-PPO filtering within each prompt's group (best and worst kept), kept samples replayed next step."""
    def lower_half(response, ground_truth, *, response_ids, **_):
        return sum(t < 512 for t in response_ids) / max(1, len(response_ids))

    register_reward("test_lower_half_grpo")(lower_half)
    try:
        reporter = RecordingReporter()
        overrides = {
            "rollout": {"n": 4},
            "guardrails": {"reward_filter": {"enable": True, "mode": "best_worst", "replay_buffer_size": 4},
                           "warn_kl": 100.0, "rollback_kl": 100.0},
            "trainer": {"save_freq": 2},
        }
        result = run_ppo(make_request(demo_assets, tmp_path, steps=2, overrides=overrides, validation=False,
                                      reward={"function": "test_lower_half_grpo"}), reporter)
    finally:
        unregister_reward("test_lower_half_grpo")
    assert reporter.steps() == [1, 2]
    first, second = (e["values"] for e in reporter.of("metrics"))
    # 2 of each group of 4 (all 4 when the group's scores tie)
    assert 0.5 <= first["reward_filter/kept_ratio"] <= 1.0
    assert first["reward_filter/replayed"] == 0.0 and second["reward_filter/replayed"] == 4.0
    assert math.isfinite(first["actor/pg_loss"]) and "critic/vf_loss" in first
    assert sorted(p.name for p in Path(reporter.of("checkpoint")[-1]["path"]).iterdir()) == [
        "COMPLETE", "actor", "critic"]
    assert result.model_format == "hf"


def test_refuses_bad_requests_before_starting_anything(demo_assets, tmp_path):
    from engine.config import SFTConfig
    from engine.errors import ConfigError
    from engine.runtime.checkpoint import CheckpointError

    (tmp_path / "step_3").mkdir()
    with pytest.raises(CheckpointError) as err:
        run_ppo(make_request(demo_assets, tmp_path, resume_from=str(tmp_path / "step_3")), RecordingReporter())
    assert err.value.param == "resume_from"
    with pytest.raises(ConfigError):
        run_ppo(dataclasses.replace(make_request(demo_assets, tmp_path), config=SFTConfig()), RecordingReporter())
    with pytest.raises(ConfigError) as err:  # 2 prompts x 2 samples per mini-batch cannot feed 8 workers
        run_ppo(make_request(demo_assets, tmp_path, workers=8), RecordingReporter())
    assert err.value.param == "actor.ppo_mini_batch_size"
