"""torch's intra-op threads per worker come from the CPUs the job gives it (`resources.cpus_per_worker`,
`engine.runtime.distributed.worker_threads`): the supervised worker (SFT, reward model, distillation, DPO) and
the roles of PPO / GRPO / eval, also when they run in the caller's process, which gets its own
setting back afterwards."""

from __future__ import annotations

import pytest
import torch

from engine.config import DPOConfig, JobRequest, Resources, build_config
from engine.runtime.distributed import usable_cores, worker_threads
from engine.runtime.reporting import RecordingReporter


def test_worker_threads_follow_cpus_per_worker():
    assert worker_threads(Resources()) == 1  # the default: one CPU per worker, one thread
    assert worker_threads(Resources(cpus_per_worker=0.5)) == 1
    assert worker_threads(Resources(cpus_per_worker=4096)) == usable_cores()  # never more than the cores
    if usable_cores() >= 2:
        assert worker_threads(Resources(cpus_per_worker=2)) == 2


@pytest.fixture
def restore_threads():
    before = torch.get_num_threads()
    yield
    torch.set_num_threads(before)


def _dpo_request(assets, tmp, cpus: float) -> JobRequest:
    cfg = build_config(DPOConfig, {"data": {"train_batch_size": 8, "max_length": 96}, "max_token_len_per_gpu": 1024,
                                   "trainer": {"total_training_steps": 2}})
    return JobRequest(job_id="dpo-threads", method="dpo", config=cfg, model_path=assets["model"],
                      training_file=assets["preference_val"], output_dir=str(tmp / "out"),
                      checkpoint_dir=str(tmp / "ckpt"), seed=1, resources=Resources(cpus_per_worker=cpus))


@pytest.mark.parametrize(("process", "cpus"), [(2, 1), (1, 2)])
def test_an_in_process_worker_trains_on_its_cpus_and_gives_the_setting_back(process, cpus, demo_assets, tmp_path,
                                                                           restore_threads):
    if max(process, cpus) > usable_cores():
        pytest.skip(f"needs {max(process, cpus)} cores")
    from engine.methods.dpo import DPOTask
    from engine.methods.supervised import run_supervised

    seen: list[int] = []

    class Recording(DPOTask):
        def forward(self, model, examples):
            seen.append(torch.get_num_threads())
            return super().forward(model, examples)

    torch.set_num_threads(process)
    run_supervised(_dpo_request(demo_assets, tmp_path, cpus), RecordingReporter(), Recording,
                   config_cls=DPOConfig, model_kind="policy")
    assert seen and set(seen) == {cpus}
    assert torch.get_num_threads() == process


class _Probe:
    """A role that remembers the thread count it was built and called with."""

    def __init__(self, *, rank: int, world_size: int, num_threads: int | None, use_gpu: bool) -> None:
        self.built_with = torch.get_num_threads()

    def threads(self) -> int:
        return torch.get_num_threads()


@pytest.mark.parametrize(("process", "cpus"), [(2, 1), (1, 2)])
def test_local_roles_run_on_the_workers_cpus(process, cpus, restore_threads):
    if max(process, cpus) > usable_cores():
        pytest.skip(f"needs {max(process, cpus)} cores")
    from engine.roles.local import LocalRoleCluster
    from engine.roles.remote import RoleSpec

    torch.set_num_threads(process)
    cluster = LocalRoleCluster([RoleSpec("probe", _Probe)], Resources(executor="local", cpus_per_worker=cpus))
    probe = cluster["probe"].workers[0]
    assert probe.built_with == cpus and probe.threads() == cpus
    cluster.shutdown()
    assert torch.get_num_threads() == process
