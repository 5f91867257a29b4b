"""Bradley-Terry reward models on the demo preference pairs."""

from __future__ import annotations

import dataclasses
import json
import math
import os

import pytest
import torch

from engine.config import JobRequest, Resources, RewardModelConfig, build_config
from engine.methods.reward_model import bradley_terry_loss, run_reward_model
from engine.runtime.reporting import RecordingReporter

pytestmark = pytest.mark.usefixtures("one_thread")  # torch on one thread (tests/engine/conftest.py)


def rm_request(assets, tmp, *, steps=12, workers=1, config=None, **fields) -> JobRequest:
    cfg = {"data": {"train_batch_size": 16, "max_length": 96},
           "optim": {"lr": 1e-3, "lr_warmup_steps_ratio": 0.1, "lr_scheduler_type": "cosine"},
           "trainer": {"total_training_steps": steps}, "max_token_len_per_gpu": 1024}
    for key, value in (config or {}).items():
        cfg[key] = {**cfg[key], **value} if isinstance(value, dict) and key in cfg else value
    fields.setdefault("validation_file", assets["preference_val"])
    return JobRequest(job_id="rm", method="reward_model", config=build_config(RewardModelConfig, cfg),
                      model_path=assets["model"], training_file=assets["preference_train"],
                      output_dir=str(tmp / "out"), checkpoint_dir=str(tmp / "ckpt"), seed=3,
                      resources=Resources(num_workers=workers), **fields)


@pytest.fixture(scope="module")
def trained_rm(demo_assets, tmp_path_factory):
    reporter = RecordingReporter()
    request = rm_request(demo_assets, tmp_path_factory.mktemp("rm"), config={"trainer": {"test_freq": 4}})
    return request, reporter, run_reward_model(request, reporter)


def test_reward_model_reaches_accuracy(trained_rm):
    _, reporter, result = trained_rm
    assert result.model_kind == "reward_model" and result.model_format == "hf"
    assert reporter.series("val/rm/accuracy")[-1] >= 0.9
    assert result.metrics["val/rm/accuracy"] >= 0.9 and result.metrics["val/rm/loss"] < 0.3
    assert len(reporter.series("val/rm/loss")) == 3  # test_freq=4 over 12 steps
    for name in ("rm/loss", "rm/accuracy", "rm/margin_mean", "rm/chosen_mean", "rm/rejected_mean",
                 "train/lr", "train/grad_norm", "perf/padding_efficiency"):
        assert len(reporter.series(name)) == 12, name
    assert reporter.series("rm/loss")[-1] < reporter.series("rm/loss")[0]


def test_saved_reward_model_ranks_held_out_pairs(trained_rm, demo_assets):
    """Loaded with plain transformers (no Keel code), the model prefers the chosen answers."""
    from transformers import AutoModelForSequenceClassification, AutoTokenizer

    from engine.data import load_rows

    _, _, result = trained_rm
    model = AutoModelForSequenceClassification.from_pretrained(result.output_dir).eval()
    tokenizer = AutoTokenizer.from_pretrained(result.output_dir)
    rows = load_rows(demo_assets["preference_val"], "preference")[:40]

    def texts(column):
        return [tokenizer.apply_chat_template([{"role": "user", "content": r["prompt"]},
                                               {"role": "assistant", "content": r[column]}], tokenize=False)
                for r in rows]

    with torch.no_grad():
        scores = {c: model(**tokenizer(texts(c), add_special_tokens=False, padding=True,
                                      return_tensors="pt")).logits.squeeze(-1) for c in ("chosen", "rejected")}
    assert (scores["chosen"] > scores["rejected"]).float().mean() >= 0.9


def test_margin_and_centering_enter_the_loss():
    chosen, rejected = torch.tensor([2.0, 0.5]), torch.tensor([1.0, 1.0])
    plain = bradley_terry_loss(chosen, rejected)
    assert plain.tolist() == pytest.approx([math.log1p(math.exp(-1.0)), math.log1p(math.exp(0.5))])
    with_margin = bradley_terry_loss(chosen, rejected, torch.tensor([1.0, 0.0]))
    assert with_margin[0] == pytest.approx(math.log(2.0)) and with_margin[1] == plain[1]
    centred = bradley_terry_loss(chosen, rejected, center_coef=0.1)
    assert (centred - plain).tolist() == pytest.approx([0.1 * 9.0, 0.1 * 2.25])


def test_margin_column_lora_and_holdout(demo_assets, tmp_path):
    """A JSON Lines file with a `margin` column, no validation file (a seeded 10% is held out),
    LoRA with the score head trained, centring on: trains and saves merged model + adapter."""
    from engine.data import load_rows

    rows = load_rows(demo_assets["preference_train"], "preference")[:120]
    path = tmp_path / "pairs.jsonl"
    path.write_text("".join(json.dumps({**r, "margin": 0.5 * (i % 3)}) + "\n" for i, r in enumerate(rows)))
    reporter = RecordingReporter()
    request = dataclasses.replace(
        rm_request(demo_assets, tmp_path, steps=6, validation_file=None,
                   config={"model": {"lora_rank": 8, "lora_alpha": 16}, "optim": {"lr": 5e-3},
                           "center_rewards_coefficient": 0.01}),
        training_file=str(path))
    result = run_reward_model(request, reporter)
    assert result.model_format == "lora"
    assert os.path.isfile(os.path.join(result.output_dir, "adapter", "adapter_model.safetensors"))
    assert "108 train / 12 val" in " ".join(e["message"] for e in reporter.of("log"))
    assert reporter.series("rm/loss")[-1] < reporter.series("rm/loss")[0]
    assert "val/rm/accuracy" in result.metrics


@pytest.mark.slow
def test_reward_model_one_and_two_workers_match(demo_assets, ray_local, tmp_path):
    curves = {}
    for workers in (1, 2):
        reporter = RecordingReporter()
        run_reward_model(rm_request(demo_assets, tmp_path / str(workers), steps=3, workers=workers,
                                    config={"data": {"train_batch_size": 8}}), reporter)
        curves[workers] = reporter.series("rm/loss") + reporter.series("val/rm/loss")
    assert curves[2] == pytest.approx(curves[1], rel=1e-4, abs=1e-6)


def test_length_groups_cover_every_index_and_cut_padding():
    from engine.data import length_groups

    lengths = [400, 12, 380, 20, 15, 390, 30, 25]
    groups = length_groups(lengths, overhead=128)
    assert sorted(i for g in groups for i in g) == list(range(len(lengths)))
    computed = sum(len(g) * max(lengths[i] for i in g) + 128 for g in groups)
    assert computed < len(lengths) * max(lengths) + 128  # better than one padded forward
    assert len(groups) == 2 and {lengths[i] for i in groups[-1]} == {380, 390, 400}
    assert length_groups([7] * 5) == [[0, 1, 2, 3, 4]]
    assert length_groups([]) == []
    assert len(length_groups(lengths, overhead=10**6)) == 1  # forwards so costly that one wins


def test_grouped_scores_match_one_padded_forward(demo_assets, tmp_path):
    """Scoring a micro-batch's 2n sequences in length groups gives the same loss and gradient as
    padding all of them into one forward."""
    from engine import data as data_lib
    from engine import models
    from engine.methods.reward_model import RewardModelTask

    torch.manual_seed(0)
    request = rm_request(demo_assets, tmp_path)
    task = RewardModelTask(request, torch.device("cpu"))
    model, _ = task.load_model()
    model.eval()  # no dropout: both computations see the same function
    base = [3, 5, 7, 11, 13]
    pairs = [data_lib.PairExample(chosen_ids=[base[k % 5] + j for j in range(4 + 37 * (k % 3))],
                                  rejected_ids=[base[(k + 2) % 5] + j for j in range(3 + 5 * k)], margin=0.0)
             for k in range(6)]

    def loss_and_grads(scores_fn):
        model.zero_grad(set_to_none=True)
        chosen, rejected, real, computed = scores_fn(model, pairs)
        loss = bradley_terry_loss(chosen, rejected, center_coef=0.01).sum()
        loss.backward()
        grads = {n: p.grad.clone() for n, p in model.named_parameters() if p.grad is not None}
        return loss.detach(), chosen.detach(), rejected.detach(), grads, real, computed

    def one_forward(model, pairs):
        ids, mask = data_lib.pad([p.chosen_ids for p in pairs] + [p.rejected_ids for p in pairs], task.pad_id)
        scores = models.reward_scores(model, ids, mask)
        return scores[:len(pairs)], scores[len(pairs):], float(mask.sum()), float(mask.numel())

    task.group_overhead = 0  # force several groups on these short sequences
    grouped = loss_and_grads(task._scores)
    single = loss_and_grads(one_forward)
    torch.testing.assert_close(grouped[0], single[0], rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(grouped[1], single[1], rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(grouped[2], single[2], rtol=1e-5, atol=1e-5)
    assert grouped[3].keys() == single[3].keys() and grouped[3]
    for name in single[3]:
        torch.testing.assert_close(grouped[3][name], single[3][name], rtol=1e-4, atol=1e-6, msg=name)
    assert grouped[4] == single[4]  # same real tokens
    lengths = [len(p.chosen_ids) for p in pairs] + [len(p.rejected_ids) for p in pairs]
    groups = data_lib.length_groups(lengths, 0)
    assert len(groups) > 1
    assert grouped[5] == sum(len(g) * max(lengths[i] for i in g) for g in groups) < single[5]
