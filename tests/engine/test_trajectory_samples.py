"""Recorded trajectories as PPO samples (`engine.rollout.trajectories`) and a PPO job that trains on
them (`engine.methods.ppo_trajectories`, local executor, the demo model): it trains on exactly the
recorded tokens and moves the policy toward the rewarded completions."""

from __future__ import annotations

import json

import pytest
import torch
from transformers import AutoModelForCausalLM, AutoTokenizer

from engine.config import JobRequest, PPOConfig, Resources, build_config
from engine.errors import DataError
from engine.methods.ppo_trajectories import TrajectoryPPOTrainer
from engine.rollout.trajectories import groups, load_samples, trajectory_samples
from engine.runtime.reporting import RecordingReporter


def call(prompt, completion, log_probs=None):
    return {"prompt_token_ids": prompt, "completion_token_ids": completion,
            "logprobs": log_probs if log_probs is not None else [-0.5] * len(completion)}


def test_a_continued_conversation_is_one_sample_with_masked_observations():
    row = {"trajectory_id": "t", "group_id": None, "reward": 2.0,
           "calls": [call([1, 2], [3, 4], [-0.1, -0.2]), call([1, 2, 3, 4, 9, 9], [5], [-0.3])]}
    [sample] = trajectory_samples(row)
    assert (sample.prompt_ids, sample.response_ids) == ([1, 2], [3, 4, 9, 9, 5])
    assert sample.loss_mask == [1, 1, 0, 0, 1]
    assert sample.rollout_log_probs == [-0.1, -0.2, 0.0, 0.0, -0.3]
    assert (sample.reward, sample.group) == (2.0, "trajectory:t")


def test_rewritten_history_splits_the_trajectory_with_the_same_reward():
    row = {"trajectory_id": "t", "group_id": "g", "reward": 1.0,
           "calls": [call([1, 2], [3]), call([1, 7, 3, 8], [4]), call([1, 7, 3, 8, 4], [5])]}
    first, second = trajectory_samples(row)
    assert (first.prompt_ids, first.response_ids, first.loss_mask) == ([1, 2], [3], [1])
    assert (second.prompt_ids, second.response_ids, second.loss_mask) == ([1, 7, 3, 8], [4, 5], [1, 1])
    assert first.reward == second.reward == 1.0 and first.group == second.group == "g"


def test_samples_too_long_for_the_widths_are_dropped_and_counted():
    rows = [{"trajectory_id": "long", "reward": 0, "calls": [call([1] * 5, [2])]},
            {"trajectory_id": "short", "group_id": "g", "reward": 0, "calls": [call([1], [2, 3])]},
            {"trajectory_id": "wide", "group_id": "g", "reward": 0, "calls": [call([1], [2, 3, 4])]}]
    kept, dropped = load_samples(rows, prompt_width=4, response_width=2)
    assert [s.trajectory_id for s in kept] == ["short"] and dropped == 2
    with pytest.raises(ValueError, match="log-probs"):
        trajectory_samples({"trajectory_id": "x", "reward": 0, "calls": [call([1], [2], [])]})
    assert [len(g) for g in groups(trajectory_samples(rows[1]) + trajectory_samples(rows[0]))] == [1, 1]


# --- a job on recorded trajectories ---------------------------------------------------------------

GOOD, BAD = " good", " bad"


def _recorded(model, tokenizer, prompts: list[str]) -> list[dict]:
    """Two-turn trajectories per prompt, a rewarded one (says GOOD) and one that does not, with the
    log-probs the demo model gives their completions (as the serving engine records them)."""
    rows = []
    for i, prompt in enumerate(prompts):
        for tag, reward in ((GOOD, 1.0), (BAD, 0.0)):
            first = tokenizer(f"User: {prompt}\nAssistant:\n", add_special_tokens=False).input_ids
            said = tokenizer(tag * 2, add_special_tokens=False).input_ids
            second = first + said + tokenizer("\nUser: again\nAssistant:\n", add_special_tokens=False).input_ids
            calls = [call(p, said, _log_probs(model, p, said)) for p in (first, second)]
            rows.append({"trajectory_id": f"p{i}{tag}", "group_id": f"prompt-{i}", "reward": reward, "calls": calls})
    return rows


def _log_probs(model, prompt: list[int], completion: list[int]) -> list[float]:
    with torch.no_grad():
        logits = model(torch.tensor([prompt + completion])).logits[0, len(prompt) - 1:-1].float()
    return logits.log_softmax(-1).gather(-1, torch.tensor(completion)[:, None])[:, 0].tolist()


def _margin(model_dir: str, rows: list[dict]) -> float:
    """Mean log-prob of the rewarded completions minus the others'."""
    model = AutoModelForCausalLM.from_pretrained(model_dir)
    total = {1.0: 0.0, 0.0: 0.0}
    for row in rows:
        for c in row["calls"]:
            total[row["reward"]] += sum(_log_probs(model, c["prompt_token_ids"], c["completion_token_ids"]))
    return (total[1.0] - total[0.0]) / (len(rows) / 2)


@pytest.mark.slow
def test_ppo_trains_on_exactly_the_recorded_tokens_toward_the_reward(demo_assets, tmp_path, one_thread):
    tokenizer = AutoTokenizer.from_pretrained(demo_assets["model"])
    base = AutoModelForCausalLM.from_pretrained(demo_assets["model"])
    rows = _recorded(base, tokenizer, ["2 + 3", "4 + 1", "7 - 2", "9 - 4"])
    rows.append({"trajectory_id": "huge", "group_id": "prompt-0", "reward": 1.0,
                 "calls": [call(list(range(5, 60)), [7])]})  # longer than max_prompt_length: dropped
    snapshot = tmp_path / "trajectories.jsonl"
    snapshot.write_text("".join(json.dumps(r) + "\n" for r in rows))
    config = build_config(PPOConfig, {
        "data": {"train_batch_size": 2, "max_prompt_length": 40, "max_response_length": 24},
        "actor": {"ppo_mini_batch_size": 2, "ppo_epochs": 2, "optim": {"lr": 2e-3}},
        "algorithm": {"adv_estimator": "grpo", "use_kl_in_reward": False,
                      "rollout_correction": {"rollout_is": "token"}},
        "rollout": {"n": 2, "source": "trajectories"}, "trainer": {"total_epochs": 2, "total_training_steps": 50}})
    request = JobRequest(job_id="trajectories", method="ppo", config=config, model_path=demo_assets["model"],
                         training_file=str(snapshot), output_dir=str(tmp_path / "out"),
                         checkpoint_dir=str(tmp_path / "ckpt"), resources=Resources(executor="local"))
    reporter = RecordingReporter()
    TrajectoryPPOTrainer(request, reporter).fit()

    steps = [m for m in reporter.of("metrics") if "trajectories/samples" in m["values"]]
    assert len(steps) == 4  # 4 groups of 2 a step, two epochs: bounded by the data, not total_training_steps
    recorded = [t for r in rows[:-1] for c in r["calls"] for t in c["completion_token_ids"]]
    assert sum(m["values"]["trajectories/sampled_tokens"] for m in steps) == 2 * len(recorded)
    assert sum(m["values"]["trajectories/sampled_token_id_sum"] for m in steps) == 2 * sum(recorded)
    assert {m["values"]["trajectories/dropped"] for m in steps} == {1.0}
    assert all(m["values"]["rollout/logprob_diff/mean"] < 1e-3 for m in steps[:1])  # the recorded log-probs
    assert _margin(str(tmp_path / "out"), rows[:-1]) > _margin(demo_assets["model"], rows[:-1]) + 0.5


def test_too_few_groups_is_a_data_error(demo_assets, tmp_path):
    snapshot = tmp_path / "one.jsonl"
    snapshot.write_text(json.dumps({"trajectory_id": "t", "reward": 1, "calls": [call([5, 6], [7])]}) + "\n")
    config = build_config(PPOConfig, {"data": {"train_batch_size": 2, "max_prompt_length": 8,
                                               "max_response_length": 8},
                                      "actor": {"ppo_mini_batch_size": 2}, "rollout": {"source": "trajectories"}})
    request = JobRequest(job_id="few", method="ppo", config=config, model_path=demo_assets["model"],
                         training_file=str(snapshot), output_dir=str(tmp_path / "o"), checkpoint_dir=str(tmp_path / "c"),
                         resources=Resources(executor="local"))
    trainer = TrajectoryPPOTrainer(request, RecordingReporter())
    with pytest.raises(DataError, match="1 groups"):
        trainer._load_data()
