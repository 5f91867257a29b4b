"""Pipelined rollout (issue 33, `engine.methods.ppo_async`) end to end on the demo assets (CPU, local
Ray, one trainer worker and one rollout worker): the weights reach the rollout worker by version, the
samples lag by exactly the staleness the mode allows, the behaviour policy's log-probs enter the
importance ratio, `partial: continue` moves half of a batch onto the newer weights, a weight sync
that delivers other weights fails the job, and a run resumed from a checkpoint trains on exactly
the batches the uninterrupted run generated ahead."""

from __future__ import annotations

import dataclasses
import time

import pytest
import torch
from test_ppo import assert_same_weights, make_request, merge, weights

from engine.config import Resources
from engine.errors import Cancelled, ConfigError, EngineError
from engine.methods.ppo import PPOTrainer, run_ppo
from engine.rewards.rules import register_reward, unregister_reward
from engine.runtime.reporting import RecordingReporter

pytestmark = pytest.mark.slow

GRPO = {"algorithm": {"adv_estimator": "grpo"}, "actor": {"optim": {"lr": 1e-3}},
        "guardrails": {"rollback_kl": 100.0, "warn_kl": 100.0}}
PIPELINE_METRICS = ("rollout/staleness/mean", "rollout/staleness/max", "timing_s/wait_rollout",
                    "timing_s/wait_update", "perf/rollout_idle_frac", "perf/trainer_idle_frac")


REWARD = "test_async_lower_half"


@pytest.fixture(scope="module", autouse=True)
def lower_half():
    """A rule reward the tiny random model climbs from about 0.5 (the share of response tokens in the
    lower half of the vocabulary): every step moves the weights, so a stale sample is measurably so."""
    register_reward(REWARD)(lambda response, ground_truth, *, response_ids, **_:
                            sum(t < 512 for t in response_ids) / max(1, len(response_ids)))
    yield
    unregister_reward(REWARD)


def _run(assets, tmp, rollout: dict, *, steps: int = 4, extra: dict | None = None, reporter=None, **kw):
    separate = rollout.get("colocate", True) is False
    request = make_request(assets, tmp, steps=steps, validation=False, reward={"function": REWARD},
                           overrides=merge(merge(GRPO, {"rollout": rollout}), extra or {}), **kw)
    request = dataclasses.replace(request, resources=Resources(rollout_workers=1 if separate else 0))
    reporter = reporter or RecordingReporter()
    return run_ppo(request, reporter), reporter


def test_stale_samples_default_to_truncated_is_unless_the_job_says():
    """`rollout_correction.rollout_is` defaults to `token` where samples are stale (docs/async-rollout.md,
    learning parity); fresh samples, or a job that sets either correction (null included), keep theirs."""
    from engine.config import PPOConfig, build_config

    def corr(rollout: dict, given: dict | None = None):
        spec = {"rollout": rollout, **({"algorithm": {"rollout_correction": given}} if given is not None else {})}
        c = build_config(PPOConfig, spec).algorithm.rollout_correction
        return c.rollout_is, c.rollout_rs
    assert corr({"mode": "one_step_off"}) == ("token", None)
    assert corr({"mode": "async", "max_staleness": 2, "colocate": False}) == ("token", None)
    assert corr({}) == corr({"colocate": False}) == (None, None)
    assert corr({"mode": "async", "colocate": False}, {"rollout_is": None}) == (None, None)
    assert corr({"mode": "one_step_off"}, {"rollout_rs": "sequence"}) == (None, "sequence")
    assert corr({"mode": "one_step_off"}, {"rollout_is": "sequence"}) == ("sequence", None)


@pytest.fixture(scope="module")
def sync_run(demo_assets, ray_local, tmp_path_factory):
    return _run(demo_assets, tmp_path_factory.mktemp("sync"), {})


def test_sync_on_a_rollout_worker_trains_exactly_as_colocated(sync_run, demo_assets, ray_local, tmp_path):
    """Each step the rollout worker samples from the weights the trainer just made: the run is the
    colocated one, to the bit (a missed or wrong weight sync samples other responses). Unset
    `rollout.weight_sync` on CPU is the object store: the rollout worker joins no group."""
    groups = []

    def hook(trainer, step):
        ref = trainer.roles["rollout"].submit(0, "apply", lambda worker: worker.receiver is None)
        groups.append(trainer.dispatch.gather({"r": [ref]}, time.perf_counter() + 60, "test", step)["r"][0])
    PPOTrainer.fault_hook = staticmethod(hook)
    try:
        result, reporter = _run(demo_assets, tmp_path, {"colocate": False})
    finally:
        PPOTrainer.fault_hook = None
    assert groups == [True] * 4
    assert reporter.series("rollout/staleness/max") == [0.0] * 4
    initial = weights(demo_assets["model"])
    assert any(not torch.equal(v, initial[k]) for k, v in weights(result.output_dir).items())  # it learned
    assert_same_weights(weights(result.output_dir), weights(sync_run[0].output_dir))
    assert reporter.series("critic/score/mean") == sync_run[1].series("critic/score/mean")
    assert [p["role"] for p in reporter.of("placement")[-1]["workers"] if p["role"] == "rollout"] == ["rollout"]


ONE_STEP_OFF_EXTRA = {"algorithm": {"rollout_correction": {"rollout_is": "token"}}}


@pytest.fixture(scope="module")
def one_step_off_run(demo_assets, ray_local, tmp_path_factory):
    return _run(demo_assets, tmp_path_factory.mktemp("one_step_off"), {"colocate": False, "mode": "one_step_off"},
                extra=ONE_STEP_OFF_EXTRA)


def test_one_step_off_samples_from_the_previous_version_and_corrects_for_it(sync_run, one_step_off_run):
    result, reporter = one_step_off_run
    for name in PIPELINE_METRICS:
        assert len(reporter.series(name)) == 4, name
    assert reporter.series("rollout/staleness/max") == [0.0, 1.0, 1.0, 1.0]
    # Truncated IS against the behaviour policy: weight 1 while the samples are fresh, not after.
    is_weight = reporter.series("rollout_corr/is_weight_mean")
    assert is_weight[0] == pytest.approx(1.0, abs=1e-5)
    assert all(abs(w - 1.0) > 1e-4 for w in is_weight[1:]), is_weight
    assert all(0.0 <= f <= 1.0 for f in reporter.series("perf/trainer_idle_frac"))
    sync = weights(sync_run[0].output_dir)
    assert any(not torch.equal(v, sync[k]) for k, v in weights(result.output_dir).items())


def test_async_lags_by_max_staleness_and_partial_continue_halves_it(demo_assets, ray_local, tmp_path):
    _, finish = _run(demo_assets, tmp_path / "finish", {"colocate": False, "mode": "async", "max_staleness": 2})
    assert finish.series("rollout/staleness/max") == [0.0, 1.0, 2.0, 2.0]
    assert finish.series("rollout/staleness/mean") == [0.0, 1.0, 2.0, 2.0]
    _, cont = _run(demo_assets, tmp_path / "continue", {"colocate": False, "mode": "async", "max_staleness": 2,
                                                         "partial": "continue"})
    # The second half of each batch's prompt groups is generated after the next update, on its weights.
    assert cont.series("rollout/staleness/max") == [0.0, 1.0, 2.0, 2.0]
    assert cont.series("rollout/staleness/mean") == [0.0, 0.5, 1.5, 1.5]


def test_colocated_one_step_off_queues_the_next_generation_on_the_actor(sync_run, demo_assets, ray_local, tmp_path):
    _, reporter = _run(demo_assets, tmp_path, {"mode": "one_step_off"}, steps=3)
    assert reporter.series("rollout/staleness/max") == [0.0, 1.0, 1.0]
    assert "rollout" not in {p["role"] for p in reporter.of("placement")[-1]["workers"]}


def test_collective_weight_sync_needs_ray_workers(demo_assets, tmp_path):
    """The in-process executor runs the trainer and the rollout worker in one process, one call at a
    time: no group to join, so `collective` is refused (unset resolves to the object store there)."""
    request = make_request(demo_assets, tmp_path, steps=1, validation=False, reward={"function": REWARD},
                           overrides=merge(GRPO, {"rollout": {"colocate": False, "weight_sync": "collective"}}))
    request = dataclasses.replace(request, resources=Resources(rollout_workers=1, executor="local"))
    with pytest.raises(ConfigError) as err:
        run_ppo(request, RecordingReporter())
    assert err.value.param == "rollout.weight_sync"


@pytest.mark.parametrize("weight_sync", ["object_store", "collective"])
def test_a_weight_sync_that_delivers_other_weights_fails(demo_assets, ray_local, tmp_path, weight_sync):
    """A rollout worker whose engine ends up holding other weights than it was sent (a bad copy)."""
    def corrupt(worker):
        sync = worker.rollout.sync_weights

        def drift_then_sync(model):  # the copy goes wrong between the load and the engine taking it
            with torch.no_grad():
                next(p for p in model.parameters() if p.requires_grad).add_(1e-3)
            sync(model)
        worker.rollout.sync_weights = drift_then_sync

    def hook(trainer, step):
        if step == 1:
            trainer.dispatch.gather({"c": [trainer.roles["rollout"].submit(0, "apply", corrupt)]},
                                    time.perf_counter() + 60, "test", step)
    PPOTrainer.fault_hook = staticmethod(hook)
    try:
        with pytest.raises(EngineError) as err:
            _run(demo_assets, tmp_path, {"colocate": False, "mode": "one_step_off", "weight_sync": weight_sync},
                 steps=3)
    finally:
        PPOTrainer.fault_hook = None
    assert err.value.code == "weight_sync_failed"
    assert err.value.data["version"] == 1


def test_collective_weight_sync_gives_every_step_the_trainers_weights(sync_run, demo_assets, ray_local, tmp_path):
    """`rollout.weight_sync: collective` on CPU: the trainer and the rollout worker (two Ray actors)
    join a gloo group on loopback and each version is broadcast. Before every update the rollout
    worker holds the trainer's version and fingerprint, having received one broadcast per version,
    and the run is the colocated one to the bit."""
    seen = []

    def held(worker):  # closures: Ray pickles them by value (the test module is not importable there)
        return {"version": worker.version, "fingerprint": worker.rollout.fingerprint,
                "received": worker.receiver.received if worker.receiver is not None else 0}

    def trained(actor):
        from engine.rollout.sampling import weights_fingerprint
        return {"version": actor.weights_version, "fingerprint": weights_fingerprint(actor.model)}

    def hook(trainer, step):
        roles, deadline = trainer.roles, time.perf_counter() + 60
        got = trainer.dispatch.gather({"r": [roles["rollout"].submit(0, "apply", held)],
                                       "a": [roles["actor"].submit(0, "apply", trained)]}, deadline, "test", step)
        seen.append((step, got["r"][0], got["a"][0]))
    PPOTrainer.fault_hook = staticmethod(hook)
    try:
        result, reporter = _run(demo_assets, tmp_path, {"colocate": False, "weight_sync": "collective"})
    finally:
        PPOTrainer.fault_hook = None
    assert [s for s, _, _ in seen] == [1, 2, 3, 4]
    for step, held, trained in seen:
        assert held["received"] == step  # versions 0..step-1, one broadcast each
        assert (held["version"], held["fingerprint"]) == (trained["version"], trained["fingerprint"]) == \
            (step - 1, held["fingerprint"])
    assert len({held["fingerprint"] for _, held, _ in seen}) == 4
    assert all(t >= 0.0 for t in reporter.series("timing_s/weight_sync"))
    assert_same_weights(weights(result.output_dir), weights(sync_run[0].output_dir))
    assert reporter.series("critic/score/mean") == sync_run[1].series("critic/score/mean")


def test_collective_one_step_off_is_the_object_store_run_to_the_bit(one_step_off_run, demo_assets, ray_local,
                                                                    tmp_path):
    result, reporter = _run(demo_assets, tmp_path, {"colocate": False, "mode": "one_step_off",
                                                     "weight_sync": "collective"}, extra=ONE_STEP_OFF_EXTRA)
    assert reporter.series("rollout/staleness/max") == [0.0, 1.0, 1.0, 1.0]
    assert reporter.series("critic/score/mean") == one_step_off_run[1].series("critic/score/mean")
    assert_same_weights(weights(result.output_dir), weights(one_step_off_run[0].output_dir))


@pytest.mark.parametrize("rollout", [{"colocate": False, "mode": "one_step_off"},
                                     {"colocate": False, "mode": "async", "max_staleness": 2, "partial": "continue"}],
                         ids=["one_step_off", "async"])
def test_resume_trains_on_the_batches_recorded_in_flight(demo_assets, ray_local, tmp_path, rollout):
    extra = {"trainer": {"save_freq": 2}}
    full, full_reporter = _run(demo_assets, tmp_path / "full", rollout, extra=extra)
    stopped = RecordingReporter(stop_after_step=2)
    with pytest.raises(Cancelled):
        _run(demo_assets, tmp_path / "a", rollout, extra=extra, reporter=stopped)
    checkpoint = stopped.of("checkpoint")[-1]["path"]
    resumed, reporter = _run(demo_assets, tmp_path / "b", rollout, extra=extra, resume_from=checkpoint)
    assert reporter.steps() == [3, 4]
    assert reporter.series("rollout/staleness/mean") == full_reporter.series("rollout/staleness/mean")[2:]
    assert stopped.series("critic/score/mean") + reporter.series("critic/score/mean") == \
        full_reporter.series("critic/score/mean")
    assert_same_weights(weights(resumed.output_dir), weights(full.output_dir))
