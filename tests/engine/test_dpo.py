"""DPO / cDPO / IPO on the demo preference pairs: the policy's held-out preference measured outside
Keel, the knobs, the reference cache, exact resume, packing, LoRA and data parallelism."""

from __future__ import annotations

import dataclasses
import math
import os
import shutil

import pytest
import torch
from safetensors import safe_open
from safetensors.torch import load_file, save_file

from engine import data as data_lib
from engine import models
from engine.config import DPOConfig, JobRequest, ModelConfig, Resources, build_config
from engine.errors import Cancelled, ConfigError
from engine.methods.dpo import REFERENCE_LOGPS, read_reference_logps, response_log_probs, run_dpo
from engine.runtime.checkpoint import latest_checkpoint
from engine.runtime.reporting import RecordingReporter

METRICS = ("rewards/chosen", "rewards/rejected", "rewards/accuracies", "rewards/margins", "logps/chosen",
           "logps/rejected")


@pytest.fixture(autouse=True, scope="module")
def one_thread():
    before = torch.get_num_threads()
    torch.set_num_threads(1)  # shared CPUs; also keeps float results identical between runs
    yield
    torch.set_num_threads(before)


def dpo_request(assets, tmp, *, steps=8, workers=1, config=None, model=None, **fields) -> JobRequest:
    cfg = {"data": {"train_batch_size": 16, "max_length": 96}, "max_token_len_per_gpu": 1024,
           "optim": {"lr": 1e-3}, "trainer": {"total_training_steps": steps}}
    for key, value in (config or {}).items():
        cfg[key] = {**cfg[key], **value} if isinstance(value, dict) and key in cfg else value
    fields.setdefault("validation_file", assets["preference_val"])
    return JobRequest(job_id="dpo", method="dpo", config=build_config(DPOConfig, cfg),
                      model_path=model or assets["model"], training_file=assets["preference_train"],
                      output_dir=str(tmp / "out"), checkpoint_dir=str(tmp / "ckpt"), seed=5,
                      resources=Resources(num_workers=workers), **fields)


# --- measured outside Keel: plain transformers, manual log-prob sums ------------------------------------

def held_out_margins(model, tokenizer, rows) -> torch.Tensor:
    """log p(chosen | prompt) - log p(rejected | prompt) per row, summed over the response tokens
    (response text + EOS after the chat-formatted prompt)."""
    margins = []
    with torch.no_grad():
        for r in rows:
            prompt = tokenizer.apply_chat_template([{"role": "user", "content": r["prompt"]}],
                                                   add_generation_prompt=True, tokenize=False)
            prompt_ids = tokenizer(prompt, add_special_tokens=False)["input_ids"]
            logps = []
            for column in ("chosen", "rejected"):
                response = tokenizer(r[column], add_special_tokens=False)["input_ids"] + [tokenizer.eos_token_id]
                ids = torch.tensor([prompt_ids + response])
                log_softmax = torch.log_softmax(model(input_ids=ids).logits[0].float(), -1)
                logps.append(sum(log_softmax[len(prompt_ids) + k - 1, tok].item() for k, tok in enumerate(response)))
            margins.append(logps[0] - logps[1])
    return torch.tensor(margins)


@pytest.fixture(scope="module")
def held_out(demo_assets):
    from transformers import AutoModelForCausalLM, AutoTokenizer

    rows = data_lib.load_rows(demo_assets["preference_val"], "preference")[:30]
    tokenizer = AutoTokenizer.from_pretrained(demo_assets["model"])
    base = AutoModelForCausalLM.from_pretrained(demo_assets["model"]).eval()
    return rows, tokenizer, held_out_margins(base, tokenizer, rows)


@pytest.fixture(scope="module")
def trained(demo_assets, tmp_path_factory):
    reporter = RecordingReporter()
    request = dpo_request(demo_assets, tmp_path_factory.mktemp("dpo"), config={"trainer": {"test_freq": 4}})
    return request, reporter, run_dpo(request, reporter)


def test_dpo_raises_the_held_out_margin_over_the_base_model(trained, held_out):
    from transformers import AutoModelForCausalLM

    request, reporter, result = trained
    assert result.model_kind == "policy" and result.model_format == "hf"
    rows, tokenizer, base_margins = held_out
    policy = AutoModelForCausalLM.from_pretrained(result.output_dir).eval()
    margins = held_out_margins(policy, tokenizer, rows)
    assert (margins > base_margins).float().mean() >= 0.9
    assert (margins - base_margins).mean() > 10.0, (margins.mean(), base_margins.mean())

    # Step 1: the policy is the reference, so every implicit reward is 0 and the loss is log 2.
    # (Up to float rounding: the reference ran over other micro-batches than the policy.)
    first = reporter.of("metrics")[0]["values"]
    assert first["train/loss"] == pytest.approx(math.log(2.0), abs=1e-5)
    assert abs(first["rewards/chosen"]) < 1e-5 and abs(first["rewards/margins"]) < 1e-5
    for name in (*METRICS, "train/loss", "train/lr", "train/grad_norm", "perf/padding_efficiency"):
        assert len(reporter.series(name)) == 8, name
    for name in (*METRICS, "loss"):
        assert len(reporter.series("val/" + name)) == 2, name  # test_freq 4 over 8 steps
    assert reporter.series("val/loss")[-1] < 0.1 and reporter.series("val/rewards/accuracies")[-1] >= 0.95
    assert reporter.series("val/rewards/margins")[-1] > reporter.series("val/rewards/margins")[0] > 0
    assert result.metrics["val/rewards/accuracies"] == reporter.series("val/rewards/accuracies")[-1]
    assert os.path.isfile(os.path.join(request.checkpoint_dir, REFERENCE_LOGPS))


def test_lora_dpo_adapter_raises_the_margin_through_peft(demo_assets, held_out, tmp_path):
    from peft import PeftModel
    from transformers import AutoModelForCausalLM

    result = run_dpo(dpo_request(demo_assets, tmp_path, steps=6, config={
        "model": {"lora_rank": 8, "lora_alpha": 16}, "optim": {"lr": 1e-2}}), RecordingReporter())
    assert result.model_format == "lora" and result.model_kind == "policy"
    saved = load_file(os.path.join(latest_checkpoint(tmp_path / "ckpt"), "model.safetensors"))
    assert saved and all("lora_" in key for key in saved)  # only the adapter is trained and checkpointed
    rows, tokenizer, base_margins = held_out
    base = AutoModelForCausalLM.from_pretrained(demo_assets["model"])
    policy = PeftModel.from_pretrained(base, os.path.join(result.output_dir, "adapter")).eval()
    margins = held_out_margins(policy, tokenizer, rows)
    assert (margins > base_margins).float().mean() >= 0.9
    assert (margins - base_margins).mean() > 5.0, (margins.mean(), base_margins.mean())


# --- the knobs ------------------------------------------------------------------------------------------

def _losses(assets, tmp, **knobs) -> tuple[list[float], RecordingReporter]:
    reporter = RecordingReporter()
    run_dpo(dpo_request(assets, tmp, steps=3, config={"data": {"train_batch_size": 8}, **knobs}, validation_file=None),
            reporter)
    return reporter.series("train/loss"), reporter


def test_loss_type_label_smoothing_and_beta_change_the_loss(demo_assets, tmp_path):
    dpo, dpo_run = _losses(demo_assets, tmp_path / "dpo")
    ipo, ipo_run = _losses(demo_assets, tmp_path / "ipo", loss_type="ipo", beta=0.25)
    smoothed, _ = _losses(demo_assets, tmp_path / "cdpo", label_smoothing=0.3)
    sharper, _ = _losses(demo_assets, tmp_path / "beta", beta=1.0)
    assert dpo[0] == pytest.approx(math.log(2.0), abs=1e-5)
    # IPO at the reference: h = 0, so (0 - 1/(2 beta))^2 = 4 with beta 0.25.
    assert ipo[0] == pytest.approx(4.0, abs=1e-5)
    assert ipo[-1] < ipo[0]
    # IPO's log-probs are per-token means; DPO's are sums over dozens of tokens.
    assert -10.0 < ipo_run.series("logps/chosen")[0] < 0.0 < -50.0 - dpo_run.series("logps/chosen")[0]
    # cDPO and beta: the same log 2 at the reference, different losses once the policy moved.
    assert smoothed[0] == pytest.approx(dpo[0], abs=1e-5) and sharper[0] == pytest.approx(dpo[0], abs=1e-5)
    assert abs(smoothed[1] - dpo[1]) > 1e-3 and abs(sharper[1] - dpo[1]) > 1e-3
    assert smoothed[-1] > dpo[-1]  # the smoothed loss never reaches 0: it hedges against flipped labels


@pytest.mark.parametrize(("knobs", "param"), [
    ({"beta": 0.0}, "beta"), ({"beta": -0.1}, "beta"), ({"loss_type": "hinge"}, "loss_type"),
    ({"label_smoothing": 0.5}, "label_smoothing"), ({"loss_type": "ipo", "label_smoothing": 0.1}, "label_smoothing"),
])
def test_bad_knobs_are_refused_by_engine_and_api_at_the_same_path(knobs, param):
    from pydantic import ValidationError

    from api.schemas.hyperparameters import DPOConfig as ApiDPOConfig

    with pytest.raises(ConfigError) as engine_error:
        build_config(DPOConfig, knobs)
    assert engine_error.value.param == param
    with pytest.raises(ValidationError) as api_error:
        ApiDPOConfig.model_validate(knobs)
    assert api_error.value.errors()[0]["loc"] == (param,)


# --- the reference cache ----------------------------------------------------------------------------------

def _count_reference_loads(monkeypatch) -> list[str]:
    loads: list[str] = []
    real = models.load_reference

    def counting(path, cfg):
        loads.append(path)
        return real(path, cfg)

    monkeypatch.setattr(models, "load_reference", counting)
    return loads


def _perturb_weights_keeping_the_size(model_dir: str) -> None:
    path = os.path.join(model_dir, "model.safetensors")
    size = os.path.getsize(path)
    with safe_open(path, "pt") as f:
        metadata = f.metadata()
    tensors = load_file(path)
    name = next(k for k in sorted(tensors) if "q_proj" in k)
    tensors[name] = tensors[name] * 1.5
    save_file(tensors, path, metadata=metadata)
    assert os.path.getsize(path) == size


def test_reference_cache_hits_for_the_same_reference_and_misses_for_changed_weights(demo_assets, tmp_path,
                                                                                    monkeypatch):
    model = tmp_path / "model"
    shutil.copytree(demo_assets["model"], model)
    loads = _count_reference_loads(monkeypatch)
    request = dpo_request(demo_assets, tmp_path, steps=1, model=str(model), config={"data": {"train_batch_size": 8}})
    cache = os.path.join(request.checkpoint_dir, REFERENCE_LOGPS)

    first = RecordingReporter()
    run_dpo(request, first)
    assert loads == [str(model)]
    assert any("computed the reference log-probs of 500 pairs" in e["message"] for e in first.of("log"))
    _, before = read_reference_logps(cache)
    assert len(before["train"][0]) == 400 and len(before["val"][0]) == 100
    assert (before["train"][0] < 0).all() and (before["val"][1] < 0).all()

    again = RecordingReporter()
    run_dpo(dataclasses.replace(request, output_dir=str(tmp_path / "out2")), again)
    assert loads == [str(model)]  # not loaded again
    assert any("reusing the reference log-probs" in e["message"] for e in again.of("log"))
    assert again.series("train/loss") == first.series("train/loss")

    _perturb_weights_keeping_the_size(str(model))
    changed = RecordingReporter()
    run_dpo(dataclasses.replace(request, output_dir=str(tmp_path / "out3")), changed)
    assert loads == [str(model), str(model)]
    assert any("computed the reference log-probs" in e["message"] for e in changed.of("log"))
    _, after = read_reference_logps(cache)
    assert not (after["train"][0] == before["train"][0]).any()


# --- the loop: exact resume, packing, data parallel ------------------------------------------------------

def test_resume_after_cancel_is_exact(demo_assets, tmp_path):
    config = {"optim": {"lr_warmup_steps_ratio": 0.2, "lr_scheduler_type": "linear"}, "trainer": {"save_freq": 3}}
    full = dpo_request(demo_assets, tmp_path / "full", steps=6, config=config)
    run_dpo(full, RecordingReporter())

    cut = dpo_request(demo_assets, tmp_path / "cut", steps=6, config=config)
    stopped = RecordingReporter(stop_after_step=3)
    with pytest.raises(Cancelled):
        run_dpo(cut, stopped)
    assert stopped.steps() == [1, 2, 3] and not os.path.exists(cut.output_dir)
    resumed = RecordingReporter()
    run_dpo(dataclasses.replace(cut, resume_from=cut.checkpoint_dir), resumed)
    assert resumed.steps() == [4, 5, 6]
    assert any("reusing the reference log-probs" in e["message"] for e in resumed.of("log"))

    a = load_file(os.path.join(full.output_dir, "model.safetensors"))
    b = load_file(os.path.join(cut.output_dir, "model.safetensors"))
    assert a.keys() == b.keys()
    for key in a:
        assert torch.equal(a[key], b[key]), key


def test_packed_and_padded_runs_match(demo_assets, tmp_path):
    curves, efficiency = {}, {}
    for packed in (True, False):
        reporter = RecordingReporter()
        run_dpo(dpo_request(demo_assets, tmp_path / str(packed), steps=3, config={
            "model": {"use_remove_padding": packed}, "trainer": {"test_freq": 3}}), reporter)
        curves[packed] = [reporter.series(n) for n in ("train/loss", "rewards/margins", "val/loss", "logps/chosen")]
        efficiency[packed] = reporter.series("perf/padding_efficiency")
    for packed_series, padded_series in zip(curves[True], curves[False]):
        assert packed_series == pytest.approx(padded_series, rel=1e-4, abs=1e-4)
    assert efficiency[True] == [1.0, 1.0, 1.0] and max(efficiency[False]) < 0.99


@pytest.mark.parametrize("packed", [True, False])
def test_response_log_probs_mask_the_prompt(demo_assets, packed):
    """Against a plain full forward: only tokens at `t >= max(prompt_len, 1)` count."""
    model = models.load_policy(demo_assets["model"], ModelConfig(use_remove_padding=packed), trainable=False)
    plain = models.load_policy(demo_assets["model"], ModelConfig(use_remove_padding=False), trainable=False)
    seqs = [[1, 5, 9, 14, 3, 2], [1, 7, 2], [4, 8, 15, 16, 23, 42, 2, 9, 11]]
    prompt_lens = [3, 1, 0]
    ids, mask = data_lib.pad(seqs, 0)
    with torch.no_grad():
        sums, counts = response_log_probs(model, ids, mask, torch.tensor(prompt_lens))
        expected = []
        for seq, p in zip(seqs, prompt_lens):
            log_softmax = torch.log_softmax(plain(input_ids=torch.tensor([seq])).logits[0], -1)
            expected.append(sum(log_softmax[t - 1, seq[t]].item() for t in range(max(p, 1), len(seq))))
    assert counts.tolist() == [3, 2, 8]
    assert sums.tolist() == pytest.approx(expected, rel=1e-5, abs=1e-5)


def test_pair_prompt_lengths_follow_truncation(demo_assets):
    tokenizer = models.load_tokenizer(demo_assets["model"])
    row = {"prompt": "How do I bake bread?", "chosen": "Sure, happy to help! Mix flour and water.",
           "rejected": "No."}
    prompt = len(data_lib.prompt_token_ids(tokenizer, row["prompt"]))
    full = data_lib.tokenize_preference([row], tokenizer, 512, "error")[0]
    assert full.chosen_prompt_len == full.rejected_prompt_len == prompt
    limit = len(full.chosen_ids) - 2
    left = data_lib.tokenize_preference([row], tokenizer, limit, "left")[0]
    assert left.chosen_prompt_len == prompt - 2 and left.rejected_prompt_len == prompt  # rejected fits
    assert left.chosen_ids[left.chosen_prompt_len:] == full.chosen_ids[prompt:]
    right = data_lib.tokenize_preference([row], tokenizer, prompt - 1, "right")[0]
    assert right.chosen_prompt_len == prompt - 1 == len(right.chosen_ids)  # no response left


@pytest.mark.slow
def test_one_and_two_workers_match(demo_assets, ray_local, tmp_path):
    """Two Ray actors (gloo all-reduce; rank 0 computes the reference cache), replicated (ddp) or
    sharded (fsdp2), follow the 1-worker run."""
    curves = {}
    for workers, strategy in ((1, "ddp"), (2, "ddp"), (2, "fsdp2")):
        reporter = RecordingReporter()
        run_dpo(dpo_request(demo_assets, tmp_path / f"{workers}-{strategy}", steps=4, workers=workers,
                            config={"trainer": {"test_freq": 2}, "model": {"strategy": strategy}}), reporter)
        assert f"{workers} worker(s)" in " ".join(e["message"] for e in reporter.of("log"))
        curves[workers, strategy] = [v for n in ("train/loss", "rewards/margins", "val/loss", "val/rewards/accuracies")
                                     for v in reporter.series(n)]
    assert len(curves[1, "ddp"]) == 12
    assert curves[2, "ddp"] == pytest.approx(curves[1, "ddp"], rel=1e-4, abs=1e-5)
    assert curves[2, "fsdp2"] == pytest.approx(curves[1, "ddp"], rel=1e-4, abs=1e-5)
