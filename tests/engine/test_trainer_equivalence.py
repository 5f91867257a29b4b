"""Interactive trainers reproduce Keel's jobs: an SFT loop of `forward_backward(cross_entropy)` +
`optim_step` equals an `sft` job, and a `dpo` loop equals a `dpo` job (same seed, same data, one
micro-batch per step, constant lr): the loss of every step and the final weights, to 1e-5.

How a job's rows become datums (Tinker's convention: `model_input` is the sequence without its last
token, position t predicts `target_tokens[t]` = token t + 1):
- sft: `engine.data.tokenize_sft`; weights `1 / N` on the response tokens (token t >= max(prompt_len, 1)),
  N = response tokens of the whole step's batch (the job's token-mean);
- dpo: `engine.data.tokenize_preference`; one (chosen, rejected) pair of datums per row, weights 1 on
  the response tokens; the reference is the trainer's starting weights (no `ref_logprobs`).

The two compute the same sums in another order (the job packs whole sequences and applies the LM
head to the response positions only), so they agree to float rounding: about 1e-6 in the losses.
AdamW turns that into larger weight differences where a gradient element is near its `eps` (the
update is about `lr * g / (|g| + eps)`): at lr 1e-3 over 3-4 steps the weights agree to about
5e-6 (full fine-tuning) and 1e-7 (LoRA); the difference grows with lr x steps.
"""

from __future__ import annotations

import json

import pytest
import torch
from safetensors.torch import load_file

from engine import data as data_lib
from engine.config import DPOConfig, JobRequest, Resources, SFTConfig, build_config
from engine.interactive.session import TrainingSession
from engine.interactive.spec import SessionSpec
from engine.methods.dpo import run_dpo
from engine.methods.sft import run_sft
from engine.runtime.reporting import RecordingReporter

SEED = 11
ROWS = 8
ADAM = {"learning_rate": 1e-3, "beta1": 0.9, "beta2": 0.95, "eps": 1e-8, "weight_decay": 0.01, "grad_clip_norm": 1.0}


pytestmark = pytest.mark.usefixtures("one_thread")  # torch on one thread (tests/engine/conftest.py)


def _rows_file(tmp, source: str, kind: str, n: int) -> str:
    path = tmp / f"{kind}.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in data_lib.load_rows(source, kind)[:n]))
    return str(path)


def _job_config(cls, steps: int, lora: int, extra: dict | None = None):
    cfg = {"data": {"train_batch_size": ROWS, "max_prompt_length": 64, "max_response_length": 64,
                    "max_length": 128},
           "optim": {"lr": ADAM["learning_rate"], "betas": [ADAM["beta1"], ADAM["beta2"]],
                     "weight_decay": ADAM["weight_decay"], "grad_clip": ADAM["grad_clip_norm"],
                     "lr_scheduler_type": "constant", "lr_warmup_steps_ratio": 0.0},
           "trainer": {"total_training_steps": steps},
           "model": {"lora_rank": lora, "lora_alpha": 16},
           "max_token_len_per_gpu": 100_000, **(extra or {})}
    return build_config(cls, cfg)


def _trained(output_dir: str) -> dict[str, torch.Tensor]:
    return load_file(f"{output_dir}/model.safetensors")


def _session(assets, lora: int, tmp) -> TrainingSession:
    session = TrainingSession(SessionSpec(session_id="eq", model_path=assets["model"], lora_rank=lora, lora_alpha=16,
                                          seed=SEED, state_root=str(tmp / "state")))
    session.start()
    return session


def _compare_weights(session: TrainingSession, job_output: str, tmp) -> None:
    path = session.run("save_state", {"name": "final"})["path"]
    mine, theirs = _trained(path), _trained(job_output)
    assert mine.keys() == theirs.keys()
    worst = max(float((mine[k] - theirs[k]).abs().max()) for k in mine)
    # One AdamW step at lr 1e-3 moves a weight by about 1e-3: a missed or doubled step is far above
    # this. Below it is float rounding (summation order, a reference log-prob taken from the pair cache
    # at another thread count), which Adam's normalisation lifts from ~1e-7 to ~1e-5.
    assert worst < 5e-5, worst
    moved = max(float((theirs[k] - base).abs().max()) for k, base in _trained(session.spec.model_path).items()
                if k in theirs)
    assert moved > 1e-3  # the comparison is not between two untrained models


@pytest.mark.parametrize("lora", [0, 8], ids=["full", "lora"])
def test_sft_loop_equals_the_sft_job(demo_assets, tmp_path, lora):
    steps = 4
    train = _rows_file(tmp_path, demo_assets["sft_train"], "sft", ROWS)
    cfg = _job_config(SFTConfig, steps, lora)
    request = JobRequest(job_id="sft-eq", method="sft", config=cfg, model_path=demo_assets["model"],
                         training_file=train, validation_file=train, output_dir=str(tmp_path / "out"),
                         checkpoint_dir=str(tmp_path / "ckpt"), seed=SEED, resources=Resources(num_workers=1))
    reporter = RecordingReporter()
    run_sft(request, reporter)
    job_losses = reporter.series("train/loss")

    session = _session(demo_assets, lora, tmp_path)
    rows = data_lib.load_rows(train, "sft")
    examples = data_lib.tokenize_sft(rows, session.tokenizer, 64, 64, "error")
    total = sum(len(e.input_ids) - max(e.prompt_len, 1) for e in examples)
    datums = []
    for e in examples:
        ids = e.input_ids
        weights = [1.0 / total if t + 1 >= max(e.prompt_len, 1) else 0.0 for t in range(len(ids) - 1)]
        datums.append({"model_input": ids[:-1], "loss_fn_inputs": {"target_tokens": ids[1:], "weights": weights}})
    losses = []
    for _ in range(steps):
        out = session.run("forward_backward", {"data": datums, "loss_fn": "cross_entropy"})
        losses.append(out["metrics"]["loss:sum"])
        session.run("optim_step", {"adam_params": ADAM})
    assert losses == pytest.approx(job_losses, abs=1e-5)
    assert losses[-1] < losses[0] - 0.1
    _compare_weights(session, request.output_dir, tmp_path)


@pytest.mark.parametrize("lora", [0, 8], ids=["full", "lora"])
def test_dpo_loop_equals_the_dpo_job(demo_assets, tmp_path, lora):
    steps, beta = 3, 0.1
    train = _rows_file(tmp_path, demo_assets["preference_train"], "preference", ROWS)
    cfg = _job_config(DPOConfig, steps, lora, {"beta": beta})
    request = JobRequest(job_id="dpo-eq", method="dpo", config=cfg, model_path=demo_assets["model"],
                         training_file=train, validation_file=train, output_dir=str(tmp_path / "out"),
                         checkpoint_dir=str(tmp_path / "ckpt"), seed=SEED, resources=Resources(num_workers=1))
    reporter = RecordingReporter()
    run_dpo(request, reporter)
    job_losses = reporter.series("train/loss")

    session = _session(demo_assets, lora, tmp_path)
    pairs = data_lib.tokenize_preference(data_lib.load_rows(train, "preference"), session.tokenizer, 128, "error")
    datums = []
    for p in pairs:
        for ids, prompt_len in ((p.chosen_ids, p.chosen_prompt_len), (p.rejected_ids, p.rejected_prompt_len)):
            weights = [1.0 if t + 1 >= max(prompt_len, 1) else 0.0 for t in range(len(ids) - 1)]
            datums.append({"model_input": ids[:-1], "loss_fn_inputs": {"target_tokens": ids[1:], "weights": weights}})
    losses = []
    for _ in range(steps):
        out = session.run("forward_backward", {"data": datums, "loss_fn": "dpo", "loss_fn_config": {"beta": beta}})
        losses.append(out["metrics"]["loss:sum"])
        session.run("optim_step", {"adam_params": ADAM})
    assert losses[0] == pytest.approx(0.6931472, abs=1e-5)  # the policy is its reference at first
    assert losses == pytest.approx(job_losses, abs=1e-5)
    assert losses[-1] < losses[0] - 0.05
    assert reporter.series("rewards/accuracies")[-1] == pytest.approx(out["metrics"]["dpo/accuracy"])
    _compare_weights(session, request.output_dir, tmp_path)
