"""Ulysses sequence parallelism (`engine.runtime.ulysses`): two gloo workers sharding every packed row give
the same losses, log-probs, values, scores and gradients as one worker (SFT, reward model, PPO actor
and critic forwards), each rank embedding half of the row's tokens."""

from __future__ import annotations

import dataclasses

import pytest
import torch

from bench.common import free_port
from engine.config import ModelConfig
from engine.errors import ConfigError

LENGTHS = (37, 20, 14)
"""71 tokens: odd, so the row is padded to a multiple of the group."""


pytestmark = pytest.mark.usefixtures("one_thread")  # torch on one thread (tests/engine/conftest.py)


def _batch():
    g = torch.Generator().manual_seed(0)
    width = max(LENGTHS)
    ids = torch.zeros((len(LENGTHS), width), dtype=torch.long)
    mask = torch.zeros_like(ids)
    for i, n in enumerate(LENGTHS):
        ids[i, :n] = torch.randint(3, 200, (n,), generator=g)
        mask[i, :n] = 1
    prompt_lens = torch.tensor([10, 8, 5])
    return ids, mask, prompt_lens


def _compute(model_path: str, lay) -> dict:
    """Every forward the trainers run, with `lay`'s sharding; losses backpropagated as the trainers
    do (times `loss_scale`) and gradients summed over all workers."""
    from engine import models
    from engine.methods.sft import sft_loss_sum
    from engine.roles.forward import policy_log_probs
    from engine.runtime import distributed, ulysses

    ids, mask, prompt_lens = _batch()
    seen: list[int] = []
    head: list[int] = []
    out: dict = {}

    def grads(model):
        params = [p for p in model.parameters() if p.requires_grad]
        distributed.all_reduce_grads(params)
        result = {n: p.grad.clone() for n, p in model.named_parameters() if p.grad is not None}
        model.zero_grad(set_to_none=True)
        return result

    policy = models.load_policy(model_path, ModelConfig(), trainable=True)
    ulysses.enable(policy, lay)
    policy.model.embed_tokens.register_forward_hook(lambda m, a, o: seen.append(a[0].shape[1]))
    policy.lm_head.register_forward_hook(lambda m, a, o: head.append(a[0].shape[:-1].numel()))
    loss_sum, tokens, _ = sft_loss_sum(policy, ids, mask, prompt_lens)
    (loss_sum / tokens * lay.loss_scale).backward()
    out["sft_loss"], out["sft_grads"] = loss_sum.detach(), grads(policy)

    # The actor's forward: log-probs and entropy at the response positions (temperature 0.7).
    responses = torch.stack([ids[i, p:p + 6] for i, p in enumerate(prompt_lens.tolist())])
    mb = {"input_ids": ids, "attention_mask": mask, "prompt_lens": prompt_lens, "responses": responses}
    logp, entropy = policy_log_probs(policy, mb, temperature=0.7, entropy="grad")
    weights = torch.linspace(-1, 1, logp.numel()).view_as(logp)
    (-((logp * weights).sum() + 0.1 * entropy.sum()) * lay.loss_scale).backward()
    out["log_probs"], out["entropy"], out["actor_grads"] = logp.detach(), entropy.detach(), grads(policy)

    torch.manual_seed(0)  # the fresh score head
    critic = models.load_value_model(model_path, ModelConfig(), trainable=True)
    ulysses.enable(critic, lay)
    values = models.token_values(critic, ids, mask)
    ((values * mask).pow(2).sum() * lay.loss_scale).backward()
    out["values"], out["critic_grads"] = (values * mask).detach(), grads(critic)

    scores = models.reward_scores(critic, ids, mask)
    (-torch.nn.functional.logsigmoid(scores[0] - scores[1:]).sum() * lay.loss_scale).backward()
    out["scores"], out["rm_grads"] = scores.detach(), grads(critic)
    out["tokens_seen"], out["head_rows"] = seen, head
    return out


def _numpy(value):
    if isinstance(value, dict):
        return {k: _numpy(v) for k, v in value.items()}
    return value.numpy() if isinstance(value, torch.Tensor) else value


def _worker(rank: int, port: int, model_path: str, queue) -> None:
    import torch.distributed as dist

    from engine.runtime import ulysses

    torch.set_num_threads(1)
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=2)
    try:
        try:
            out = _numpy(_compute(model_path, ulysses.layout(2, rank, 2)))  # tensors die with the process
        except Exception:  # noqa: BLE001  (the test fails at once, with the worker's traceback)
            import traceback

            out = traceback.format_exc()
        queue.put((rank, out))
        dist.barrier()
    finally:
        dist.destroy_process_group()


def _assert_same(a, b, what):
    if isinstance(a, dict):
        assert a.keys() == b.keys(), what
        for k in a:
            _assert_same(a[k], b[k], f"{what}.{k}")
        return
    torch.testing.assert_close(torch.as_tensor(a), b, atol=1e-5, rtol=1e-5, msg=lambda m: f"{what}: {m}")


def test_two_way_sequence_parallel_matches_one_worker(demo_assets):
    import torch.multiprocessing as mp

    from engine.runtime import ulysses

    ctx = mp.get_context("spawn")
    queue = ctx.Queue()
    port = free_port()
    procs = [ctx.Process(target=_worker, args=(r, port, demo_assets["model"], queue)) for r in range(2)]
    for p in procs:
        p.start()
    results = dict(queue.get(timeout=300) for _ in procs)
    for p in procs:
        p.join(timeout=60)
    assert not any(isinstance(r, str) for r in results.values()), results
    assert all(p.exitcode == 0 for p in procs)
    single = _compute(demo_assets["model"], ulysses.Layout())
    total = sum(LENGTHS)
    # The knob shards: each rank embeds half of the (padded) row, one worker all of it.
    assert single["tokens_seen"] == [total] * 2
    # The LM head: SFT's 70 predicting positions and the actor's 3 x 6 response positions, each rank half.
    assert single["head_rows"] == [total, 18]  # SP=1 runs the whole head (its last position's logits unused)
    assert results[0]["head_rows"] == [35, 9] and results[1]["head_rows"] == [35, 9]
    for rank in (0, 1):
        assert results[rank]["tokens_seen"] == [(total + 1) // 2] * 2
        for key in ("sft_loss", "log_probs", "entropy", "values", "scores", "sft_grads", "actor_grads",
                    "critic_grads", "rm_grads"):
            _assert_same(results[rank][key], single[key], f"rank {rank} {key}")


def test_bounds_cover_the_row_once():
    from engine.runtime.ulysses import shard_bounds

    for total in (1, 7, 8, 71):
        spans = [shard_bounds(total, 4, r) for r in range(4)]
        assert all(padded % 4 == 0 and padded >= total for *_, padded in spans)
        covered = [t for start, stop, _ in spans for t in range(start, stop)]
        assert covered == list(range(total))


def test_heads_must_split_over_the_group(demo_assets):
    from transformers import AutoConfig

    from engine import models
    from engine.runtime import ulysses

    config = AutoConfig.from_pretrained(demo_assets["model"])  # 4 heads, 4 key/value heads
    ulysses.check_heads(config, 4)
    with pytest.raises(ConfigError) as err:
        ulysses.check_heads(config, 3, "actor.ulysses_sequence_parallel_size")
    assert err.value.param == "actor.ulysses_sequence_parallel_size"
    padded = models.load_policy(demo_assets["model"], dataclasses.replace(ModelConfig(), use_remove_padding=False))
    with pytest.raises(ConfigError, match="use_remove_padding"):
        ulysses.enable(padded, ulysses.Layout(size=2))


@pytest.mark.slow
@pytest.mark.parametrize("method", ["sft", "reward_model"])
def test_two_workers_in_one_group_train_like_one(demo_assets, ray_local, tmp_path, method):
    """`ulysses_sequence_parallel_size: 2` on two workers: one data-parallel group of two sequence
    shards trains as one worker does (the first step's loss; every later step close)."""
    from engine.config import JobRequest, Resources, RewardModelConfig, SFTConfig, build_config
    from engine.methods.reward_model import run_reward_model
    from engine.methods.sft import run_sft
    from engine.runtime.reporting import RecordingReporter

    runs = {}
    for sp, workers in ((1, 1), (2, 2)):
        cfg = {"data": {"train_batch_size": 8, "max_prompt_length": 32, "max_response_length": 32},
               "optim": {"lr": 1e-3}, "trainer": {"total_training_steps": 2, "test_freq": 2},
               "max_token_len_per_gpu": 256, "ulysses_sequence_parallel_size": sp}
        cls, train, val = ((SFTConfig, "sft_train", "sft_val") if method == "sft"
                           else (RewardModelConfig, "preference_train", "preference_val"))
        req = JobRequest(job_id="t", method=method, config=build_config(cls, cfg), model_path=demo_assets["model"],
                         training_file=demo_assets[train], validation_file=demo_assets[val],
                         output_dir=str(tmp_path / f"out{sp}"), checkpoint_dir=str(tmp_path / f"ckpt{sp}"), seed=3,
                         resources=Resources(num_workers=workers, cpus_per_worker=1))
        reporter = RecordingReporter()
        (run_sft if method == "sft" else run_reward_model)(req, reporter)
        runs[sp] = [e["values"] for e in reporter.events if e["type"] == "metrics"]
    train, val = ("train/loss", "val/loss") if method == "sft" else ("rm/loss", "val/rm/loss")
    for one, two in zip(runs[1], runs[2], strict=True):
        assert two[train] == pytest.approx(one[train], rel=1e-4, abs=1e-5)
    assert runs[2][0][train] == pytest.approx(runs[1][0][train], abs=1e-5)
    assert runs[2][-1][val] == pytest.approx(runs[1][-1][val], rel=1e-4, abs=1e-5)


def test_parallel_knobs_are_checked_and_tp_reaches_vllm():
    from engine.config import PPOConfig, Resources, SFTConfig, build_config, check_parallel
    from engine.rollout.vllm import vllm_engine_kwargs

    sft = build_config(SFTConfig, {"ulysses_sequence_parallel_size": 2})
    check_parallel(sft, Resources(num_workers=4))
    with pytest.raises(ConfigError) as err:
        check_parallel(sft, Resources(num_workers=3))
    assert err.value.param == "ulysses_sequence_parallel_size"
    ppo = build_config(PPOConfig, {"critic": {"ulysses_sequence_parallel_size": 2}})  # PPO's roles shard too
    check_parallel(ppo, Resources(num_workers=2))
    with pytest.raises(ConfigError) as err:
        check_parallel(ppo, Resources(num_workers=3))
    assert err.value.param == "critic.ulysses_sequence_parallel_size"
    cfg = build_config(PPOConfig, {"rollout": {"name": "vllm", "tensor_model_parallel_size": 2}})
    kwargs = vllm_engine_kwargs(cfg, model_path="/models/policy", lora_rank=0, seed=0)
    assert kwargs["tensor_parallel_size"] == 2 and kwargs["distributed_executor_backend"] == "mp"
    with pytest.raises(ConfigError) as err:
        check_parallel(cfg, Resources(gpus_per_worker=1))
    assert err.value.param == "rollout.tensor_model_parallel_size"
    with pytest.raises(ConfigError):
        build_config(PPOConfig, {"rollout": {"tensor_model_parallel_size": 2}})  # hf has no tensor parallelism


@pytest.mark.slow
@pytest.mark.parametrize("estimator", ["gae", "grpo"])
def test_ppo_roles_on_two_workers_in_one_group_train_like_one(demo_assets, ray_local, tmp_path, estimator):
    """Actor, critic and reference with `ulysses_sequence_parallel_size: 2` on two gloo workers (one
    group sharing every row) give one worker's first step: losses, log-probs (the rollout gap and the
    PPO KL read them), values, entropy and gradient norms (a wrong 1/sp would double them)."""
    from test_ppo import make_request

    from engine.methods.ppo import PPOTrainer
    from engine.runtime.reporting import RecordingReporter

    sp = {"ulysses_sequence_parallel_size": 2}
    algo = ({"algorithm": {"adv_estimator": "grpo", "use_kl_in_reward": False}, "actor": {"use_kl_loss": True}}
            if estimator == "grpo" else {"algorithm": {"use_kl_in_reward": True}})
    runs, groups = {}, {}

    def hook(trainer, step):  # the layout every role worker trains and scores with
        groups.update({name: trainer.roles.get(trainer.roles[name].submit_all("apply", lambda r: (r.sp.size, r.sp.rank)))
                       for name in ("actor", "critic", "ref") if name in trainer.roles})

    for size, workers in ((1, 1), (2, 2)):
        overrides = {**algo, "actor": {**algo.get("actor", {}), **(sp if size > 1 else {})},
                     "critic": sp if size > 1 else {}, "ref": sp if size > 1 else {}}
        reporter = RecordingReporter()
        trainer = PPOTrainer(make_request(demo_assets, tmp_path / f"sp{size}", steps=1, workers=workers,
                                          validation=False, overrides=overrides), reporter)
        trainer.fault_hook = hook
        trainer.fit()
        runs[size] = next(e["values"] for e in reporter.events if e["type"] == "metrics" and e["step"] == 1)
    assert groups == {name: [(2, 0), (2, 1)] for name in (["actor", "critic", "ref"] if estimator == "gae"
                                                          else ["actor", "ref"])}
    names = ["actor/pg_loss", "actor/entropy", "actor/ppo_kl", "actor/grad_norm", "rollout/logprob_diff/mean",
             "critic/score/mean"]
    names += (["critic/vf_loss", "critic/values/mean", "critic/vpred_mean", "critic/grad_norm",
               "actor/reward_kl_penalty"] if estimator == "gae" else ["actor/kl_loss"])
    for name in names:
        assert runs[2][name] == pytest.approx(runs[1][name], abs=1e-5), name
