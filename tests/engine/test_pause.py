"""A pause request at a step boundary: the loop checkpoints the last finished step (unless that step
already has a checkpoint), raises `Paused`, and a run resumed from that checkpoint trains the rest
exactly: each step reported once, the same weights as an uninterrupted run. SFT and DPO (the shared
supervised loop), PPO (its own loop, on the in-process executor), and the step watchdog's reporter
(evaluation: tests/engine/test_evaluate.py)."""

from __future__ import annotations

import dataclasses
import os
import sys
import time

import pytest
import torch
from safetensors.torch import load_file

from engine.config import DPOConfig, JobRequest, PPOConfig, Resources, SFTConfig, build_config
from engine.errors import Paused
from engine.methods.dpo import run_dpo
from engine.methods.ppo import run_ppo
from engine.methods.sft import run_sft
from engine.runtime.checkpoint import load_extra
from engine.runtime.reporting import RecordingReporter
from engine.runtime.watchdog import WatchedReporter


@pytest.fixture(autouse=True, scope="module")
def one_thread():
    before = torch.get_num_threads()
    torch.set_num_threads(1)  # shared CPUs; also keeps float results identical between runs
    yield
    torch.set_num_threads(before)


def sft_request(assets, tmp, *, save_freq: int = -1) -> JobRequest:
    cfg = build_config(SFTConfig, {
        "data": {"train_batch_size": 16, "max_prompt_length": 32, "max_response_length": 32},
        "optim": {"lr": 3e-3, "lr_warmup_steps_ratio": 0.2, "lr_scheduler_type": "linear"},
        "trainer": {"total_training_steps": 5, "save_freq": save_freq, "test_freq": -1}, "max_token_len_per_gpu": 256})
    return JobRequest(job_id="pause-sft", method="sft", config=cfg, model_path=assets["model"],
                      training_file=assets["sft_train"], validation_file=assets["sft_val"],
                      output_dir=str(tmp / "out"), checkpoint_dir=str(tmp / "ckpt"), seed=7,
                      resources=Resources(num_workers=1))


def dpo_request(assets, tmp) -> JobRequest:
    cfg = build_config(DPOConfig, {"data": {"train_batch_size": 16, "max_length": 96}, "max_token_len_per_gpu": 1024,
                                   "optim": {"lr": 1e-3}, "trainer": {"total_training_steps": 3, "save_freq": -1}})
    return JobRequest(job_id="pause-dpo", method="dpo", config=cfg, model_path=assets["model"],
                      training_file=assets["preference_train"], validation_file=None, output_dir=str(tmp / "out"),
                      checkpoint_dir=str(tmp / "ckpt"), seed=5, resources=Resources(num_workers=1))


def ppo_request(assets, tmp) -> JobRequest:
    cfg = build_config(PPOConfig, {
        "data": {"train_batch_size": 4, "max_prompt_length": 32, "max_response_length": 8},
        "actor": {"ppo_mini_batch_size": 2, "ppo_epochs": 1, "optim": {"lr": 1e-4}}, "rollout": {"n": 2},
        "trainer": {"total_training_steps": 3, "save_freq": -1, "test_freq": -1}})
    return JobRequest(job_id="pause-ppo", method="ppo", config=cfg, model_path=assets["model"],
                      training_file=assets["prompts_train"], validation_file=None, output_dir=str(tmp / "out"),
                      checkpoint_dir=str(tmp / "ckpt"), seed=3, reward={"function": "gsm8k"},
                      resources=Resources(executor="local"))


def weights(request: JobRequest) -> dict[str, torch.Tensor]:
    return load_file(os.path.join(request.output_dir, "model.safetensors"))


def assert_same_weights(a: dict[str, torch.Tensor], b: dict[str, torch.Tensor], atol: float = 0.0) -> None:
    assert a.keys() == b.keys()
    for key, value in a.items():
        torch.testing.assert_close(value, b[key], rtol=0, atol=atol, msg=key)


def pause_and_resume(run, request: JobRequest, pause_after: int) -> tuple[RecordingReporter, RecordingReporter]:
    paused = RecordingReporter(pause_after_step=pause_after)
    with pytest.raises(Paused) as info:
        run(request, paused)
    assert info.value.code == "paused" and info.value.data["step"] == pause_after
    assert not os.path.exists(request.output_dir)  # stopped, not finished
    checkpoints = paused.of("checkpoint")
    assert checkpoints and checkpoints[-1]["step"] == pause_after
    assert len({c["step"] for c in checkpoints}) == len(checkpoints)  # none written twice
    resumed = RecordingReporter()
    run(dataclasses.replace(request, resume_from=checkpoints[-1]["path"]), resumed)
    return paused, resumed


def test_sft_pause_checkpoints_the_last_step_and_resumes_exactly(demo_assets, tmp_path):
    full = sft_request(demo_assets, tmp_path / "full")
    run_sft(full, RecordingReporter())

    cut = sft_request(demo_assets, tmp_path / "cut")
    paused, resumed = pause_and_resume(run_sft, cut, 2)
    # save_freq -1: the only checkpoint is the pause's, at the step the loop stopped after.
    assert [c["step"] for c in paused.of("checkpoint")] == [2]
    assert load_extra(paused.of("checkpoint")[-1]["path"])["step"] == 2
    assert paused.steps() == [1, 2] and resumed.steps() == [3, 4, 5]
    assert_same_weights(weights(full), weights(cut))


def test_a_step_with_a_checkpoint_is_not_saved_again(demo_assets, tmp_path):
    request = sft_request(demo_assets, tmp_path, save_freq=2)
    paused = RecordingReporter(pause_after_step=2)
    with pytest.raises(Paused):
        run_sft(request, paused)
    assert [c["step"] for c in paused.of("checkpoint")] == [2]


def test_a_pause_before_the_first_step_trains_nothing(demo_assets, tmp_path):
    class PauseAtOnce(RecordingReporter):
        def should_pause(self):
            return True

    reporter = PauseAtOnce()
    with pytest.raises(Paused):
        run_sft(sft_request(demo_assets, tmp_path), reporter)
    assert reporter.steps() == [] and reporter.of("checkpoint") == []


def test_dpo_pause_resumes_exactly(demo_assets, tmp_path):
    full = dpo_request(demo_assets, tmp_path / "full")
    run_dpo(full, RecordingReporter())
    cut = dpo_request(demo_assets, tmp_path / "cut")
    paused, resumed = pause_and_resume(run_dpo, cut, 1)
    assert paused.steps() == [1] and resumed.steps() == [2, 3]
    assert_same_weights(weights(full), weights(cut))


@pytest.mark.slow
def test_ppo_pause_checkpoints_and_resumes_like_an_uninterrupted_run(demo_assets, tmp_path):
    full = ppo_request(demo_assets, tmp_path / "full")
    base = RecordingReporter()
    run_ppo(full, base)
    cut = ppo_request(demo_assets, tmp_path / "cut")
    paused, resumed = pause_and_resume(run_ppo, cut, 1)
    assert [c["step"] for c in paused.of("checkpoint")] == [1]
    assert paused.steps() == [1] and resumed.steps() == [2, 3]
    for name in ("actor/pg_loss", "critic/vf_loss", "critic/score/mean"):
        assert paused.series(name) + resumed.series(name) == pytest.approx(base.series(name), rel=1e-5, abs=1e-7)
    assert_same_weights(weights(full), weights(cut), atol=1e-6)


def test_the_watchdog_passes_pause_requests_through():
    inner = RecordingReporter(pause_after_step=1)
    watched = WatchedReporter(inner, step_timeout_s=60, max_duration_s=None)
    assert watched.should_pause() is False
    inner.metrics(1, {"loss": 1.0})
    assert watched.should_pause() is True and watched.should_stop() is False


class HangingCheckpoint(RecordingReporter):
    """Asks for a pause (the caller's copy at once; the controller's, a pickled copy, after step 1),
    then never finishes writing the pause's checkpoint."""

    def __init__(self) -> None:
        super().__init__(pause_after_step=1)
        self.caller_pid = os.getpid()

    def should_pause(self):
        return os.getpid() == self.caller_pid or super().should_pause()

    def checkpoint(self, step, path, metrics):
        time.sleep(3600)


@pytest.mark.slow
def test_a_controller_that_does_not_pause_in_time_is_stopped(demo_assets, ray_local, tmp_path, monkeypatch):
    """Through `engine.runtime.jobs.run_job`: the caller waits `pause_grace_s` for the method to pause, then
    kills the controller (freeing its CPUs) and reports the job paused at its previous checkpoint."""
    import ray.cloudpickle

    from engine.runtime import jobs

    ray.cloudpickle.register_pickle_by_value(sys.modules[__name__])  # the actor cannot import tests/
    monkeypatch.setattr(jobs, "pause_grace_s", lambda request: 20.0)  # (the caller's side: not the actor's)
    request = sft_request(demo_assets, tmp_path)
    with pytest.raises(Paused) as err:
        jobs.run_job(request, HangingCheckpoint())
    assert "did not pause within 20 s" in err.value.message
    assert not jobs.controller_alive(request.job_id)
    deadline = time.monotonic() + 30
    while ray_local.available_resources().get("CPU", 0) < ray_local.cluster_resources()["CPU"]:
        assert time.monotonic() < deadline, "the controller's CPUs were not freed"
        time.sleep(0.2)


def test_the_pause_grace_covers_a_step_and_its_checkpoint(demo_assets, tmp_path):
    from engine.runtime.jobs import PAUSE_SAVE_S, pause_grace_s

    request = sft_request(demo_assets, tmp_path)
    assert pause_grace_s(request) == request.config.guardrails.step_timeout_s + PAUSE_SAVE_S
