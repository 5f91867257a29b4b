"""The step watchdog and `trainer.max_duration_s`, for every method (`engine.runtime.watchdog`).

A hung loop (here: a report that never returns, as a stuck database write or collective would) fails
the job with `step_timeout` although the loop never gets back to check anything; a run past its time
limit saves a checkpoint at the next step boundary and fails with `max_duration_exceeded`."""

from __future__ import annotations

import sys
import time

import pytest

from engine.config import (
    JobRequest,
    Resources,
    RewardModelConfig,
    SFTConfig,
    build_config,
)
from engine.errors import StepTimeout
from engine.methods.reward_model import run_reward_model
from engine.methods.sft import run_sft
from engine.runtime.checkpoint import is_complete
from engine.runtime.reporting import RecordingReporter
from engine.runtime.watchdog import DURATION_GRACE_S, MaxDurationExceeded, WatchedReporter, run_watched

pytestmark = pytest.mark.usefixtures("one_thread")  # torch on one thread (tests/engine/conftest.py)


def request_for(method: str, assets, tmp, *, steps: int = 6, guardrails=None, trainer=None,
                **fields) -> JobRequest:
    common = {"optim": {"lr": 1e-3}, "trainer": {"total_training_steps": steps, **(trainer or {})},
              "guardrails": guardrails or {}}
    if method == "sft":
        cfg = build_config(SFTConfig, {**common, "data": {"train_batch_size": 8, "max_prompt_length": 32,
                                                          "max_response_length": 32}})
        data = assets["sft_train"]
    else:
        cfg = build_config(RewardModelConfig, {**common, "data": {"train_batch_size": 8, "max_length": 96}})
        data = assets["preference_train"]
    return JobRequest(job_id=f"watch-{method}", method=method, config=cfg, model_path=assets["model"],
                      training_file=data, output_dir=str(tmp / "out"), checkpoint_dir=str(tmp / "ckpt"), seed=1,
                      resources=Resources(), **fields)


ENTRY = {"sft": run_sft, "reward_model": run_reward_model}


class HangingReporter(RecordingReporter):
    """Never returns from reporting step `hang_at` (for `hang_s`)."""

    def __init__(self, hang_at: int, hang_s: float) -> None:
        super().__init__()
        self.hang_at, self.hang_s = hang_at, hang_s

    def metrics(self, step, values, *, total_steps=None, epoch=None):
        if step == self.hang_at:
            time.sleep(self.hang_s)
        super().metrics(step, values, total_steps=total_steps, epoch=epoch)


@pytest.mark.parametrize("method", ["sft", "reward_model"])
def test_a_hung_loop_fails_with_step_timeout(demo_assets, tmp_path, method):
    request = request_for(method, demo_assets, tmp_path, guardrails={"step_timeout_s": 2.0})
    reporter = HangingReporter(hang_at=2, hang_s=30)
    start = time.monotonic()
    with pytest.raises(StepTimeout) as err:
        run_watched(ENTRY[method], request, reporter)
    assert time.monotonic() - start < 25  # not the hang's 30 s: the watchdog cut it
    assert err.value.code == "step_timeout" and err.value.param == "guardrails.step_timeout_s"
    assert err.value.data["step"] == 2 and reporter.steps() == [1]
    assert 2 in reporter.beats  # the loop's heartbeat started step 2's clock


def test_a_loop_within_its_step_timeout_is_left_alone(demo_assets, tmp_path):
    reporter = HangingReporter(hang_at=2, hang_s=1.5)  # slow, not hung
    result = run_watched(run_sft, request_for("sft", demo_assets, tmp_path, steps=3,
                                              guardrails={"step_timeout_s": 60.0}), reporter)
    assert reporter.steps() == [1, 2, 3] and result.model_kind == "policy"


class Clock:
    """A monotonic clock that jumps `jump_s` once step `at` was reported (a long step, in no time)."""

    def __init__(self, at: int, jump_s: float) -> None:
        self.at, self.jump_s, self.offset = at, jump_s, 0.0

    def __call__(self) -> float:
        return time.monotonic() + self.offset


class JumpingReporter(RecordingReporter):
    def __init__(self, clock: Clock) -> None:
        super().__init__()
        self.clock = clock

    def metrics(self, step, values, *, total_steps=None, epoch=None):
        super().metrics(step, values, total_steps=total_steps, epoch=epoch)
        if step == self.clock.at:
            self.clock.offset += self.clock.jump_s


@pytest.mark.parametrize("method", ["sft", "reward_model"])
def test_max_duration_checkpoints_at_the_next_boundary_and_fails(demo_assets, tmp_path, method):
    clock = Clock(at=2, jump_s=101)
    reporter = JumpingReporter(clock)
    request = request_for(method, demo_assets, tmp_path, steps=8, trainer={"max_duration_s": 100.0})
    with pytest.raises(MaxDurationExceeded) as err:
        run_watched(ENTRY[method], request, reporter, clock=clock)
    assert err.value.code == "max_duration_exceeded" and err.value.param == "trainer.max_duration_s"
    assert reporter.steps() == [1, 2]
    (checkpoint,) = reporter.of("checkpoint")  # save_freq -1 saves only at the end: this one is the limit's
    assert checkpoint["step"] == 2 and is_complete(checkpoint["path"])
    # Without the limit the same run goes on to the end.
    unlimited = JumpingReporter(Clock(at=2, jump_s=101))
    run_watched(ENTRY[method], request_for(method, demo_assets, tmp_path / "free", steps=3), unlimited,
                clock=unlimited.clock)
    assert unlimited.steps() == [1, 2, 3]


def test_max_duration_counts_earlier_attempts(demo_assets, tmp_path):
    request = request_for("sft", demo_assets, tmp_path, trainer={"max_duration_s": 100.0}, time_used_s=150.0)
    reporter = RecordingReporter()
    with pytest.raises(MaxDurationExceeded):
        run_watched(run_sft, request, reporter)
    assert reporter.steps() == [] and reporter.of("checkpoint") == []  # nothing new trained, nothing saved


def test_the_hard_limits_of_the_watching_thread():
    now = [0.0]
    watched = WatchedReporter(RecordingReporter(), step_timeout_s=60, max_duration_s=100, clock=lambda: now[0])
    now[0] = 150
    assert watched.expired() is None  # set-up is not a step, and within the duration's grace
    now[0] = 161
    assert isinstance(watched.expired(), MaxDurationExceeded)  # but it counts for the duration
    watched = WatchedReporter(RecordingReporter(), step_timeout_s=60, max_duration_s=100, clock=lambda: now[0])
    watched.heartbeat(1)
    now[0] += 59
    assert watched.expired() is None
    now[0] += 2
    assert isinstance(watched.expired(), StepTimeout)
    watched.heartbeat(2)  # a new step restarts the step clock
    assert watched.expired() is None
    now[0] += 50  # past max_duration_s, within the grace (min(DURATION_GRACE_S, step_timeout_s))
    with pytest.raises(MaxDurationExceeded):
        watched.heartbeat(3)
    assert watched.expired() is None and DURATION_GRACE_S > 60
    now[0] += 50  # step 3 has run 50 s (< 60): but the run is 100 + 60 s old
    assert isinstance(watched.expired(), MaxDurationExceeded)  # never reached a boundary: cut


@pytest.mark.slow
def test_the_controller_fails_a_hung_loop_and_frees_ray(demo_assets, ray_local, tmp_path):
    """Through `engine.runtime.jobs.run_job`: the method runs in the controller actor, the watchdog there ends
    the run, and killing the controller frees the CPUs the hung loop held."""
    import ray.cloudpickle

    from engine.runtime.jobs import controller_alive, run_job

    ray.cloudpickle.register_pickle_by_value(sys.modules[__name__])  # the actor cannot import tests/
    request = request_for("sft", demo_assets, tmp_path, guardrails={"step_timeout_s": 2.0})
    with pytest.raises(StepTimeout) as err:
        run_job(request, HangingReporter(hang_at=2, hang_s=3600))
    assert err.value.data["step"] == 2
    assert not controller_alive(request.job_id)
    deadline = time.monotonic() + 30
    while ray_local.available_resources().get("CPU", 0) < ray_local.cluster_resources()["CPU"]:
        assert time.monotonic() < deadline, "the hung loop's CPUs were not freed"
        time.sleep(0.2)
