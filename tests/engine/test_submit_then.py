"""`submit_then`: a call and the calls that read its output. On a colocated Ray host the whole chain
is one Ray call (`Colocated.chain`), so the rollout batch never goes through the object store; with
separate role workers, or the local executor, it is the plain sequence of calls."""

from __future__ import annotations

import pytest

from engine.config import PPOConfig, Resources, build_config
from engine.roles.local import LocalRoleGroup, get, submit_then
from engine.rollout.sampling import row_seed

CFG = {"data": {"train_batch_size": 4, "max_prompt_length": 32, "max_response_length": 8},
       "actor": {"ppo_mini_batch_size": 4}, "critic": {"ppo_mini_batch_size": 4}}


class Echo:
    def pair(self, x):
        return x, x * 2

    def add(self, a, b=0):
        return a + b

    def scale(self, a, k):
        return a * k


def test_each_call_of_the_chain_gets_the_first_output():
    first, second = LocalRoleGroup("echo", Echo()), LocalRoleGroup("other", Echo())
    outs = first.submit_then(0, "pair", (3,), [(second, "add", (10,)), (first, "scale", (5,))], num_returns=2)
    assert get(list(outs)) == [3, 6, 13, 15]
    single = first.submit_then(0, "add", (1, 2), [(second, "scale", (2,))])
    assert get(list(single)) == [3, 6]


def _specs(demo_assets, cfg):
    from engine.rewards.rules import resolve_rule_rewards
    from engine.roles.actor import ActorRollout
    from engine.roles.remote import RoleSpec
    from engine.roles.reward import Reward

    reward = {"tokenizer_path": demo_assets["model"], "functions": resolve_rule_rewards({}, ["gsm8k"])}
    return [RoleSpec("actor", ActorRollout, (cfg, demo_assets["model"]), {"total_steps": 2}, data_parallel=True),
            RoleSpec("reward", Reward, (cfg,), reward, uses_gpu=False)]


@pytest.mark.parametrize("colocate", [True, False])
def test_on_ray_a_colocated_chain_is_one_call_with_the_same_results(demo_assets, ray_local, colocate):
    from engine.data import load_rows, tokenize_prompts
    from engine.models import load_tokenizer
    from engine.roles.remote import RoleCluster

    cfg = build_config(PPOConfig, CFG)
    rows = load_rows(demo_assets["prompts_train"], "prompts")[:4]
    prompts = [p.prompt_ids for p in tokenize_prompts(rows, load_tokenizer(demo_assets["model"]), 32, "error")]
    seeds = [row_seed(1, i) for i in range(len(prompts))]
    meta = [{"ground_truth": r.get("ground_truth"), "data_source": "gsm8k", "prompt": ""} for r in rows]
    cluster = RoleCluster(_specs(demo_assets, cfg), Resources(colocate=colocate), startup_timeout_s=120)
    try:
        actor, reward = cluster["actor"], cluster["reward"]
        chained = actor.submit_then(0, "generate", (prompts, seeds), [(reward, "compute_scores", (meta,))],
                                    num_returns=2)
        # The plain sequence (what separate workers get): generate, then scores of its batch ref.
        plain = submit_then(actor, 0, "generate", (prompts, seeds), [(reward, "compute_scores", (meta,))],
                            num_returns=2)
        tasks = {ref.task_id() for ref in chained}
        assert len(tasks) == (1 if colocate else 2)
        assert len({ref.task_id() for ref in plain}) == 2
        (batch, _, scores), (batch2, _, scores2) = cluster.get(list(chained)), cluster.get(list(plain))
        for key in batch:
            assert batch[key].equal(batch2[key]), key
        assert scores["scores"].equal(scores2["scores"])
        assert batch["response_mask"].sum() > 0
    finally:
        cluster.shutdown()
