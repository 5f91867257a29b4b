"""The Tinker cookbook's on-policy distillation against a live Keel, as a user runs it: the student's
training client samples, the teacher's sampling client (another base model Keel serves, with the
student's tokenizer) scores the student's tokens with `compute_logprobs`, and the negative reverse KL
per token trains the student through `forward_backward` with `importance_sampling`. The recipe's own
command line loads only Hub datasets, so `cookbook_distill.py` drives the same `train_on_policy` loop
on the demo prompts (docs/distillation.md, "Through the Tinker surface")."""

from __future__ import annotations

import json
import math
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from cookbook_runs import finish, start, trainer, trainer_operations, trainers

pytestmark = pytest.mark.slow

TIMEOUT_S = 300.0
STEPS = 2
SEQUENCES = 2 * 2  # per step: groups_per_batch x group_size


@pytest.fixture(scope="module")
def distilled(tinker_url, tinker_key, tinker_assets, tmp_path_factory) -> Iterator[dict]:
    root = tmp_path_factory.mktemp("distill")
    args = {"model_name": tinker_assets["small_model"], "teacher_model": tinker_assets["model"],
            "prompts_file": tinker_assets["prompts_train"], "renderer_name": "role_colon", "base_url": tinker_url,
            "lora_rank": 8, "groups_per_batch": 2, "group_size": 2, "max_tokens": 8, "max_steps": STEPS}
    proc = start([str(Path(__file__).with_name("cookbook_distill.py"))], args, tinker_key, root / "distill")
    run = finish({"distill": proc}, root, TIMEOUT_S)["distill"]
    yield run
    # The script exits without ending its Tinker session, as recipes do: its trainers (the student, and
    # the teacher's sampler on a base model no other test uses) would hold the session's 2 Ray CPUs
    # and starve the trainers of the tests after this one.
    if not run["model_id"]:
        return
    session_id = run["model_id"].split(":train:")[0]
    for t in trainers(tinker_url, tinker_key):
        if session_id in (t["metadata"].get("tinker_session"), (t["metadata"].get("tinker_model_id") or "").split(":train:")[0]):
            httpx.delete(f"{tinker_url}/v1/trainers/{t['id']}", timeout=60,
                         headers={"Authorization": f"Bearer {tinker_key.removeprefix('tml-')}"}).raise_for_status()


def test_teacher_shares_the_students_tokenizer(tinker_assets):
    # The teacher scores the student's token ids as they are: both demo models carry one tokenizer.
    student, teacher = (json.loads((Path(tinker_assets[m]) / "tokenizer.json").read_text())
                        for m in ("small_model", "model"))
    assert student == teacher
    assert tinker_assets["small_model"] != tinker_assets["model"]


def test_on_policy_distillation(distilled, tinker_url, tinker_key):
    assert distilled["code"] == 0, distilled["output"]
    kl = {r["step"]: r["teacher_kl"] for r in distilled["rows"] if "teacher_kl" in r}
    assert sorted(kl) == list(range(STEPS)), distilled["rows"]
    # Student and teacher are different random models: their log-probs of the sampled tokens differ.
    assert all(math.isfinite(v) and v != 0 for v in kl.values()), kl
    student = trainer(tinker_url, tinker_key, distilled["model_id"])
    assert student["step"] == STEPS and student["tokens"] > 0  # Keel's record of the student's optimizer steps
    kinds = [op["kind"] for op in trainer_operations(tinker_url, tinker_key, student["id"])]
    assert kinds.count("sample") == STEPS * SEQUENCES  # the student's own rollouts, one sequence a call
    assert kinds.count("forward_backward") == STEPS and kinds.count("optim_step") == STEPS

    # The teacher: the session's sampler trainer on the other base model scored every sampled sequence.
    session_id = distilled["model_id"].split(":train:")[0]
    [teacher] = [t for t in trainers(tinker_url, tinker_key) if t["metadata"].get("tinker_session") == session_id]
    assert teacher["metadata"]["tinker_role"] == "sampler" and teacher["lora"] is None
    assert teacher["model"] != student["model"]
    kinds = [op["kind"] for op in trainer_operations(tinker_url, tinker_key, teacher["id"])]
    assert kinds.count("sample") == STEPS * SEQUENCES  # compute_logprobs: a 1-token sample with prompt log-probs
