"""FSDP2 sharding (`model.strategy: fsdp2`): same results as ddp, half the state per worker with two
workers, exact sharded resume, a plain Hugging Face export, the offload knobs and gradient
checkpointing."""

from __future__ import annotations

import dataclasses
import os

import pytest
import torch
from safetensors.torch import load_file

from bench.common import free_port
from engine.config import (
    JobRequest,
    ModelConfig,
    PPOConfig,
    Resources,
    RewardModelConfig,
    SFTConfig,
    build_config,
)
from engine.errors import Cancelled, ConfigError
from engine.runtime.checkpoint import CheckpointError
from engine.runtime.reporting import RecordingReporter

pytestmark = pytest.mark.usefixtures("one_thread")  # torch on one thread (tests/engine/conftest.py)


def request(assets, tmp, method, *, strategy, workers=2, steps=3, model=None, trainer=None) -> JobRequest:
    cfg = {"data": {"train_batch_size": 16, "max_prompt_length": 32, "max_response_length": 32},
           "optim": {"lr": 3e-3}, "trainer": {"total_training_steps": steps, "test_freq": steps, **(trainer or {})},
           "max_token_len_per_gpu": 256, "model": {"strategy": strategy, **(model or {})}}
    cls, train, val = ((SFTConfig, "sft_train", "sft_val") if method == "sft"
                       else (RewardModelConfig, "preference_train", "preference_val"))
    return JobRequest(job_id="t", method=method, config=build_config(cls, cfg), model_path=assets["model"],
                      training_file=assets[train], validation_file=assets[val], output_dir=str(tmp / "out"),
                      checkpoint_dir=str(tmp / "ckpt"), seed=7, resources=Resources(num_workers=workers))


def run(req: JobRequest, reporter: RecordingReporter | None = None):
    from engine.methods.reward_model import run_reward_model
    from engine.methods.sft import run_sft

    reporter = reporter or RecordingReporter()
    result = (run_sft if req.method == "sft" else run_reward_model)(req, reporter)
    return result, reporter


# --- two workers on the real Ray path ---------------------------------------------------------------

@pytest.mark.slow
def test_fsdp2_matches_ddp_with_half_the_state(demo_assets, ray_local, tmp_path):
    runs = {s: run(request(demo_assets, tmp_path / s, "sft", strategy=s)) for s in ("ddp", "fsdp2")}
    (ddp_out, ddp), (fsdp_out, fsdp) = runs["ddp"], runs["fsdp2"]
    for name in ("train/loss", "val/loss", "train/grad_norm"):
        assert fsdp.series(name) == pytest.approx(ddp.series(name), rel=1e-4), name
    ddp_bytes = ddp.series("perf/model_state_bytes_per_worker")[-1]
    fsdp_bytes = fsdp.series("perf/model_state_bytes_per_worker")[-1]
    assert fsdp_bytes <= 0.6 * ddp_bytes, (fsdp_bytes, ddp_bytes)
    assert fsdp.series("train/loss")[-1] < fsdp.series("train/loss")[0]  # it learned

    from transformers import AutoModelForCausalLM

    exported = AutoModelForCausalLM.from_pretrained(fsdp_out.output_dir).state_dict()
    reference = AutoModelForCausalLM.from_pretrained(ddp_out.output_dir).state_dict()
    assert exported.keys() == reference.keys()
    for key, value in reference.items():
        torch.testing.assert_close(exported[key], value, rtol=1e-4, atol=1e-5, msg=key)


@pytest.mark.slow
def test_fsdp2_reward_model_resumes_exactly_from_shards(demo_assets, ray_local, tmp_path):
    """Reward model (backbone and score head called directly), gradient checkpointing on: a run cut
    after its step-2 checkpoint and resumed from the shards ends bitwise equal to an uncut run."""
    kw = {"strategy": "fsdp2", "steps": 4, "model": {"enable_gradient_checkpointing": True},
          "trainer": {"save_freq": 2}}
    full, _ = run(request(demo_assets, tmp_path / "full", "reward_model", **kw))
    cut = request(demo_assets, tmp_path / "cut", "reward_model", **kw)
    with pytest.raises(Cancelled):
        run(cut, RecordingReporter(stop_after_step=2))
    step2 = os.path.join(cut.checkpoint_dir, "step_2")
    assert {"model.rank0.safetensors", "model.rank1.safetensors", "shards.json"} <= set(os.listdir(step2))
    resumed, reporter = run(dataclasses.replace(cut, resume_from=cut.checkpoint_dir))
    assert reporter.steps() == [3, 4]
    a = load_file(os.path.join(full.output_dir, "model.safetensors"))
    b = load_file(os.path.join(resumed.output_dir, "model.safetensors"))
    assert a.keys() == b.keys()
    for key in a:
        assert torch.equal(a[key], b[key]), key

    from transformers import AutoModelForSequenceClassification

    assert AutoModelForSequenceClassification.from_pretrained(full.output_dir).score.out_features == 1
    with pytest.raises(CheckpointError, match="resume it with 2 workers"):  # shards fit their world size
        run(dataclasses.replace(cut, resume_from=step2, resources=Resources(num_workers=1),
                                ))


# --- the sharding primitives in two local gloo processes ----------------------------------------------

def _offload_worker(rank: int, port: int, model_dir: str, queue) -> None:
    import torch.distributed as dist

    from engine import models
    from engine.config import FSDPConfig, OptimConfig
    from engine.runtime import sharding
    from engine.schedule import build_optimizer

    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    torch.set_num_threads(1)
    dist.init_process_group("gloo", rank=rank, world_size=2)
    try:
        out = {}
        for name, knobs in (("none", FSDPConfig()), ("both", FSDPConfig(param_offload=True, optimizer_offload=True))):
            torch.manual_seed(0)
            model = models.load_policy(model_dir, ModelConfig(), trainable=True)
            sharded = sharding.shard_model(model, knobs, dtype=torch.float32, device=torch.device("cpu"))
            optimizer = build_optimizer(model, OptimConfig())
            offload = sharding.OptimizerOffload(optimizer, torch.device("cpu")) if knobs.optimizer_offload else None
            ids = torch.randint(3, 800, (2, 12), generator=torch.Generator().manual_seed(rank))
            for _ in range(2):
                loss = model(input_ids=ids).logits.float().logsumexp(-1).mean()
                loss.backward()
                optimizer.step()
                optimizer.zero_grad()
            # FSDP2 keeps its offload choice per parameter group (no public getter).
            groups = [g for m, _ in sharded.units for g in m._get_fsdp_state()._fsdp_param_groups]
            out[name] = {"offload": {p.offload_to_cpu for g in groups for p in g.fsdp_params},
                         "moves": offload.moves if offload else 0,
                         "weights": sharding.full_state_dict(model)}
        if rank == 0:
            queue.put({k: {**v, "weights": {n: t.numpy() for n, t in v["weights"].items()}} for k, v in out.items()})
        dist.barrier()
    finally:
        dist.destroy_process_group()


def test_offload_knobs_reach_fsdp_and_leave_results_alone(demo_assets):
    import torch.multiprocessing as mp

    port = free_port()
    ctx = mp.get_context("spawn")
    queue = ctx.Queue()
    procs = [ctx.Process(target=_offload_worker, args=(r, port, demo_assets["model"], queue)) for r in range(2)]
    for p in procs:
        p.start()
    out = queue.get(timeout=300)
    for p in procs:
        p.join(timeout=60)
    assert all(p.exitcode == 0 for p in procs)
    assert out["none"]["offload"] == {False} and out["both"]["offload"] == {True}
    assert out["none"]["moves"] == 0 and out["both"]["moves"] == 4  # to the device and back, per step
    for key, value in out["none"]["weights"].items():
        assert (out["both"]["weights"][key] == value).all(), key


# --- gradient checkpointing and config rules ------------------------------------------------------------

def _saved_activations(model: torch.nn.Module, forward) -> int:
    count = 0

    def pack(t):
        nonlocal count
        count += 1
        return t

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        forward(model).sum().backward()
    return count


@pytest.mark.parametrize("head", ["policy", "reward_model"])
def test_gradient_checkpointing_is_applied_to_trained_models(demo_assets, head):
    """`model.enable_gradient_checkpointing` reaches every trained model (SFT and actor policies;
    reward model, distillation student and critic value heads): fewer activations are kept."""
    from engine import models

    ids = torch.randint(3, 800, (2, 24), generator=torch.Generator().manual_seed(0))
    mask = torch.ones_like(ids)
    load = models.load_policy if head == "policy" else models.load_reward_model
    forward = ((lambda m: models.logits_at(m, ids, mask, torch.arange(24).expand(2, -1)).float())
               if head == "policy" else (lambda m: models.reward_scores(m, ids, mask)))
    counts = {}
    for on in (False, True):
        torch.manual_seed(0)
        model = load(demo_assets["model"], ModelConfig(enable_gradient_checkpointing=on), trainable=True)
        assert model.is_activation_checkpointing == on
        counts[on] = _saved_activations(model, forward)
    assert counts[True] < counts[False]


@pytest.mark.parametrize(("cls", "data", "param"), [
    (SFTConfig, {"model": {"strategy": "fsdp2", "lora_rank": 4}}, "model.strategy"),
    (SFTConfig, {"model": {"fsdp_config": {"param_offload": True}}}, "model.fsdp_config.param_offload"),
    (PPOConfig, {"model": {"strategy": "fsdp2"}}, "model.strategy"),
    (PPOConfig, {"model": {"lora_rank": 4}, "actor": {"strategy": "fsdp2"}}, "actor.strategy"),
    (PPOConfig, {"critic": {"fsdp_config": {"optimizer_offload": True}}}, "critic.fsdp_config.optimizer_offload"),
])
def test_strategy_rules(cls, data, param):
    with pytest.raises(ConfigError) as err:
        build_config(cls, data)
    assert err.value.param == param


@pytest.mark.slow
def test_ppo_fsdp2_actor_and_critic_match_ddp(demo_assets, ray_local, tmp_path):
    """`actor.strategy` / `critic.strategy` fsdp2 with 2 workers: same losses and weights as ddp,
    half the actor + critic state per worker (checkpoints and the export go through the shards)."""
    from engine.methods.ppo import run_ppo

    out = {}
    for strategy in ("ddp", "fsdp2"):
        reporter = RecordingReporter()
        cfg = build_config(PPOConfig, {
            "data": {"train_batch_size": 4, "max_prompt_length": 32, "max_response_length": 8},
            "actor": {"ppo_mini_batch_size": 2, "ppo_epochs": 1, "optim": {"lr": 1e-4}, "strategy": strategy},
            "critic": {"strategy": strategy}, "rollout": {"n": 2},
            "trainer": {"total_training_steps": 2, "save_freq": 2, "test_freq": 2}})
        req = JobRequest(job_id="ppo", method="ppo", config=cfg, model_path=demo_assets["model"],
                         training_file=demo_assets["prompts_train"], validation_file=demo_assets["prompts_val"],
                         output_dir=str(tmp_path / strategy / "out"), checkpoint_dir=str(tmp_path / strategy / "ckpt"),
                         seed=7, reward={"function": "gsm8k"}, resources=Resources(num_workers=2))
        result = run_ppo(req, reporter)
        out[strategy] = (reporter, load_file(os.path.join(result.output_dir, "model.safetensors")))
    (ddp, ddp_w), (fsdp, fsdp_w) = out["ddp"], out["fsdp2"]
    for name in ("actor/pg_loss", "critic/vf_loss", "actor/grad_norm", "critic/grad_norm"):
        assert fsdp.series(name) == pytest.approx(ddp.series(name), rel=1e-4, abs=1e-7), name
    # ddp's plain CPU parameters step with the fused AdamW kernel, fsdp2's DTensor shards with foreach:
    # their rounding differs, and Adam's normalisation lifts it near zero gradients, to about 2e-6
    # after two steps; a wrong update would be off by about a step (lr 1e-4).
    for key, value in ddp_w.items():
        torch.testing.assert_close(fsdp_w[key], value, rtol=1e-4, atol=1e-5, msg=key)
    name = "perf/model_state_bytes_per_worker"
    assert fsdp.series(name)[-1] <= 0.6 * ddp.series(name)[-1]
    assert set(os.listdir(os.path.join(tmp_path, "fsdp2", "ckpt", "step_2", "actor"))) >= {
        "model.rank0.safetensors", "model.rank1.safetensors", "shards.json"}
