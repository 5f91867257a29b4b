"""The one place where role classes become Ray actors, and where they are placed.

`REMOTE_CLASSES` wraps each plain role class, and `Colocated`, with `ray.remote` once.
`RoleCluster` starts the workers of every role and places them:

- colocated (`resources.colocate`, the default; VERL's fused worker): one placement group of
  `num_workers` bundles of `{CPU: cpus_per_worker, GPU: gpus_per_worker}` and one process per bundle
  that hosts worker `i` of every role (`Colocated`), so the roles share the device and the Python
  runtime, and run one after another;
- separate: one placement group per role and one process per worker of each role, each a whole
  bundle, so the roles run concurrently.

Every placement group uses the job's `resources.placement` (PACK by default; SPREAD or
STRICT_SPREAD put the workers on several nodes): data-parallel workers meet at the rank-0 worker's
node address (`engine.runtime.distributed.rendezvous`). With `num_workers > 1` the workers of each trained role (actor, critic)
form a torch.distributed group (colocated: the processes form one group that both roles use; the
driver submits to every worker in the same order, so collectives line up). Nothing here blocks per
call: `RoleGroup.submit` returns object refs and the driver gathers them once per phase.
"""

from __future__ import annotations

import contextlib
from collections.abc import Sequence
from typing import Any

try:
    import ray
    from ray.util.placement_group import placement_group, remove_placement_group
    from ray.util.scheduling_strategies import PlacementGroupSchedulingStrategy
except ImportError:  # the in-process executor's callers import only `RoleSpec` through here
    ray = None

from engine.config import Resources
from engine.errors import EngineError
from engine.roles.actor import ActorRollout
from engine.roles.critic import Critic
from engine.roles.local import RoleSpec, submit_then
from engine.roles.reference import Reference
from engine.roles.reward import Reward
from engine.roles.rollout_worker import RolloutWorker
from engine.roles.teacher import Teacher
from engine.runtime.cluster import code_options
from engine.runtime.distributed import WorkerLost, is_collective_failure, placement_strategy, worker_threads


class Colocated:
    """Worker `rank` of several roles in one process: `call(role, method, ...)` dispatches to it.

    Args:
        roles: `(name, cls, args, kwargs)` per hosted role; each is built with this rank and
            `world_size` (the number of colocated processes).
    """

    def __init__(self, roles: Sequence[tuple[str, type, tuple, dict[str, Any]]], *, rank: int = 0,
                 world_size: int = 1, num_threads: int | None = None, use_gpu: bool = False) -> None:
        self.roles = {name: cls(*args, **kwargs, rank=rank, world_size=world_size, num_threads=num_threads,
                                use_gpu=use_gpu) for name, cls, args, kwargs in roles}
        self.first = next(iter(self.roles.values()))

    def ready(self) -> bool:
        return True

    def rendezvous(self) -> tuple[str, int]:
        return self.first.rendezvous()

    def node(self) -> dict[str, Any]:
        return self.first.node()

    def init_process_group(self, endpoint: tuple[str, int]) -> None:
        self.first.init_process_group(endpoint)  # one group per process, shared by its roles
        if self.first.world_size > 1:
            for role in self.roles.values():
                if role is not self.first:
                    role.after_process_group()  # e.g. fsdp2 sharding over the shared group

    def call(self, role: str, method: str, *args: Any, **kwargs: Any) -> Any:
        return getattr(self.roles[role], method)(*args, **kwargs)

    def chain(self, first: tuple[str, str, tuple], then: Sequence[tuple[str, str, tuple]],
              num_returns: int) -> tuple:
        """`call(*first)`, then `call(role, method, head, *args)` for each of `then`, `head` being the
        first call's (first) output, all in this process: one Ray call, and what the first call hands
        the others (the rollout batch) never goes through the object store. Returns the first call's
        `num_returns` outputs, then one per entry of `then`. Arguments are values (object refs inside
        the tuples are not resolved)."""
        role, method, args = first
        out = self.call(role, method, *args)
        outs = tuple(out) if num_returns != 1 else (out,)
        return (*outs, *(self.call(r, m, outs[0], *a) for r, m, a in then))


REMOTE_CLASSES: dict[type, Any] = ({cls: ray.remote(cls)
                                    for cls in (ActorRollout, Critic, Reference, Reward, RolloutWorker, Teacher, Colocated)}
                                   if ray is not None else {})
"""Each role class (and the colocated host) wrapped with `ray.remote`, once."""


class RoleGroup:
    """The workers of one role, in rank order (Ray actors of the role class, or `Colocated` hosts
    addressed by role name)."""

    def __init__(self, name: str, workers: Sequence[Any], *, hosted: bool = False) -> None:
        self.name = name
        self.workers = list(workers)
        self.hosted = hosted

    def __len__(self) -> int:
        return len(self.workers)

    def _method(self, worker: Any, method: str, num_returns: int = 1) -> tuple[Any, tuple]:
        handle = worker.call if self.hosted else getattr(worker, method)
        if num_returns != 1:
            handle = handle.options(num_returns=num_returns)
        return handle, ((self.name, method) if self.hosted else ())

    def submit(self, worker: int, method: str, *args: Any, num_returns: int = 1, **kwargs: Any) -> Any:
        """Call `method` on worker `worker % len(self)`; returns its object ref(s) without waiting."""
        handle, prefix = self._method(self.workers[worker % len(self.workers)], method, num_returns)
        return handle.remote(*prefix, *args, **kwargs)

    def submit_all(self, method: str, *args: Any, **kwargs: Any) -> list[Any]:
        """The same call on every worker (e.g. `snapshot`, `load_checkpoint`)."""
        refs = []
        for worker in self.workers:
            handle, prefix = self._method(worker, method)
            refs.append(handle.remote(*prefix, *args, **kwargs))
        return refs

    def submit_then(self, worker: int, method: str, args: Sequence[Any],
                    then: Sequence[tuple[RoleGroup, str, Sequence[Any]]], *, num_returns: int = 1) -> tuple[Any, ...]:
        """`engine.roles.local.submit_then`: `method` on `worker`, then each call of `then` on its
        group's same worker with the first output as its first argument. When one colocated host
        serves every group's worker, the chain is one call to it (`Colocated.chain`): on this
        machine a dependent call that reads a 200 KB batch from the object store cost 4-6 ms against
        1.4 ms for an empty one."""
        host = self.workers[worker % len(self.workers)]
        if then and self.hosted and all(g.hosted and g.workers[worker % len(g.workers)] is host for g, _, _ in then):
            return tuple(host.chain.options(num_returns=num_returns + len(then)).remote(
                (self.name, method, tuple(args)), [(g.name, m, tuple(a)) for g, m, a in then], num_returns))
        return submit_then(self, worker, method, args, then, num_returns=num_returns)


def unwrap_ray_error(err: BaseException) -> BaseException:
    """The exception a worker raised, or `WorkerLost` when the worker process died."""
    if isinstance(err, ray.exceptions.RayTaskError):
        cause = getattr(err, "cause", None)
        if isinstance(cause, Exception) and is_collective_failure(cause):
            return WorkerLost(f"a role worker lost its peers: {cause}")
        if isinstance(cause, BaseException):
            return cause
    if isinstance(err, ray.exceptions.RayActorError | ray.exceptions.WorkerCrashedError):
        return WorkerLost(f"a role worker died: {err}")
    return err


def get(refs: Sequence[Any], timeout: float | None = None) -> list[Any]:
    """`ray.get` with worker errors unwrapped (timeouts propagate as `ray.exceptions.GetTimeoutError`)."""
    try:
        return ray.get(list(refs), timeout=timeout)
    except ray.exceptions.GetTimeoutError:
        raise
    except ray.exceptions.RayError as err:
        raise unwrap_ray_error(err) from None


class RoleCluster:
    """Start, place and join the workers of all roles; `shutdown` kills them and frees the resources.

    Args:
        specs: the roles to start.
        resources: the job's `Resources`.
        startup_timeout_s: how long to wait for resources and model loading.
    """

    def __init__(self, specs: Sequence[RoleSpec], resources: Resources, *, startup_timeout_s: float = 600.0) -> None:
        self.groups: dict[str, RoleGroup] = {}
        self._pgs: list[Any] = []
        self._handles: list[Any] = []
        if ray is None:
            raise EngineError("resources.executor 'ray' needs Ray installed; 'local' runs without it",
                              code="invalid_config", param="resources.executor")
        try:
            self._start(specs, resources, startup_timeout_s)
        except BaseException:
            self.shutdown()
            raise

    def __getitem__(self, name: str) -> RoleGroup:
        return self.groups[name]

    def __contains__(self, name: str) -> bool:
        return name in self.groups

    def get(self, refs: Sequence[Any], timeout: float | None = None) -> list[Any]:
        """`get` below: the driver gathers through its cluster, whichever executor built it."""
        return get(refs, timeout)

    def _start(self, specs: Sequence[RoleSpec], resources: Resources, timeout: float) -> None:
        cpus, gpus, workers = resources.cpus_per_worker, resources.gpus_per_worker, resources.num_workers
        bundle = {"CPU": cpus, **({"GPU": gpus} if gpus else {})}
        strategy = placement_strategy(resources)
        # A role that must run beside the others (`RoleSpec.separate`: rollout workers) gets its own
        # placement group and processes even when the rest are colocated.
        own_specs = [s for s in specs if s.separate] if resources.colocate else list(specs)
        hosted_specs = [s for s in specs if not s.separate] if resources.colocate else []
        if resources.colocate:
            self._pgs.append(placement_group([dict(bundle) for _ in range(workers)], strategy=strategy))
        if own_specs:
            for spec in own_specs:
                own = {"CPU": cpus, **({"GPU": gpus} if gpus and spec.uses_gpu else {})}
                self._pgs.append(placement_group([dict(own) for _ in range(spec.num_workers)], strategy=strategy))
        try:
            ray.get([pg.ready() for pg in self._pgs], timeout=timeout)
        except ray.exceptions.GetTimeoutError:
            raise EngineError(f"could not reserve the PPO roles' resources within {timeout:.0f}s "
                              f"({workers} x {bundle}, colocate={resources.colocate})",
                              code="resources_unavailable") from None
        env = code_options()

        def options(pg: Any, index: int, num_gpus: float) -> dict[str, Any]:
            return dict(num_cpus=cpus, num_gpus=num_gpus, **env, scheduling_strategy=PlacementGroupSchedulingStrategy(
                pg, placement_group_bundle_index=index))

        # torch threads per worker (a colocated host runs its roles one after another, so all of them
        # use the bundle's CPUs): `worker_threads`, from the CPUs reserved for it.
        threads = worker_threads(resources)
        parallel: list[RoleGroup] = []
        handles = []
        if resources.colocate:
            hosts = [REMOTE_CLASSES[Colocated].options(**options(self._pgs[0], i, gpus)).remote(
                [(s.name, s.cls, s.args, s.kwargs) for s in hosted_specs if i < s.num_workers],
                rank=i, world_size=workers, num_threads=threads, use_gpu=gpus > 0) for i in range(workers)]
            for spec in hosted_specs:
                self.groups[spec.name] = RoleGroup(spec.name, hosts[:spec.num_workers], hosted=True)
            if workers > 1 and any(s.data_parallel for s in hosted_specs):
                parallel = [RoleGroup("hosts", hosts)]
            handles = hosts
        if own_specs:
            for spec, pg in zip(own_specs, self._pgs[1:] if resources.colocate else self._pgs):
                num_gpus = gpus if spec.uses_gpu else 0.0
                group = [REMOTE_CLASSES[spec.cls].options(**options(pg, i, num_gpus)).remote(
                    *spec.args, **spec.kwargs, rank=i, world_size=spec.num_workers, num_threads=threads,
                    use_gpu=num_gpus > 0) for i in range(spec.num_workers)]
                self.groups[spec.name] = RoleGroup(spec.name, group)
                handles += group
                if spec.data_parallel and spec.num_workers > 1:
                    parallel.append(self.groups[spec.name])
        self._handles = handles
        try:
            get([h.ready.remote() for h in handles], timeout=timeout)
            endpoints = get([g.workers[0].rendezvous.remote() for g in parallel], timeout=timeout)
            get([w.init_process_group.remote(endpoint) for g, endpoint in zip(parallel, endpoints)
                 for w in g.workers], timeout=timeout)
        except ray.exceptions.GetTimeoutError:
            raise EngineError(f"the PPO role workers did not start within {timeout:.0f}s",
                              code="resources_unavailable") from None

    def placement(self) -> list[dict[str, Any]]:
        """`{role, rank, node_id, node_ip, hostname, pid}` of every role worker (`job.placement`)."""
        names = [(name, rank) for name, group in self.groups.items() for rank in range(len(group))]
        wheres = get([self.groups[name].workers[rank].node.remote() for name, rank in names])
        return [{"role": name, "rank": rank, **where} for (name, rank), where in zip(names, wheres)]

    def shutdown(self) -> None:
        """Kill every worker and release the placement groups (idempotent)."""
        for handle in getattr(self, "_handles", []):
            with contextlib.suppress(ValueError, ray.exceptions.RayError):  # already gone
                ray.kill(handle, no_restart=True)
        self._handles = []
        self.groups = {}
        for pg in self._pgs:
            with contextlib.suppress(ValueError, ray.exceptions.RayError):
                remove_placement_group(pg)
        self._pgs = []
