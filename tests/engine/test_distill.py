"""Reward-model distillation: a demo RM as teacher, the smaller demo Llama as LoRA student."""

from __future__ import annotations

import dataclasses
import os

import pytest
import torch

from engine import models
from engine.config import JobRequest, RewardModelConfig, RMDistillConfig, build_config
from engine.errors import GateFailed
from engine.methods.reward_model import run_reward_model
from engine.methods.rm_distill import TEACHER_SCORES, bernoulli_kl, run_rm_distill
from engine.runtime.reporting import RecordingReporter

pytestmark = pytest.mark.usefixtures("one_thread")  # torch on one thread (tests/engine/conftest.py)


@pytest.fixture(scope="module")
def teacher(demo_assets, tmp_path_factory) -> str:
    """A Bradley-Terry reward model on the base demo Llama (held-out accuracy ~1)."""
    tmp = tmp_path_factory.mktemp("teacher")
    cfg = build_config(RewardModelConfig, {
        "data": {"train_batch_size": 16, "max_length": 96}, "max_token_len_per_gpu": 1024,
        "optim": {"lr": 1e-3, "lr_warmup_steps_ratio": 0.1, "lr_scheduler_type": "cosine"},
        "trainer": {"total_training_steps": 12}})
    request = JobRequest(job_id="teacher", method="reward_model", config=cfg, model_path=demo_assets["model"],
                         training_file=demo_assets["preference_train"],
                         validation_file=demo_assets["preference_val"],
                         output_dir=str(tmp / "out"), checkpoint_dir=str(tmp / "ckpt"))
    result = run_reward_model(request, RecordingReporter())
    assert result.metrics["val/rm/accuracy"] >= 0.9
    return result.output_dir


def distill_request(assets, teacher_dir, tmp, *, steps=24, config=None) -> JobRequest:
    cfg = {"data": {"train_batch_size": 16, "max_length": 96}, "max_token_len_per_gpu": 1024,
           "optim": {"lr": 3e-3, "lr_warmup_steps_ratio": 0.1, "lr_scheduler_type": "cosine"},
           "trainer": {"total_training_steps": steps}}
    for key, value in (config or {}).items():
        cfg[key] = {**cfg[key], **value} if isinstance(value, dict) and key in cfg else value
    return JobRequest(job_id="distill", method="rm_distill", config=build_config(RMDistillConfig, cfg),
                      model_path=assets["small_model"], teacher_path=teacher_dir,
                      training_file=assets["preference_train"], validation_file=assets["preference_val"],
                      output_dir=str(tmp / "out"), checkpoint_dir=str(tmp / "ckpt"), seed=11)


def _count_teacher_loads(monkeypatch, teacher_dir) -> list[str]:
    loads: list[str] = []
    real = models.load_reward_model

    def counting(path, *args, **kwargs):
        if path == teacher_dir:
            loads.append(path)
        return real(path, *args, **kwargs)

    monkeypatch.setattr(models, "load_reward_model", counting)
    return loads


def test_distilled_student_passes_the_gate(demo_assets, teacher, tmp_path, monkeypatch):
    teacher_loads = _count_teacher_loads(monkeypatch, teacher)
    reporter = RecordingReporter()
    # 24 steps of 32 pairs over 400 pairs (12 steps an epoch): two epochs, the teacher scored once.
    request = distill_request(demo_assets, teacher, tmp_path, steps=24,
                              config={"data": {"train_batch_size": 32}, "trainer": {"test_freq": 12}})
    result = run_rm_distill(request, reporter)

    assert result.model_kind == "reward_model" and result.model_format == "lora"  # LoRA by default
    assert result.metrics["distill/val_kl"] < 0.05
    assert result.metrics["distill/agreement"] >= 0.95
    assert len(reporter.series("distill/val_kl")) == 2 and len(reporter.series("distill/kl")) == 24
    assert {e["epoch"] for e in reporter.of("metrics")} == {1, 2}
    assert teacher_loads == [teacher]
    assert os.path.isfile(os.path.join(request.checkpoint_dir, TEACHER_SCORES))

    from transformers import AutoModelForSequenceClassification

    student = AutoModelForSequenceClassification.from_pretrained(result.output_dir)
    assert models.count_parameters(student) < models.count_parameters(teacher)

    # A second job over the same data and teacher reuses the cached scores.
    again = RecordingReporter()
    run_rm_distill(dataclasses.replace(request, output_dir=str(tmp_path / "out2"),
                                       config=dataclasses.replace(request.config, loss="mse")), again)
    assert teacher_loads == [teacher]
    assert any("reusing the teacher scores" in e["message"] for e in again.of("log"))
    assert again.series("distill/val_kl")[-1] < 0.05


def test_crippled_student_fails_the_gate(demo_assets, teacher, tmp_path):
    request = distill_request(demo_assets, teacher, tmp_path, steps=1,
                              config={"model": {"lora_rank": 1}, "optim": {"lr": 1e-4}})
    with pytest.raises(GateFailed) as info:
        run_rm_distill(request, RecordingReporter())
    err = info.value
    assert err.code == "distill_gate" and err.user_error
    assert err.data["val_kl"] > 0.05 and err.data["gate_kl"] == 0.05
    assert "0.05" in err.message and f"{err.data['val_kl']:.4f}" in err.message
    assert not os.path.exists(request.output_dir)  # a failed student is not published


def test_bernoulli_kl():
    t = torch.tensor([0.0, 2.0, -3.0, 30.0])
    assert bernoulli_kl(t, t).abs().max() < 1e-6
    s = torch.tensor([1.0, -1.0, 0.0, 5.0])
    p, q = torch.sigmoid(t.double()), torch.sigmoid(s.double())
    direct = p * (p / q).log() + (1 - p) * ((1 - p) / (1 - q)).log()
    assert bernoulli_kl(t, s).double().tolist() == pytest.approx(direct.tolist(), rel=1e-4, abs=1e-6)
    assert (bernoulli_kl(t, s) >= 0).all()


def test_teacher_cache_key_follows_the_teachers_content(demo_assets, teacher, tmp_path):
    """Retrained teacher weights keep their file names and sizes: the cached scores must not be reused."""
    import shutil

    from engine.methods.rm_distill import _teacher_fingerprint

    copy = tmp_path / "teacher"
    shutil.copytree(teacher, copy)
    request = dataclasses.replace(distill_request(demo_assets, str(copy), tmp_path), teacher_path=str(copy))
    before = _teacher_fingerprint(request)
    assert _teacher_fingerprint(request) == before
    weights = next(copy.glob("*.safetensors"))
    data = bytearray(weights.read_bytes())
    data[-1] ^= 0xFF  # one byte of the last tensor: same size, other weights
    weights.write_bytes(bytes(data))
    assert _teacher_fingerprint(request) != before
