"""Bring your own agent, end to end (docs/trajectories.md): an agent loop written with the plain `openai`
client holds two-turn conversations with the demo model through Keel's `/v1/chat/completions` under
`extra_body={"trajectory_id": ...}`, the test scores each conversation and posts the reward with the
prompt as its group; a PPO job with `rollout.source: trajectories` then runs through the API on the live
worker (Celery, Ray, the session's Serve). It trains on exactly the recorded tokens (the step metrics the
engine logged), and the downloaded policy, read with plain `transformers`, gives the rewarded completions
more probability, relative to the others, than the base model did."""

from __future__ import annotations

import time

import hf_reference
import httpx
import pytest

pytestmark = [pytest.mark.slow, pytest.mark.usefixtures("serve_url")]

QUESTIONS = ["What is 2 + 3?", "What is 4 + 1?", "What is 7 - 2?", "What is 9 - 4?"]
TRIES = 4
"""Conversations per question: one group (GRPO's baseline is its mean)."""


def agent(oai, model: str, question: str, trajectory_id: str, seed: int) -> list[str]:
    """A two-turn agent: ask, then ask again with the answer in the history. Every call carries the
    trajectory id, so Keel records its token ids and log-probs."""
    messages = [{"role": "user", "content": question}]
    said = []
    for turn in range(2):
        answer = oai.chat.completions.create(model=model, messages=messages, max_tokens=6, temperature=1.0,
                                             seed=seed * 10 + turn, extra_body={"trajectory_id": trajectory_id})
        said.append(answer.choices[0].message.content or "")
        messages += [{"role": "assistant", "content": said[-1]}, {"role": "user", "content": "Are you sure?"}]
    return said


def reward(first_token: int) -> float:
    """The test's own grader: 1 when the conversation's first sampled token id is even (a rule the model
    does not know, which half its samples meet)."""
    return 1.0 if first_token % 2 == 0 else 0.0


def _get(live_server: str, key: str, path: str, **params) -> dict:
    r = httpx.get(f"{live_server}{path}", params=params, headers={"Authorization": f"Bearer {key}"}, timeout=60,
                  trust_env=False)
    assert r.status_code == 200, r.text
    return r.json()


def _margin(model, trajectories: list[dict]) -> float:
    """Mean log-prob per sampled token of the rewarded conversations minus that of the others."""
    mean = {}
    for value in (0.0, 1.0):
        logps = [lp for t in trajectories if t["reward"] == value for c in t["data"]
                 for lp in hf_reference.logprobs(model, c["prompt_token_ids"], c["completion_token_ids"])]
        mean[value] = sum(logps) / len(logps)
    return mean[1.0] - mean[0.0]


def test_ppo_trains_on_an_openai_agents_recorded_calls(oai, live_server, project_key, demo_assets, tmp_path,
                                                       celery_worker):
    model, key = demo_assets["model"], project_key[1]
    run = f"agent-{time.monotonic_ns()}"
    for q, question in enumerate(QUESTIONS):
        for k in range(TRIES):
            trajectory_id = f"{run}-{q}-{k}"
            agent(oai, model, question, trajectory_id, seed=q * TRIES + k)
            first = _get(live_server, key, f"/v1/trajectories/{trajectory_id}")["data"][0]["completion_token_ids"][0]
            # The plain client posts the outcome too (any HTTP client does).
            scored = oai.post(f"/trajectories/{trajectory_id}/reward", cast_to=httpx.Response,
                              body={"reward": reward(first), "group_id": f"{run}-{q}", "metadata": {"run": run}})
            assert scored.json()["calls"] == 2
    recorded = [_get(live_server, key, f"/v1/trajectories/{run}-{q}-{k}") for q in range(len(QUESTIONS))
                for k in range(TRIES)]
    assert {t["reward"] for t in recorded} == {0.0, 1.0}

    job = httpx.post(f"{live_server}/v1/jobs", headers={"Authorization": f"Bearer {key}"}, trust_env=False, timeout=60,
                     json={"model": model, "suffix": "agent", "method": {"type": "ppo", "hyperparameters": {
                         "data": {"train_batch_size": 2, "max_prompt_length": 96, "max_response_length": 96},
                         "actor": {"ppo_mini_batch_size": 2, "ppo_epochs": 2, "optim": {"lr": 2e-3}},
                         "algorithm": {"adv_estimator": "grpo", "use_kl_in_reward": False},
                         "rollout": {"n": TRIES, "source": "trajectories"}, "trainer": {"total_epochs": 1}}}})
    assert job.status_code == 201, job.text
    job_id = job.json()["id"]
    deadline = time.monotonic() + 900
    while (state := _get(live_server, key, f"/v1/jobs/{job_id}"))["status"] not in ("succeeded", "failed", "cancelled"):
        assert time.monotonic() < deadline, state["status"]
        time.sleep(1)
    assert state["status"] == "succeeded", state["error"]
    assert all(t["consumed_by"] == job.json()["training_file"]
               for t in (_get(live_server, key, f"/v1/trajectories/{run}-0-{k}") for k in range(TRIES)))

    # Trained on exactly the recorded tokens: every sampled token of every call, once (one epoch).
    series = {s["name"]: s["values"] for s in _get(live_server, key, f"/v1/jobs/{job_id}/metrics")["data"]}
    tokens = [t for r in recorded for c in r["data"] for t in c["completion_token_ids"]]
    assert len(series["trajectories/samples"]) == len(QUESTIONS) // 2
    assert sum(series["trajectories/sampled_tokens"]) == len(tokens)
    assert sum(series["trajectories/sampled_token_id_sum"]) == sum(tokens)
    assert set(series["trajectories/dropped"]) == {0.0}
    assert series["rollout/logprob_diff/mean"][0] < 1e-3  # the recorded log-probs are the base model's

    # Learning went the reward's way, measured outside Keel on the downloaded weights.
    trained = hf_reference.load(hf_reference.download(live_server, key, state["output_model"], tmp_path / "policy"))
    base = hf_reference.load(model)
    assert _margin(trained, recorded) > _margin(base, recorded) + 0.05
