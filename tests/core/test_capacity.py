"""What a job reserves (as the engine really reserves it), whether it fits a cluster, and the capacity
the workers publish (judged on the database's clock)."""

from __future__ import annotations

import secrets
from datetime import timedelta

import pytest
from sqlalchemy import delete, update

from core.capacity import (
    Admission,
    Demand,
    Group,
    Node,
    admission,
    fits,
    fresh_nodes,
    fresh_sources,
    job_demand,
    place,
    publish,
)
from core.clock import db_now
from core.models import ClusterNode


def spec(method: str = "sft", *, reward: dict | None = None, hyper: dict | None = None, **resources) -> dict:
    m = {"type": method, "hyperparameters": hyper or {}}
    if reward is not None:
        m["reward"] = reward
    return {"method": m, "resources": resources}


def groups(demand: Demand) -> list[tuple[str, int, float, float, str]]:
    return [(g.role, g.bundles, g.cpus, g.gpus, g.strategy) for g in demand.groups]


def test_supervised_single_worker_is_held_by_the_controller_as_the_engine_does():
    from engine.config import JobRequest, Resources, SFTConfig
    from engine.runtime.jobs import controller_resources

    for method in ("sft", "reward_model", "rm_distill"):
        d = job_demand(spec(method, cpus_per_worker=3, gpus_per_worker=1))
        request = JobRequest(job_id="j", method=method, config=SFTConfig(), model_path="m", training_file="f",
                             output_dir="o", checkpoint_dir="c",
                             resources=Resources(cpus_per_worker=3, gpus_per_worker=1))
        engine = controller_resources(request)
        assert groups(d) == [("controller", 1, engine["num_cpus"], engine["num_gpus"], "PACK")]
    assert groups(job_demand(spec("sft", num_workers=4, cpus_per_worker=2, placement="strict_spread"))) == [
        ("trainer", 4, 2.0, 0.0, "STRICT_SPREAD")]


def test_ppo_reserves_one_group_colocated_or_one_per_role():
    assert groups(job_demand(spec("ppo", reward={"function": "gsm8k"}, num_workers=2, gpus_per_worker=1))) == [
        ("colocated", 2, 1.0, 1.0, "PACK")]
    separate = job_demand(spec("ppo", reward={"model": "model-x"}, num_workers=2, cpus_per_worker=2,
                               gpus_per_worker=1, colocate=False))
    assert groups(separate) == [("actor", 2, 2.0, 1.0, "PACK"), ("critic", 2, 2.0, 1.0, "PACK"),
                                ("ref", 2, 2.0, 1.0, "PACK"), ("reward", 2, 2.0, 1.0, "PACK")]
    assert (separate.cpus, separate.gpus) == (16.0, 8.0)
    # GRPO has no critic, LoRA no reference (the actor serves it), a rule reward one CPU-only worker.
    lean = job_demand(spec("ppo", reward={"function": "gsm8k"}, hyper={
        "algorithm": {"adv_estimator": "grpo"}, "model": {"lora_rank": 8}}, num_workers=2, gpus_per_worker=1,
        colocate=False))
    assert groups(lean) == [("actor", 2, 1.0, 1.0, "PACK"), ("reward", 1, 1.0, 0.0, "PACK")]
    assert job_demand(spec("ppo", reward={"function": "gsm8k"}, executor="local")).groups == ()


def test_placement_follows_rays_strategies():
    four = Demand((Group("trainer", 4, 1.0, 0.0, "PACK"),))
    assert fits(four, [(2, 0), (2, 0)])  # PACK may split over nodes
    assert not fits(Demand((Group("t", 4, 1.0, 0.0, "STRICT_PACK"),)), [(2, 0), (2, 0)])
    spread = Demand((Group("t", 3, 1.0, 0.0, "STRICT_SPREAD"),))
    assert not fits(spread, [(8, 0), (8, 0)]) and fits(spread, [(1, 0), (1, 0), (1, 0)])
    assert place(Demand((Group("c", 1, 3.0, 0.0, "PACK"),)), [(4, 0)]) == [(1.0, 0.0)]
    assert not fits(Demand((Group("c", 1, 1.0, 1.0, "PACK"),)), [(64, 0)])


NODE = Node("n1", "127.0.0.1", cpus_total=4, cpus_available=2, gpus_total=0, gpus_available=0)


def test_admission_refuses_what_never_fits_and_waits_for_what_is_busy():
    gpus = admission(job_demand(spec(gpus_per_worker=64)), [NODE])
    assert (gpus.status, gpus.code, gpus.param) == ("refuse", "resources_exceed_cluster", "resources.gpus_per_worker")
    cpus = admission(job_demand(spec(cpus_per_worker=6)), [NODE])
    assert (cpus.status, cpus.param) == ("refuse", "resources.cpus_per_worker")
    many = admission(job_demand(spec("sft", num_workers=3, cpus_per_worker=2)), [NODE])
    assert (many.status, many.param) == ("refuse", "resources.num_workers")
    assert admission(job_demand(spec(cpus_per_worker=3)), [NODE]) == Admission(
        "wait", "waiting_for_resources", None, "the cluster has not 3 CPUs and 0 GPUs free right now")
    assert admission(job_demand(spec(cpus_per_worker=2)), [NODE]).status == "ok"
    # No capacity known: only the deployment caps apply.
    assert admission(job_demand(spec(gpus_per_worker=64)), None).status == "ok"
    capped = admission(job_demand(spec("sft", num_workers=2, gpus_per_worker=4)), None, max_gpus=4)
    assert (capped.status, capped.code, capped.param) == ("refuse", "resources_over_limit", "resources.gpus_per_worker")
    capped = admission(job_demand(spec(cpus_per_worker=3)), [NODE], max_cpus=2)
    assert (capped.code, capped.param) == ("resources_over_limit", "resources.cpus_per_worker")


@pytest.fixture
def source(db):
    name = f"test:{secrets.token_hex(4)}"
    yield name
    db.rollback()
    db.execute(delete(ClusterNode).where(ClusterNode.source == name))
    db.commit()


def test_published_capacity_is_fresh_on_the_databases_clock(db, source):
    node = Node(f"node-{secrets.token_hex(6)}", "10.0.0.7", 8, 6, 2, 1)
    publish(db, source, [node])
    assert node in fresh_nodes(db)
    publish(db, source, [node])  # republishing replaces, never duplicates
    assert [n for n in fresh_nodes(db) if n.node_id == node.node_id] == [node]
    # Older than the window on the database's clock: ignored, whatever this host's clock says.
    db.execute(update(ClusterNode).where(ClusterNode.source == source)
               .values(observed_at=db_now(db) - timedelta(seconds=120)))
    db.commit()
    assert node not in (fresh_nodes(db) or [])
    assert node in fresh_nodes(db, max_age_s=600)
    assert source in fresh_sources(db, max_age_s=600) and source not in fresh_sources(db)


def test_freshness_on_sqlite_too(tmp_path):
    """The cutoff is computed in SQL (`core.clock.db_ago_sql`), which SQLite spells its own way."""
    from sqlalchemy import create_engine
    from sqlalchemy.orm import Session

    engine = create_engine(f"sqlite:///{tmp_path / 'keel.db'}")
    ClusterNode.__table__.create(engine)
    node = Node("node-1", "10.0.0.7", 8, 6, 2, 1)
    with Session(engine) as db:
        publish(db, "here", [node])
        assert fresh_nodes(db) == [node] and fresh_sources(db) == ["here"]
        db.execute(update(ClusterNode).values(observed_at=db_now(db) - timedelta(seconds=120)))
        db.commit()
        assert fresh_nodes(db) is None and fresh_sources(db) == []
        assert fresh_nodes(db, max_age_s=600) == [node] and fresh_sources(db, max_age_s=600) == ["here"]
    engine.dispose()
