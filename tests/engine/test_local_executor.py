"""`resources.executor: local`: PPO's roles as plain objects in the driver's process, no Ray actors.

The driver loop is the same text for both executors, so the same job with the same seed must train
to the same weights either way (sampling is counter-based; one thread on both sides). The no-Ray
claim itself is proven by tests/bench/test_gpu_check.py, which runs without Ray installed.
"""

from __future__ import annotations

import dataclasses
import os

import pytest
import torch
from safetensors.torch import load_file

from engine.config import JobRequest, PPOConfig, Resources, build_config
from engine.errors import ConfigError
from engine.methods.ppo import PPOTrainer
from engine.roles.local import Done, LocalRoleGroup, get
from engine.runtime.reporting import RecordingReporter

TINY = {"data": {"train_batch_size": 4, "max_prompt_length": 32, "max_response_length": 8},
        "actor": {"ppo_mini_batch_size": 2, "ppo_epochs": 1, "optim": {"lr": 1e-4}}, "rollout": {"n": 2},
        "trainer": {"total_training_steps": 2}}


class Echo:
    def pair(self, x):
        return x, x * 2

    def add(self, a, b=0):
        return a + b

    def fail(self):
        raise ValueError("boom")


def test_calls_resolve_earlier_results_and_keep_errors_for_get():
    group = LocalRoleGroup("echo", Echo())
    first, second = group.submit(0, "pair", 3, num_returns=2)
    total = group.submit(5, "add", first, b=second)  # any worker index: there is one
    assert get([first, second, total]) == [3, 6, 9]
    failed = group.submit(0, "fail")
    with pytest.raises(ValueError, match="boom"):
        get([total, failed])
    dependent = group.submit(0, "add", failed)  # a failed input fails the call that needed it
    with pytest.raises(ValueError):
        dependent.result()
    # A phase whose work ended after its deadline (no time left) is a timeout, as with Ray.
    with pytest.raises(TimeoutError):
        get([Done(1)], timeout=0.0)
    assert get([Done(1)], timeout=5.0) == [1]


def request_for(assets, tmp, executor: str) -> JobRequest:
    return JobRequest(job_id=f"local-{executor}", method="ppo", config=build_config(PPOConfig, TINY),
                      model_path=assets["model"], training_file=assets["prompts_train"],
                      output_dir=str(tmp / executor / "out"), checkpoint_dir=str(tmp / executor / "ckpt"),
                      seed=3,
                      reward={"function": "gsm8k"}, resources=Resources(executor=executor))


@pytest.mark.slow
def test_local_ppo_runs_in_process_and_matches_ray(demo_assets, ray_local, tmp_path):
    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # as the Ray workers (cpus_per_worker=1)
    pids = []

    def hook(trainer, step):
        pids.extend(trainer.roles.get(trainer.roles["actor"].submit_all("apply", lambda role: os.getpid())))

    try:
        local = PPOTrainer(request_for(demo_assets, tmp_path, "local"), RecordingReporter())
        local.fault_hook = hook
        local_result = local.fit()
        assert pids == [os.getpid()] * 2  # the actor ran in this very process
        remote = PPOTrainer(request_for(demo_assets, tmp_path, "ray"), RecordingReporter())
        remote.fault_hook = hook
        remote_result = remote.fit()
        assert pids[2:] and pids[2] != os.getpid()  # ...and under Ray in a worker process
    finally:
        torch.set_num_threads(threads)
    a = load_file(os.path.join(local_result.output_dir, "model.safetensors"))
    b = load_file(os.path.join(remote_result.output_dir, "model.safetensors"))
    initial = load_file(os.path.join(demo_assets["model"], "model.safetensors"))
    assert a.keys() == b.keys()
    assert any(not torch.equal(a[k], initial[k]) for k in a)  # it trained
    for key in a:
        torch.testing.assert_close(a[key], b[key], rtol=0, atol=1e-6, msg=key)
    for name in ("critic/score/mean", "actor/pg_loss"):
        assert local_result.metrics[name] == pytest.approx(remote_result.metrics[name], abs=1e-5), name


def test_local_executor_refuses_several_workers(demo_assets, tmp_path):
    request = request_for(demo_assets, tmp_path, "local")
    request = dataclasses.replace(request, resources=Resources(executor="local", num_workers=2))
    with pytest.raises(ConfigError) as err:
        from engine.runtime.jobs import run_job

        run_job(request, RecordingReporter())
    assert err.value.param == "resources.num_workers"
