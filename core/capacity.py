"""What a job reserves on the Ray cluster, what the cluster has, whether one fits the other, and
what `resources.cpus_per_worker: auto` resolves to.

One place for the arithmetic both the API (admission at create time) and the workers (the claim
and the sweeper) use; no torch, no ray. It mirrors how the engine reserves resources:

- SFT, reward model and distillation with one worker train inside the job's controller actor, which
  then holds that worker's CPUs and GPUs (`engine.runtime.jobs.controller_resources`);
- with several workers they run in one placement group of `num_workers` bundles;
- PPO colocated, and eval (always colocated): one placement group of `num_workers` bundles, hosting
  every role;
- PPO not colocated: one placement group per role (`engine.methods.ppo.PPOTrainer._start_roles`): actor,
  critic (GAE only), reference (not with LoRA: the actor serves it), reward (`num_workers` bundles
  for a reward model, one CPU-only bundle for a rule function);
- PPO's rollout workers (`rollout.colocate: false`): a placement group of `resources.rollout_workers`
  bundles of their own, beside either layout.

Each bundle is `{CPU: cpus_per_worker, GPU: gpus_per_worker}`; `resources.placement` is the Ray
strategy of every group. `resources.executor: local` reserves nothing on Ray (the job runs in the
worker's own process). The cluster's capacity is what the workers publish into `cluster_node`
(`workers.capacity`); with none fresh enough, only the deployment caps apply.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from sqlalchemy import Float, bindparam, delete, select
from sqlalchemy.orm import Session

from core.clock import db_ago_sql, db_now_sql
from core.models import ClusterNode

log = logging.getLogger(__name__)

STALE_S = 60.0
"""Capacity rows older than this (database clock) are ignored: no worker is watching the cluster."""
IN_CONTROLLER = frozenset({"sft", "reward_model", "rm_distill", "dpo"})
"""Methods that train inside the controller actor when `num_workers == 1` (as `engine.runtime.jobs`)."""
STRATEGIES = {"pack": "PACK", "spread": "SPREAD", "strict_spread": "STRICT_SPREAD"}
_EPS = 1e-9


@dataclass(frozen=True)
class Group:
    """Bundles reserved together (one Ray placement group, or the controller's own reservation)."""

    role: str
    bundles: int
    cpus: float
    """Per bundle."""
    gpus: float
    strategy: str
    """Ray's PACK, SPREAD, STRICT_SPREAD or STRICT_PACK."""


@dataclass(frozen=True)
class Demand:
    """Everything one job reserves while it runs."""

    groups: tuple[Group, ...]

    @property
    def cpus(self) -> float:
        return sum(g.bundles * g.cpus for g in self.groups)

    @property
    def gpus(self) -> float:
        return sum(g.bundles * g.gpus for g in self.groups)


@dataclass(frozen=True)
class Node:
    node_id: str
    node_ip: str
    cpus_total: float
    cpus_available: float
    gpus_total: float
    gpus_available: float


@dataclass(frozen=True)
class Admission:
    """`ok`, `wait` (fits the cluster, not its free capacity now) or `refuse` (never fits)."""

    status: str
    code: str | None = None
    param: str | None = None
    message: str = ""


def job_demand(spec: Mapping[str, Any]) -> Demand:
    """What a job reserves, from its stored spec (the validated create request)."""
    method = spec.get("method") or {}
    kind = method.get("type")
    hp = method.get("hyperparameters") or {}
    res = spec.get("resources") or {}
    workers = int(res.get("num_workers", 1))
    cpus, gpus = float(res.get("cpus_per_worker", 1.0)), float(res.get("gpus_per_worker", 0.0))
    strategy = STRATEGIES.get(res.get("placement", "pack"), "PACK")
    if res.get("executor", "ray") == "local":  # in the worker's own process: nothing on Ray
        return Demand(())
    if kind in IN_CONTROLLER:
        if workers == 1:
            return Demand((Group("controller", 1, cpus, gpus, "PACK"),))
        return Demand((Group("trainer", workers, cpus, gpus, strategy),))
    generators = int(res.get("rollout_workers", 0) or 0) if kind in ("ppo", "distill_policy") else 0
    # PPO's rollout workers (`rollout.colocate: false`): a placement group of their own, beside the rest.
    rollout = (Group("rollout", generators, cpus, gpus, strategy),) if generators else ()
    if res.get("colocate", True) or kind == "eval":  # eval's roles are always colocated
        return Demand((Group("colocated", workers, cpus, gpus, strategy), *rollout))
    model = hp.get("model") or {}
    groups = [Group("actor", workers, cpus, gpus, strategy)]
    if (hp.get("algorithm") or {}).get("adv_estimator", "gae") == "gae":
        groups.append(Group("critic", workers, cpus, gpus, strategy))
    if not (model.get("lora_rank") or model.get("lora_adapter_path")):
        groups.append(Group("ref", workers, cpus, gpus, strategy))
    if (method.get("reward") or {}).get("model"):
        groups.append(Group("reward", workers, cpus, gpus, strategy))
    else:
        groups.append(Group("reward", 1, cpus, 0.0, strategy))
    if kind == "distill_policy":  # the teacher's own workers
        groups.append(Group("teacher", workers, cpus, gpus, strategy))
    return Demand((*groups, *rollout))


def place(demand: Demand, free: Sequence[tuple[float, float]]) -> list[tuple[float, float]] | None:
    """Place every group on nodes with `(cpus, gpus)` free each, as Ray's strategies allow; returns
    what is left free per node, or None when the demand does not fit. Greedy, biggest groups first,
    onto the nodes with the most free: a heuristic, exact for the usual one or two groups."""
    left = [[c, g] for c, g in free]

    def room(i: int, n: int, group: Group) -> bool:
        return left[i][0] + _EPS >= n * group.cpus and left[i][1] + _EPS >= n * group.gpus

    def take(i: int, n: int, group: Group) -> None:
        left[i][0] -= n * group.cpus
        left[i][1] -= n * group.gpus

    for group in sorted(demand.groups, key=lambda g: (g.bundles * g.gpus, g.bundles * g.cpus), reverse=True):
        order = sorted(range(len(left)), key=lambda i: (left[i][1], left[i][0]), reverse=True)
        if group.strategy == "STRICT_PACK":
            node = next((i for i in order if room(i, group.bundles, group)), None)
            if node is None:
                return None
            take(node, group.bundles, group)
        elif group.strategy == "STRICT_SPREAD":
            nodes = [i for i in order if room(i, 1, group)][:group.bundles]
            if len(nodes) < group.bundles:
                return None
            for i in nodes:
                take(i, 1, group)
        else:  # PACK and SPREAD may split the group over nodes
            for _ in range(group.bundles):
                node = next((i for i in order if room(i, 1, group)), None)
                if node is None:
                    return None
                take(node, 1, group)
    return [(c, g) for c, g in left]


def fits(demand: Demand, free: Sequence[tuple[float, float]]) -> bool:
    """Whether `demand` can be placed on nodes with `(cpus, gpus)` free each (see `place`)."""
    return place(demand, free) is not None


def admission(demand: Demand, nodes: Sequence[Node] | None, *, max_cpus: float = 0.0,
              max_gpus: float = 0.0) -> Admission:
    """Refuse a job over the deployment caps (`KEEL_MAX_JOB_*`, 0 = none) or bigger than the whole
    cluster; tell one that fits the cluster but not its free capacity to wait. `nodes` None (no
    fresh capacity known): only the caps apply."""
    if max_gpus > 0 and demand.gpus > max_gpus + _EPS:
        return Admission("refuse", "resources_over_limit", "resources.gpus_per_worker",
                         f"the job reserves {_n(demand.gpus)} GPUs in all; this deployment allows at most "
                         f"{_n(max_gpus)} per job (KEEL_MAX_JOB_GPUS)")
    if max_cpus > 0 and demand.cpus > max_cpus + _EPS:
        return Admission("refuse", "resources_over_limit", "resources.cpus_per_worker",
                         f"the job reserves {_n(demand.cpus)} CPUs in all; this deployment allows at most "
                         f"{_n(max_cpus)} per job (KEEL_MAX_JOB_CPUS)")
    if not nodes:
        return Admission("ok")
    if not fits(demand, [(n.cpus_total, n.gpus_total) for n in nodes]):
        cpus = sum(n.cpus_total for n in nodes)
        gpus = sum(n.gpus_total for n in nodes)
        biggest = max((n.gpus_total, n.cpus_total) for n in nodes)
        bundle = max((g for g in demand.groups), key=lambda g: (g.gpus, g.cpus))
        if not any(n.gpus_total + _EPS >= bundle.gpus for n in nodes):
            param = "resources.gpus_per_worker"
        elif not any(n.cpus_total + _EPS >= bundle.cpus and n.gpus_total + _EPS >= bundle.gpus for n in nodes):
            param = "resources.cpus_per_worker"
        else:
            param = "resources.num_workers"
        return Admission("refuse", "resources_exceed_cluster", param,
                         f"the job reserves {_n(demand.cpus)} CPUs and {_n(demand.gpus)} GPUs "
                         f"({_groups(demand)}); the Ray cluster has {_n(cpus)} CPUs and {_n(gpus)} GPUs on "
                         f"{len(nodes)} node(s), the largest {_n(biggest[1])} CPUs and {_n(biggest[0])} GPUs")
    if not fits(demand, [(n.cpus_available, n.gpus_available) for n in nodes]):
        return Admission("wait", "waiting_for_resources", None,
                         f"the cluster has not {_n(demand.cpus)} CPUs and {_n(demand.gpus)} GPUs free right now")
    return Admission("ok")


def auto_cpus_per_worker(spec: Mapping[str, Any], nodes: Sequence[Node] | None, *, cap: int,
                         max_cpus: float = 0.0) -> int:
    """What `resources.cpus_per_worker: auto` resolves to when a job is created (the API stores the
    number; nothing downstream sees `auto`). A CPU-only job gets the most whole CPUs per worker, at
    most `cap` (`KEEL_AUTO_CPUS_PER_WORKER_MAX`), with which it still fits the whole cluster, every node
    taken as empty and the bundles placed as `admission` places them, and `max_cpus`
    (`KEEL_MAX_JOB_CPUS`, 0 = none). `executor: local` counts as one bundle on one node: all its
    threads run in one process. 1 for a job with GPUs: GPUs place it and do its compute. 1 with no
    fresh capacity (no worker has published yet): it is always admissible by the cluster's size, and
    any more could make the job too big for a cluster nobody has seen. 1 too when even 1 does not fit:
    admission then refuses the job with its own message."""
    res = dict(spec.get("resources") or {})
    if float(res.get("gpus_per_worker", 0.0)) > 0 or not nodes:
        return 1
    local = res.get("executor", "ray") == "local"

    def demand(cpus: int) -> Demand:
        if local:
            return Demand((Group("local", 1, float(cpus), 0.0, "PACK"),))
        return job_demand({**spec, "resources": {**res, "cpus_per_worker": float(cpus)}})

    bundles = demand(1).cpus  # every bundle holds `cpus_per_worker`: the job's CPUs are bundles x c
    free = [(n.cpus_total, n.gpus_total) for n in nodes]
    top = min(cap, math.floor(max(c for c, _ in free) + _EPS), math.floor(sum(c for c, _ in free) / bundles + _EPS))
    if max_cpus > 0:
        top = min(top, math.floor(max_cpus / bundles + _EPS))
    return next((c for c in range(top, 1, -1) if fits(demand(c), free)), 1)


def _n(x: float) -> str:
    return str(int(x)) if math.isclose(x, round(x)) else f"{x:g}"


def _groups(demand: Demand) -> str:
    return ", ".join(f"{g.role}: {g.bundles} x {{CPU: {_n(g.cpus)}, GPU: {_n(g.gpus)}}}" for g in demand.groups)


# --- the published capacity ------------------------------------------------------------------------

def publish(db: Session, source: str, nodes: Sequence[Node]) -> None:
    """Replace what `source` published before with `nodes`, stamped with the database's clock."""
    db.execute(delete(ClusterNode).where(ClusterNode.source == source))
    ids = [n.node_id for n in nodes]
    if ids:  # another source may have published the same nodes (a second worker on the cluster)
        db.execute(delete(ClusterNode).where(ClusterNode.node_id.in_(ids)))
    for n in nodes:
        db.add(ClusterNode(node_id=n.node_id, node_ip=n.node_ip, cpus_total=n.cpus_total,
                           cpus_available=n.cpus_available, gpus_total=n.gpus_total,
                           gpus_available=n.gpus_available, source=source, observed_at=db_now_sql()))
    db.commit()


_NODES = ClusterNode.__table__.c
NODE_COLUMNS = (_NODES.node_id, _NODES.node_ip, _NODES.cpus_total, _NODES.cpus_available, _NODES.gpus_total,
                _NODES.gpus_available)
"""A `Node`'s fields, in order (table columns, not the mapped class: the rows become `Node`s, so the
ORM's loading would be work thrown away)."""
FRESH = _NODES.observed_at >= db_ago_sql(bindparam("max_age_s", type_=Float()))
"""A capacity row published within `max_age_s` (a parameter of the statement), on the database's clock:
no round trip of its own to read that clock. To select fresh nodes in a statement of one's own
(`nodes_of` turns the rows into `Node`s)."""
_FRESH_NODES = select(*NODE_COLUMNS).where(FRESH).order_by(_NODES.node_id)
"""Built once (every job create reads it): its cache key is computed once."""


def nodes_of(rows: Iterable[Sequence[Any]]) -> list[Node] | None:
    """`Node`s from rows holding `NODE_COLUMNS` (null ones, an outer join's no-node row, skipped); None
    when there are none, as `fresh_nodes`."""
    return [Node(*row) for row in rows if row[0] is not None] or None


def fresh_nodes(db: Session, max_age_s: float = STALE_S) -> list[Node] | None:
    """The nodes published within `max_age_s` (database clock); None when there are none."""
    return nodes_of(db.execute(_FRESH_NODES, {"max_age_s": float(max_age_s)}))


def fresh_sources(db: Session, max_age_s: float = STALE_S) -> list[str]:
    """Who published capacity within `max_age_s`."""
    return sorted(set(db.scalars(select(ClusterNode.source).where(FRESH), {"max_age_s": float(max_age_s)}).all()))
