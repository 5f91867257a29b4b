"""engine.runtime.distributed without a cluster: placement strategies, where a process runs, and which
worker errors mean a lost peer (a system error: the job is re-queued) rather than the job's fault."""

from __future__ import annotations

import sys

import pytest
import torch.distributed as dist

from engine.config import Resources
from engine.runtime.distributed import (
    WorkerLost,
    _unwrap_ray_error,
    is_collective_failure,
    node_identity,
    placement_strategy,
)


@pytest.mark.parametrize(("placement", "strategy"), [("pack", "PACK"), ("spread", "SPREAD"),
                                                      ("strict_spread", "STRICT_SPREAD")])
def test_placement_maps_to_ray_strategies(placement, strategy):
    assert placement_strategy(Resources(placement=placement)) == strategy


def test_outside_ray_a_process_is_on_loopback_and_ray_is_not_imported(monkeypatch):
    monkeypatch.delitem(sys.modules, "ray", raising=False)
    where = node_identity()
    assert where["node_id"] is None and where["node_ip"] == "127.0.0.1" and where["pid"] > 0
    assert "ray" not in sys.modules


def test_collective_failures_are_told_from_the_jobs_own_errors():
    gloo = RuntimeError("[/pytorch/third_party/gloo/gloo/transport/tcp/pair.cc:537] Read error "
                        "[127.0.0.1]:32180: Connection reset by peer")
    assert is_collective_failure(gloo)
    assert is_collective_failure(dist.DistBackendError("NCCL communicator was aborted"))
    assert not is_collective_failure(RuntimeError("CUDA out of memory"))
    assert not is_collective_failure(ValueError("Connection reset by peer"))


def test_a_peers_collective_failure_surfaces_as_worker_lost(monkeypatch):
    ray = pytest.importorskip("ray")
    gloo = RuntimeError("gloo/transport/tcp/pair.cc: Connection closed by peer [127.0.0.1]:4242")
    err = ray.exceptions.RayTaskError("train_step", "traceback", gloo)
    assert isinstance(_unwrap_ray_error(err), WorkerLost)
    own = ValueError("bad column")
    assert _unwrap_ray_error(ray.exceptions.RayTaskError("train_step", "traceback", own)) is own


def test_a_group_whose_worker_creation_was_cancelled_shuts_down_and_is_built_again(monkeypatch):
    """Ray refuses to kill an actor whose creation it cancelled; `shutdown` must not let that error
    replace the WorkerLost it is cleaning up after, which `start_group` answers by building again."""
    import ray

    from engine.runtime import distributed

    removed, builds = [], []

    def refuse(actor, no_restart=True):
        raise ray.exceptions.RaySystemError("Actor creation cancelled.")

    monkeypatch.setattr(ray, "kill", refuse)
    monkeypatch.setattr(ray.util, "remove_placement_group", removed.append)
    monkeypatch.setattr(distributed, "GROUP_RESTART_DELAY_S", 0.0)

    def build():
        builds.append(1)
        group = object.__new__(distributed.WorkerGroup)
        group.workers, group._pg = ["cancelled"], f"pg-{len(builds)}"
        if len(builds) == 1:
            try:
                raise distributed.WorkerLost("The actor never ran - it was cancelled before it started running.")
            except BaseException:
                group.shutdown()
                raise
        return group

    group = distributed.start_group(build)
    assert len(builds) == 2 and removed == ["pg-1"] and group._pg == "pg-2"
