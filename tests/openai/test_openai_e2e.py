"""The official `openai` client driving real training on a live Keel (API + Celery worker + Ray) with
the demo model: supervised (with a W&B integration, offline) -> events, checkpoints, results CSV, token
accuracy, trained tokens, the run in W&B -> DPO on the fine-tuned model by its `ft:` name;
reinforcement with a `multi` grader raises its reward; cancel."""

from __future__ import annotations

import csv
import io
import time
from pathlib import Path

import pyarrow.parquet as pq
import pytest
from openai_support import jsonl
from sqlalchemy import select

from core.config import settings
from core.db import session_scope
from core.models import EventCursor
from tests.workers.test_integrations import read_wandb_records

pytestmark = pytest.mark.slow


def _wait(oai, job_id: str, statuses=("succeeded", "failed", "cancelled"), timeout: float = 600.0):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        job = oai.fine_tuning.jobs.retrieve(job_id)
        if job.status in statuses:
            return job
        time.sleep(0.5)
    raise AssertionError(f"{job_id} still {job.status}")


def _rows(path: str, n: int) -> list[dict]:
    return pq.read_table(path).to_pylist()[:n]


def _wandb_history(job_id: str, timeout: float = 60.0) -> list[dict]:
    """The steps the workers' integration mirror logged to the job's offline W&B run, once it finished."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        with session_scope() as db:
            if db.scalar(select(EventCursor.done).where(EventCursor.job_id == job_id,
                                                        EventCursor.consumer == "integrations")):
                break
        time.sleep(0.5)
    else:
        raise AssertionError("the integration mirror never finished the job")
    (run_file,) = sorted((settings.home / "integrations" / job_id).glob("wandb/offline-run-*/run-*.wandb"))
    records = read_wandb_records(run_file)
    run = next(r.run for r in records if r.WhichOneof("record_type") == "run")
    assert run.project == "keel-openai" and run.display_name == "arith" and list(run.tags) == ["e2e"]
    return [{i.key or "/".join(i.nested_key): i.value_json for i in r.history.item}
            for r in records if r.WhichOneof("record_type") == "history"]


def test_supervised_then_dpo_on_the_fine_tuned_model(oai, tmp_path, demo_assets, celery_worker):
    chat = [{"messages": [{"role": "user", "content": r["prompt"]}, {"role": "assistant", "content": r["response"]}]}
            for r in _rows(demo_assets["sft_train"], 64)]
    train = oai.files.create(file=jsonl(tmp_path, "train.jsonl", chat).open("rb"), purpose="fine-tune")
    val = oai.files.create(file=jsonl(tmp_path, "val.jsonl", chat[:16]).open("rb"), purpose="fine-tune")
    job = oai.fine_tuning.jobs.create(
        model=demo_assets["model"], training_file=train.id, validation_file=val.id, suffix="arith", seed=3,
        metadata={"suite": "openai"},
        integrations=[{"type": "wandb", "wandb": {"project": "keel-openai", "name": "arith", "tags": ["e2e"]}}],
        method={"type": "supervised", "supervised": {"hyperparameters": {
            "n_epochs": 2, "batch_size": 16, "learning_rate_multiplier": 300}}})
    assert job.object == "fine_tuning.job" and job.status == "queued"
    assert job.integrations[0].wandb.project == "keel-openai"
    assert job.method.supervised.hyperparameters.n_epochs == 2
    assert job.training_file == train.id and job.seed == 3
    done = _wait(oai, job.id)
    assert done.status == "succeeded", done.error
    assert done.finished_at >= done.created_at
    base = Path(demo_assets["model"]).name
    assert done.fine_tuned_model.startswith(f"ft:{base}:") and done.fine_tuned_model.split(":")[3] == "arith"

    events = oai.fine_tuning.jobs.list_events(job.id, limit=100).data
    metrics = [e for e in events if e.type == "metrics"]
    assert len(metrics) == 8 and all(e.object == "fine_tuning.job.event" for e in events)
    losses = [e.data["train_loss"] for e in reversed(metrics)]
    assert losses[-1] < losses[0]
    accuracies = [e.data["train_mean_token_accuracy"] for e in reversed(metrics)]
    assert all(0.0 <= a <= 1.0 for a in accuracies) and accuracies[-1] > accuracies[0], accuracies
    # trained_tokens: the response tokens every step trained on, summed.
    assert done.trained_tokens == sum(int(e.data["values"]["train/response_tokens"]) for e in metrics) > 0
    assert events[0].level == "info" and "completed" in events[0].message  # newest first: job.done

    checkpoints = oai.fine_tuning.jobs.checkpoints.list(job.id).data
    assert [c.step_number for c in checkpoints] == [8, 4]
    assert checkpoints[0].object == "fine_tuning.job.checkpoint" and checkpoints[0].fine_tuning_job_id == job.id
    for c in checkpoints:  # checkpoints at epoch ends, which validate on the validation file
        assert c.metrics.train_loss is not None and 0.0 <= c.metrics.train_mean_token_accuracy <= 1.0
        assert c.metrics.valid_loss is not None and c.metrics.full_valid_loss == c.metrics.valid_loss
        assert 0.0 <= c.metrics.valid_mean_token_accuracy <= 1.0

    assert len(done.result_files) == 1
    table = list(csv.DictReader(io.StringIO(oai.files.content(done.result_files[0]).text)))
    assert [int(r["step"]) for r in table] == list(range(1, 9))
    assert list(table[0]) == ["step", "train_loss", "train_accuracy", "valid_loss", "valid_mean_token_accuracy"]
    assert table[-1]["valid_loss"] and table[-1]["valid_mean_token_accuracy"]
    assert all(0.0 <= float(r["train_accuracy"]) <= 1.0 for r in table)

    history = _wandb_history(job.id)
    assert [int(h["_step"]) for h in history] == list(range(1, 9))
    assert [float(h["train/loss"]) for h in history] == pytest.approx(losses)
    assert [float(h["train/token_accuracy"]) for h in history] == pytest.approx(accuracies)

    assert done.fine_tuned_model in {m.id for m in oai.models.list().data}
    listed = oai.fine_tuning.jobs.list(metadata={"suite": "openai"}).data
    assert [j.id for j in listed] == [job.id]
    assert oai.fine_tuning.jobs.list(metadata={"suite": "other"}).data == []

    # The same row in Keel's own API.
    keel = oai.get(f"/jobs/{job.id}", cast_to=object)
    assert keel["method"]["type"] == "sft" and keel["integrations"][0]["type"] == "wandb"
    assert keel["output_model"] == "model-" + done.fine_tuned_model.rsplit(":", 1)[1]

    pairs = [{"input": {"messages": [{"role": "user", "content": r["prompt"]}]},
              "preferred_output": [{"role": "assistant", "content": r["chosen"]}],
              "non_preferred_output": [{"role": "assistant", "content": r["rejected"]}]}
             for r in _rows(demo_assets["preference_train"], 32)]
    prefs = oai.files.create(file=jsonl(tmp_path, "dpo.jsonl", pairs).open("rb"), purpose="fine-tune")
    dpo = oai.fine_tuning.jobs.create(model=done.fine_tuned_model, training_file=prefs.id, method={
        "type": "dpo", "dpo": {"hyperparameters": {"beta": 0.2, "n_epochs": 1, "batch_size": 8}}})
    assert dpo.method.dpo.hyperparameters.beta == 0.2 and dpo.model == done.fine_tuned_model
    dpo_done = _wait(oai, dpo.id)
    assert dpo_done.status == "succeeded", dpo_done.error
    assert dpo_done.fine_tuned_model.startswith(f"ft:{base}:") and dpo_done.trained_tokens > 0
    assert oai.get(f"/jobs/{dpo.id}", cast_to=object)["model"] == keel["output_model"]
    assert oai.get(f"/jobs/{dpo.id}", cast_to=object)["method"]["hyperparameters"]["beta"] == 0.2


def test_cancel_through_the_client(oai, tmp_path, demo_assets, celery_worker):
    chat = [{"messages": [{"role": "user", "content": r["prompt"]}, {"role": "assistant", "content": r["response"]}]}
            for r in _rows(demo_assets["sft_train"], 400)]
    train = oai.files.create(file=jsonl(tmp_path, "big.jsonl", chat).open("rb"), purpose="fine-tune")
    job = oai.fine_tuning.jobs.create(model=demo_assets["model"], training_file=train.id, method={
        "type": "supervised", "supervised": {"hyperparameters": {"n_epochs": 50, "batch_size": 4}}})
    _wait(oai, job.id, statuses=("running",), timeout=300)
    deadline = time.monotonic() + 120  # the pace of the first steps gives the estimate
    while (running := oai.fine_tuning.jobs.retrieve(job.id)).estimated_finish is None:
        assert time.monotonic() < deadline and running.status == "running", running.status
        time.sleep(0.5)
    assert running.estimated_finish > time.time() - 5
    cancelled = oai.fine_tuning.jobs.cancel(job.id)
    assert cancelled.id == job.id
    assert _wait(oai, job.id).status == "cancelled"


def test_reinforcement_with_a_multi_grader_raises_its_reward(oai, tmp_path, demo_assets, celery_worker):
    """GRPO groups on the random demo model, rewarded by a `multi` grader: the answer contained
    (string_check `ilike`, rare at first) plus the response's fuzzy similarity to the question (a dense
    signal a tiny random model can climb within a few steps at a high learning rate)."""
    rows = [{"messages": [{"role": "user", "content": r["prompt"]}], "answer": r["ground_truth"]}
            for r in _rows(demo_assets["prompts_train"], 128)]
    train = oai.files.create(file=jsonl(tmp_path, "rft.jsonl", rows).open("rb"), purpose="fine-tune")
    grader = {"type": "multi", "name": "answer", "calculate_output": "0.2 * contains + sim",
              "graders": {
                  "contains": {"type": "string_check", "name": "contains", "input": "{{sample.output_text}}",
                               "reference": "{{item.answer}}", "operation": "ilike"},
                  "sim": {"type": "text_similarity", "name": "sim", "input": "{{sample.output_text}}",
                          "reference": "{{item.messages.0.content}}", "evaluation_metric": "fuzzy_match"}}}
    job = oai.fine_tuning.jobs.create(model=demo_assets["model"], training_file=train.id, method={
        "type": "reinforcement",
        "reinforcement": {"grader": grader, "hyperparameters": {
            "n_epochs": 1, "batch_size": 8, "learning_rate_multiplier": 5000, "compute_multiplier": 1}},
        "keel_overrides": ["data.max_response_length=12", "actor.ppo_epochs=4",
                           "algorithm.kl_ctrl.kl_coef=0.0", "guardrails.rollback_kl=100.0"]})
    assert job.method.reinforcement.hyperparameters.compute_multiplier == 1
    done = _wait(oai, job.id)
    assert done.status == "succeeded", done.error
    assert done.trained_tokens > 0
    keel = oai.get(f"/jobs/{job.id}", cast_to=object)
    assert keel["method"]["type"] == "ppo" and keel["method"]["reward"]["function"] == "grader"
    assert keel["method"]["hyperparameters"]["algorithm"]["adv_estimator"] == "grpo"
    assert keel["method"]["hyperparameters"]["rollout"]["n"] == 4
    events = oai.fine_tuning.jobs.list_events(job.id, limit=100).data
    rewards = [e.data["train_mean_reward"] for e in reversed(events) if e.type == "metrics"]
    assert len(rewards) == 16
    assert sum(rewards[-4:]) / 4 > sum(rewards[:4]) / 4 + 0.03, rewards


def test_epoch_end_checkpoints_after_the_hold_out(oai, tmp_path, demo_assets, celery_worker):
    """Without a validation file 10% of the rows are held out: 40 rows train on 36, 4 steps of 8 an
    epoch, so the checkpoints land at steps 4 and 8 (not 5, from all 40 rows) and the job's progress
    ends at epoch 2 of 2."""
    from api.openai.translation import HOLDOUT_FRACTION
    from engine.methods.supervised import HOLDOUT_FRACTION as ENGINE_HOLDOUT

    assert HOLDOUT_FRACTION == ENGINE_HOLDOUT
    chat = [{"messages": [{"role": "user", "content": r["prompt"]}, {"role": "assistant", "content": r["response"]}]}
            for r in _rows(demo_assets["sft_train"], 40)]
    train = oai.files.create(file=jsonl(tmp_path, "train40.jsonl", chat).open("rb"), purpose="fine-tune")
    job = oai.fine_tuning.jobs.create(model=demo_assets["model"], training_file=train.id, method={
        "type": "supervised", "supervised": {"hyperparameters": {"n_epochs": 2, "batch_size": 8}}})
    done = _wait(oai, job.id)
    assert done.status == "succeeded", done.error
    assert [c.step_number for c in oai.fine_tuning.jobs.checkpoints.list(job.id).data] == [8, 4]
    progress = oai.get(f"/jobs/{job.id}", cast_to=object)["progress"]
    assert (progress["step"], progress["total_steps"], progress["epoch"]) == (8, 8, 2)
