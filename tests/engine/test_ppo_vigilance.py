"""Silent failures made loud (issue 28), through `engine.methods.ppo` with the in-process executor on the demo
assets: the weight-sync check, the rollout/trainer log-prob gap and its correction, collapse, the
validation before training and the resume invariants."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pytest
import torch
from test_ppo import make_request

from engine.errors import Diverged, EngineError
from engine.methods.ppo import run_ppo
from engine.rollout.hf import HFRollout
from engine.runtime.checkpoint import CheckpointError
from engine.runtime.reporting import RecordingReporter

pytestmark = pytest.mark.slow


def _local(request):
    return dataclasses.replace(request, resources=dataclasses.replace(request.resources, executor="local"))


def _run(demo_assets, tmp_path, **kw):
    reporter = RecordingReporter()
    result = run_ppo(_local(make_request(demo_assets, tmp_path, **kw)), reporter)
    return reporter, result


def test_a_weight_sync_that_does_nothing_is_refused(demo_assets, tmp_path, monkeypatch):
    monkeypatch.setattr(HFRollout, "sync_weights", lambda self, model: None)
    with pytest.raises(EngineError) as err:
        _run(demo_assets, tmp_path, steps=2, validation=False)
    assert err.value.code == "weight_sync_failed"
    assert err.value.data["batch_version"] < err.value.data["trainer_version"]


def test_a_lora_sync_that_leaves_the_adapter_unchanged_is_an_error(demo_assets, tmp_path, monkeypatch):
    """vllm's LoRA sync writes the adapter the engine serves: a stale one (the trained adapter
    changed, the written one did not) raises instead of sampling from the old policy."""
    from engine.config import ModelConfig
    from engine.models import load_policy
    from engine.rollout.vllm import VLLMRollout

    model = load_policy(demo_assets["model"], ModelConfig(lora_rank=4, lora_alpha=8), trainable=True)
    backend = VLLMRollout({})
    backend.write_adapter(model, str(tmp_path / "v1"))
    trained = next(p for p in model.parameters() if p.requires_grad)
    with torch.no_grad():  # an update moves the adapter, a correct sync writes the new one
        trained.add_(0.5)
    backend.write_adapter(model, str(tmp_path / "v2"))
    frozen = {k: v.clone() for k, v in model.state_dict().items()}
    original = type(model).save_pretrained

    def stale(self, path, **kw):  # a broken sync writes the previous adapter again
        live = {k: v.clone() for k, v in self.state_dict().items()}
        self.load_state_dict(frozen)
        original(self, path, **kw)
        self.load_state_dict(live)

    monkeypatch.setattr(type(model), "save_pretrained", stale)
    with torch.no_grad():
        trained.add_(0.5)
    with pytest.raises(EngineError) as err:
        backend.write_adapter(model, str(tmp_path / "v3"))
    assert err.value.code == "weight_sync_failed"


@pytest.fixture
def gap(monkeypatch):
    """The rollout engine reports every sampled token e (2.72) times less likely than it is: a known gap."""
    real = HFRollout.generate

    def generate(self, prompts, seeds, params):
        out = real(self, prompts, seeds, params)
        if self.last_log_probs is not None:
            self.last_log_probs = [[lp - 1.0 for lp in row] for row in self.last_log_probs]
        return out

    monkeypatch.setattr(HFRollout, "generate", generate)


def test_logprob_gap_is_measured_and_warned(demo_assets, tmp_path):
    exact, _ = _run(demo_assets, tmp_path / "exact", steps=1, validation=False)
    first = exact.of("metrics")[0]["values"]
    assert 0.0 <= first["rollout/logprob_diff/mean"] <= first["rollout/logprob_diff/max"] < 1e-2
    assert not exact.of("warning")


def test_logprob_gap_guardrail_and_rollout_correction(demo_assets, tmp_path, gap):
    guard = {"guardrails": {"max_logprob_diff": 0.5}}
    plain, _ = _run(demo_assets, tmp_path / "plain", steps=1, validation=False, overrides=guard)
    values = plain.of("metrics")[0]["values"]
    assert values["rollout/logprob_diff/mean"] == pytest.approx(1.0, abs=1e-2)
    assert [w["code"] for w in plain.of("warning")] == ["logprob_gap"]
    assert "rollout_corr/is_weight_mean" not in values
    # TIS: every ratio e is capped at 2, so the first update's policy loss doubles.
    tis, _ = _run(demo_assets, tmp_path / "tis", steps=1, validation=False,
                  overrides={"algorithm": {"rollout_correction": {"rollout_is": "token", "rollout_is_threshold": 2.0}}})
    corrected = tis.of("metrics")[0]["values"]
    assert corrected["rollout_corr/is_weight_mean"] == pytest.approx(2.0)
    assert corrected["actor/pg_loss"] == pytest.approx(2 * values["actor/pg_loss"], rel=1e-4, abs=1e-7)
    assert values["actor/pg_loss"] != 0.0
    # MIS: every token's ratio e lies outside [1/2, 2]: all rejected, nothing to learn from.
    mis, _ = _run(demo_assets, tmp_path / "mis", steps=1, validation=False,
                  overrides={"algorithm": {"rollout_correction": {"rollout_rs": "token", "rollout_rs_threshold": 2.0}}})
    rejected = mis.of("metrics")[0]["values"]
    assert rejected["rollout_corr/rejected_frac"] == pytest.approx(1.0) and rejected["actor/pg_loss"] == 0.0


@pytest.fixture
def collapsed(monkeypatch):
    """Validation decodes one repeated token for every prompt (the demo's reward hack)."""
    real = HFRollout.generate

    def generate(self, prompts, seeds, params):
        out = real(self, prompts, seeds, params)
        return [[7] * 6 for _ in out] if params.greedy else out

    monkeypatch.setattr(HFRollout, "generate", generate)


def test_collapse_warns_with_samples_from_the_baseline_on(demo_assets, tmp_path, collapsed):
    reporter, _ = _run(demo_assets, tmp_path, steps=1,
                       overrides={"guardrails": {"min_distinct_ratio": 0.5}})
    first = reporter.of("metrics")[0]
    assert first["step"] == 0 and "val/reward/mean" in first["values"]  # trainer.val_before_train
    assert first["values"]["val/distinct_responses"] < 0.5
    warnings = [w for w in reporter.of("warning") if w["code"] == "collapse"]
    assert [w["data"]["step"] for w in warnings] == [0, 1]
    data = warnings[0]["data"]
    assert data["repeated_token_responses"] > 0 and len(data["samples"]) == 3
    assert all(s["response"] and "prompt" in s for s in data["samples"])


def test_collapse_rollback_and_no_baseline(demo_assets, tmp_path, collapsed):
    overrides = {"trainer": {"val_before_train": False, "test_freq": 1},
                 "guardrails": {"min_distinct_ratio": 0.5, "collapse_action": "rollback", "max_rollbacks": 1}}
    reporter = RecordingReporter()
    with pytest.raises(Diverged) as err:
        run_ppo(_local(make_request(demo_assets, tmp_path, steps=2, overrides=overrides)), reporter)
    assert "collapsed" in str(err.value)
    assert [w["code"] for w in reporter.of("warning")] == ["rollback"]
    assert reporter.of("metrics") == []  # no step 0 without val_before_train, no step 1 (rolled back)


def test_entropy_floor(demo_assets, tmp_path):
    reporter, _ = _run(demo_assets, tmp_path, steps=1, validation=False,
                       overrides={"guardrails": {"min_entropy": 1e6}})
    warning, = reporter.of("warning")
    assert warning["code"] == "collapse" and "entropy" in warning["message"]
    assert warning["data"]["entropy"] == reporter.of("metrics")[0]["values"]["actor/entropy"]


def test_resume_checks_the_recorded_position(demo_assets, tmp_path):
    overrides = {"trainer": {"save_freq": 1}}
    _run(demo_assets, tmp_path / "a", steps=2, validation=False, overrides=overrides)
    checkpoint = tmp_path / "a" / "ckpt" / "step_1"
    resumed, _ = _run(demo_assets, tmp_path / "b", steps=2, validation=False, overrides=overrides,
                      resume_from=str(checkpoint))
    assert resumed.steps() == [2]
    assert any("continuing after step 1 at data position 1" in e["message"] for e in resumed.of("log"))
    extra = checkpoint / "actor" / "extra.json"
    state = json.loads(extra.read_text())
    for field, value in (("consumed", 2), ("step", 0)):  # a skipped batch; a step that is not the checkpoint's
        extra.write_text(json.dumps({**state, "trainer": {**state["trainer"], field: value}}))
        with pytest.raises(CheckpointError) as err:
            _run(demo_assets, tmp_path / f"c-{field}", steps=2, validation=False, overrides=overrides,
                 resume_from=str(checkpoint))
        assert err.value.code == "invalid_checkpoint" and err.value.param == "resume_from"
    extra.write_text(json.dumps({**state, "trainer": {**state["trainer"], "actor_updates": 3}}))
    with pytest.raises(CheckpointError, match="optimizer"):
        _run(demo_assets, tmp_path / "c-opt", steps=2, validation=False, overrides=overrides,
             resume_from=str(checkpoint))
    assert Path(extra).is_file()
