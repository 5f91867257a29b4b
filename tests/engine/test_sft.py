"""SFT on the demo arithmetic data: learning, exact resume, accumulation scaling, LoRA, data parallel."""

from __future__ import annotations

import itertools
import os
from types import SimpleNamespace

import pytest
import torch
from safetensors.torch import load_file

from engine.config import JobRequest, Resources, SFTConfig, build_config
from engine.errors import Cancelled, ConfigError
from engine.methods.sft import run_sft, sft_loss_sum
from engine.runtime.checkpoint import latest_checkpoint, load_extra
from engine.runtime.reporting import RecordingReporter
from engine.schedule import lr_factor


@pytest.fixture(autouse=True, scope="module")
def one_thread():
    before = torch.get_num_threads()
    torch.set_num_threads(1)  # shared CPUs; also keeps float results identical between runs
    yield
    torch.set_num_threads(before)


def sft_request(assets, tmp, *, steps=8, workers=1, config=None, **fields) -> JobRequest:
    cfg = {"data": {"train_batch_size": 16, "max_prompt_length": 32, "max_response_length": 32},
           "optim": {"lr": 3e-3}, "trainer": {"total_training_steps": steps}, "max_token_len_per_gpu": 256}
    for key, value in (config or {}).items():
        cfg[key] = {**cfg[key], **value} if isinstance(value, dict) and key in cfg else value
    return JobRequest(job_id="t", method="sft", config=build_config(SFTConfig, cfg), model_path=assets["model"],
                      training_file=assets["sft_train"], validation_file=assets["sft_val"],
                      output_dir=str(tmp / "out"), checkpoint_dir=str(tmp / "ckpt"), seed=7,
                      resources=Resources(num_workers=workers), **fields)


def test_sft_lowers_validation_loss(demo_assets, tmp_path):
    reporter = RecordingReporter()
    request = sft_request(demo_assets, tmp_path, steps=16, config={
        "optim": {"lr_warmup_steps_ratio": 0.25, "lr_scheduler_type": "cosine"},
        "trainer": {"test_freq": 2, "save_freq": 8}})
    result = run_sft(request, reporter)

    val = reporter.series("val/loss")
    assert len(val) == 8 and val[-1] < 0.6 * val[0]
    assert reporter.steps() == list(range(1, 17))
    for name in ("train/loss", "train/lr", "train/grad_norm", "perf/tokens_per_s", "perf/padding_efficiency"):
        assert len(reporter.series(name)) == 16, name
    lrs = reporter.series("train/lr")
    assert lrs[0] == pytest.approx(3e-3 / 4) and max(lrs) == pytest.approx(3e-3) and lrs[-1] < 1e-4
    assert [c["step"] for c in reporter.of("checkpoint")] == [8, 16]
    assert result.model_kind == "policy" and result.model_format == "hf"
    assert result.metrics["val/loss"] == val[-1]
    # Token accuracy rises with the loss falling, stays a share, and reaches the checkpoints' metrics.
    train_acc, val_acc = reporter.series("train/token_accuracy"), reporter.series("val/token_accuracy")
    assert len(train_acc) == 16 and len(val_acc) == 8
    assert all(0.0 <= a <= 1.0 for a in train_acc + val_acc)
    assert val_acc[-1] > val_acc[0] + 0.1 and train_acc[-1] > train_acc[0], (train_acc, val_acc)
    assert all({"train/token_accuracy", "val/token_accuracy"} <= set(c["metrics"]) for c in reporter.of("checkpoint"))
    assert sum(reporter.series("train/response_tokens")) > 0

    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(result.output_dir)
    assert sum(p.numel() for p in model.parameters()) > 0


class _NextToken(torch.nn.Module):
    """A "model" whose argmax after token t is t + 1 (mod the vocabulary)."""

    def forward(self, input_ids, attention_mask):
        return SimpleNamespace(logits=torch.nn.functional.one_hot((input_ids + 1) % 10, 10).float() * 4.0)


def test_token_accuracy_counts_argmax_hits_on_response_tokens_only():
    ids = torch.tensor([[1, 2, 3, 9, 5, 0], [4, 5, 7, 8, 0, 0]])
    mask = torch.tensor([[1, 1, 1, 1, 1, 0], [1, 1, 1, 1, 0, 0]])
    # Response targets: row 0 positions 2..4 (3 hit, 9 miss, 5 miss); row 1 positions 1..3 (5 hit, 7 miss, 8 hit).
    _, tokens, correct = sft_loss_sum(_NextToken(), ids, mask, torch.tensor([2, 1]))
    assert (int(tokens), int(correct)) == (6, 3)
    # A prompt covering the whole row: nothing counted.
    _, tokens, correct = sft_loss_sum(_NextToken(), ids, mask, torch.tensor([6, 6]))
    assert (int(tokens), int(correct)) == (0, 0)


def test_resume_after_cancel_is_exact(demo_assets, tmp_path):
    config = {"optim": {"lr_warmup_steps_ratio": 0.2, "lr_scheduler_type": "linear"},
              "trainer": {"save_freq": 3, "total_epochs": 1}}
    # 6 steps: the epoch has 360 // 16 = 22 steps, so only `total_training_steps` ends it.
    full = sft_request(demo_assets, tmp_path / "full", steps=6, config=config)
    run_sft(full, RecordingReporter())

    cut = sft_request(demo_assets, tmp_path / "cut", steps=6, config=config)
    stopped = RecordingReporter(stop_after_step=3)
    with pytest.raises(Cancelled) as info:
        run_sft(cut, stopped)
    assert info.value.code == "cancelled" and stopped.steps() == [1, 2, 3]
    assert not os.path.exists(cut.output_dir)
    assert latest_checkpoint(cut.checkpoint_dir).endswith("step_3")
    assert load_extra(latest_checkpoint(cut.checkpoint_dir))["step"] == 3

    resumed = RecordingReporter()
    import dataclasses

    run_sft(dataclasses.replace(cut, resume_from=cut.checkpoint_dir), resumed)
    assert resumed.steps() == [4, 5, 6]

    a = load_file(os.path.join(full.output_dir, "model.safetensors"))
    b = load_file(os.path.join(cut.output_dir, "model.safetensors"))
    assert a.keys() == b.keys()
    for key in a:
        assert torch.equal(a[key], b[key]), key


def test_grad_accumulation_scales_by_tokens(demo_assets, tmp_path):
    """Micro-batches of 1 row (accumulated) and one micro-batch of 16 rows give the same steps:
    the loss is a token mean over the whole step however it is cut."""
    curves = []
    for i, config in enumerate(({"use_dynamic_bsz": False, "micro_batch_size_per_gpu": 1},
                                {"use_dynamic_bsz": False, "micro_batch_size_per_gpu": 16},
                                {"use_dynamic_bsz": True, "max_token_len_per_gpu": 64})):
        reporter = RecordingReporter()
        run_sft(sft_request(demo_assets, tmp_path / str(i), steps=4, config=config), reporter)
        curves.append(reporter.series("train/loss") + reporter.series("val/loss"))
    assert curves[0] == pytest.approx(curves[1], rel=1e-5)
    assert curves[0] == pytest.approx(curves[2], rel=1e-5)


def test_lora_sft_saves_merged_model_and_adapter(demo_assets, tmp_path):
    reporter = RecordingReporter()
    result = run_sft(sft_request(demo_assets, tmp_path, steps=3, config={
        "model": {"lora_rank": 4, "lora_alpha": 8}, "optim": {"lr": 1e-2}}), reporter)
    assert result.model_format == "lora"
    assert os.path.isfile(os.path.join(result.output_dir, "adapter", "adapter_model.safetensors"))
    saved = load_file(os.path.join(latest_checkpoint(tmp_path / "ckpt"), "model.safetensors"))
    assert saved and all("lora_" in key for key in saved)  # only the adapter is checkpointed
    assert reporter.series("train/loss")[-1] < reporter.series("train/loss")[0]


def test_wrong_config_type_is_refused(demo_assets, tmp_path):
    import dataclasses

    from engine.config import RewardModelConfig

    request = dataclasses.replace(sft_request(demo_assets, tmp_path), config=RewardModelConfig())
    with pytest.raises(ConfigError):
        run_sft(request, RecordingReporter())


def test_lr_schedule_shapes():
    kw = {"total_steps": 10, "warmup": 2, "min_lr_ratio": 0.1}
    assert [lr_factor(s, kind="constant", **kw) for s in (0, 1, 5)] == [0.5, 1.0, 1.0]
    cosine = [lr_factor(s, kind="cosine", **kw) for s in range(10)]
    assert cosine[2] == 1.0 and all(a >= b for a, b in itertools.pairwise(cosine[2:])) and cosine[-1] > 0.1
    assert lr_factor(6, kind="linear", **kw) == pytest.approx(0.1 + 0.9 * 0.5)


@pytest.mark.slow
def test_one_and_two_workers_match(demo_assets, ray_local, tmp_path):
    """The 2-worker run (two Ray actors, gloo all-reduce) follows the 1-worker loss curve."""
    curves = {}
    for workers in (1, 2):
        reporter = RecordingReporter()
        run_sft(sft_request(demo_assets, tmp_path / str(workers), steps=6, workers=workers,
                            config={"trainer": {"test_freq": 3}}), reporter)
        assert f"{workers} worker(s)" in " ".join(e["message"] for e in reporter.of("log"))
        curves[workers] = reporter.series("train/loss") + reporter.series("val/loss")
    assert len(curves[1]) == 8
    assert curves[2] == pytest.approx(curves[1], rel=1e-5, abs=1e-6)


@pytest.mark.slow
def test_worker_errors_surface_as_themselves(demo_assets, ray_local, tmp_path):
    """An `EngineError` raised inside the Ray actors reaches the caller unwrapped, with its code."""
    import dataclasses

    from engine.errors import DataError

    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"prompt": "hi"}\n')  # no `response` column
    request = dataclasses.replace(sft_request(demo_assets, tmp_path, workers=2), training_file=str(bad))
    with pytest.raises(DataError) as info:
        run_sft(request, RecordingReporter())
    assert info.value.param == "response" and info.value.data == {"row": 0}
