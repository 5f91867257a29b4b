"""Data parallelism: a group of identical workers (Ray actors, or one in-process object) joined by
torch.distributed (gloo on CPU, NCCL on GPU), on one node or across several.

The training logic is a plain class; `WorkerGroup` wraps it with `ray.remote` once, places the actors
with the job's `resources.placement` (Ray's PACK, SPREAD or STRICT_SPREAD), joins them into a
process group and calls methods on all of them at once. The rendezvous is the rank-0 worker's node
address as Ray reports it, on a port free there: never a literal address, so the workers may sit on
different hosts. `LocalGroup` has the same interface for a single in-process worker (no Ray, no
process group), which is what tests and single-worker runs use.
"""

from __future__ import annotations

import contextlib
import functools
import logging
import os
import socket
import time
from collections.abc import Callable, Iterable, Sequence
from typing import Any, TypeVar

import torch
import torch.distributed as dist

from engine.config import Resources
from engine.errors import EngineError
from engine.runtime.cluster import code_options, connect, running_ray

log = logging.getLogger(__name__)
T = TypeVar("T")

# Size of one flattened all-reduce: large enough to amortise the call, small enough not to double the
# memory of a big model's gradients.
_BUCKET_BYTES = 64 * 2**20
_PLACEMENT_TIMEOUT_S = 300
"""How long to wait for the cluster to fit all workers before failing the job."""
GROUP_STARTS = 3
GROUP_RESTART_DELAY_S = 5.0
"""Starts of a worker group whose workers die while starting, and the pause between them."""
RAY_STRATEGIES = {"pack": "PACK", "spread": "SPREAD", "strict_spread": "STRICT_SPREAD"}
"""`resources.placement` -> Ray placement group strategy."""


class WorkerLost(EngineError):
    """A data-parallel worker process died (a system error, not the user's)."""

    code = "worker_lost"


def usable_cores() -> int:
    """Cores this process may run on (its CPU affinity where the platform reports it)."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except AttributeError:  # not Linux
        return max(1, os.cpu_count() or 1)


def worker_threads(resources: Resources) -> int:
    """torch intra-op threads of one worker: the CPUs reserved for it (`resources.cpus_per_worker`),
    rounded down, at least 1 and at most the cores this process may use. More threads than reserved
    CPUs oversubscribe the machine, and OpenMP's spinning threads collapse under contention (2
    threads on 2 shared cores turned a 0.26 s PPO iteration into 7.2 s in bench.ppo)."""
    return max(1, min(int(resources.cpus_per_worker), usable_cores()))


class TorchThreads:
    """Set torch's intra-op thread count for a worker; `restore()` puts back what was there (a worker
    built in the caller's process must not leave its setting behind)."""

    def __init__(self, threads: int) -> None:
        self.before = torch.get_num_threads()
        self.threads = threads
        if threads != self.before:
            torch.set_num_threads(threads)

    def restore(self) -> None:
        if torch.get_num_threads() != self.before:
            torch.set_num_threads(self.before)


def world_size() -> int:
    return dist.get_world_size() if dist.is_available() and dist.is_initialized() else 1


def rank() -> int:
    return dist.get_rank() if dist.is_available() and dist.is_initialized() else 0


def node_ip() -> str:
    """This node's address as Ray reports it (the address other nodes reach it on); loopback
    outside Ray."""
    ray = running_ray()
    return ray.util.get_node_ip_address() if ray is not None else "127.0.0.1"


def node_identity() -> dict[str, Any]:
    """Where this process runs: Ray node id and IP (None/loopback outside Ray), host name and pid."""
    ray = running_ray()
    return {"node_id": ray.get_runtime_context().get_node_id() if ray is not None else None,
            "node_ip": node_ip(), "hostname": socket.gethostname(), "pid": os.getpid()}


def rendezvous() -> tuple[str, int]:
    """`(address, port)` on this node where a process group's rank 0 can listen: this node's Ray
    address and a port free on it right now."""
    host = node_ip()
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind((host, 0))
        return host, s.getsockname()[1]


def _interface_of(address: str) -> str | None:
    """The network interface that carries `address` (gloo/NCCL must use it, not whatever the host
    name resolves to)."""
    import psutil

    for name, addrs in psutil.net_if_addrs().items():
        if any(a.address == address for a in addrs):
            return name
    return None


def init_process_group(rank: int, world_size: int, endpoint: tuple[str, int], device: torch.device) -> None:
    """Join the group whose rank 0 listens on `endpoint` (from its `rendezvous()`); gloo on CPU, NCCL
    on CUDA, both on the interface that carries this node's Ray address."""
    host, port = endpoint
    os.environ.update(MASTER_ADDR=host, MASTER_PORT=str(port))
    iface = _interface_of(node_ip())
    if iface:
        os.environ.setdefault("GLOO_SOCKET_IFNAME", iface)
        os.environ.setdefault("NCCL_SOCKET_IFNAME", iface)
    backend = "nccl" if device.type == "cuda" else "gloo"
    dist.init_process_group(backend, init_method=f"tcp://{host}:{port}", rank=rank, world_size=world_size,
                            device_id=device if device.type == "cuda" else None)


def destroy_process_group() -> None:
    if dist.is_available() and dist.is_initialized():
        dist.destroy_process_group()


def all_reduce_sum(tensor: torch.Tensor) -> torch.Tensor:
    """Sum `tensor` over the group in place (a no-op without a group); returns it."""
    if world_size() > 1:
        dist.all_reduce(tensor, op=dist.ReduceOp.SUM)
    return tensor


def all_reduce_grads(params: Iterable[torch.nn.Parameter]) -> None:
    """Sum the gradients of `params` over the group, in flattened buckets (not averaged: each worker
    already scaled its loss by the global normaliser)."""
    if world_size() == 1:
        return
    # Sharded (DTensor) gradients were already reduce-scattered by FSDP2 (`engine.runtime.sharding`).
    grads = [p.grad for p in params if p.grad is not None and not hasattr(p.grad, "device_mesh")]
    bucket: list[torch.Tensor] = []
    size = 0
    for grad in grads + [None]:
        if grad is not None:
            bucket.append(grad)
            size += grad.numel() * grad.element_size()
        if bucket and (grad is None or size >= _BUCKET_BYTES):
            flat = torch.cat([g.reshape(-1) for g in bucket])
            dist.all_reduce(flat, op=dist.ReduceOp.SUM)
            offset = 0
            for g in bucket:
                g.copy_(flat[offset:offset + g.numel()].view_as(g))
                offset += g.numel()
            bucket, size = [], 0


def device_for(resources: Resources) -> torch.device:
    """CUDA when the worker was given a GPU and one is visible, else CPU."""
    if resources.gpus_per_worker > 0 and torch.cuda.is_available():
        return torch.device("cuda", 0)  # Ray sets CUDA_VISIBLE_DEVICES to the actor's GPU
    return torch.device("cpu")


class LocalGroup:
    """One worker in this process: `call` runs the method directly."""

    def __init__(self, cls: type, *args: Any) -> None:
        self.worker = cls(*args, rank=0, world_size=1)
        self.size = 1

    def call(self, method: str, *args: Any, **kwargs: Any) -> list[Any]:
        return [getattr(self.worker, method)(*args, **kwargs)]

    def call_rank0(self, method: str, *args: Any, **kwargs: Any) -> Any:
        return getattr(self.worker, method)(*args, **kwargs)

    def placement(self, role: str = "trainer") -> list[dict[str, Any]]:
        """Where the worker runs, as `WorkerGroup.placement`."""
        return [{"role": role, "rank": 0, **node_identity()}]

    def shutdown(self) -> None:
        shutdown = getattr(self.worker, "shutdown", None)
        if shutdown is not None:
            shutdown()


@functools.cache
def _remote(cls: type) -> Any:
    import ray

    return ray.remote(cls)


_PEER_GONE = ("Connection reset by peer", "Connection closed by peer", "Broken pipe", "Socket Timeout")


def is_collective_failure(exc: BaseException) -> bool:
    """A collective that failed because a peer went away (its process or node died, or it hung):
    torch's distributed errors, and gloo's transport errors, which torch raises as RuntimeError. What
    the surviving workers see when a node is lost, often before Ray reports the dead one."""
    if isinstance(exc, getattr(dist, "DistError", ())):
        return True
    text = str(exc)
    return isinstance(exc, RuntimeError) and "gloo" in text and any(s in text for s in _PEER_GONE)


def _unwrap_ray_error(err: Exception) -> Exception:
    import ray

    if isinstance(err, ray.exceptions.RayTaskError):
        cause = getattr(err, "cause", None)
        if isinstance(cause, Exception) and is_collective_failure(cause):
            return WorkerLost(f"a training worker lost its peers: {cause}")
        if isinstance(cause, Exception):
            return cause
    if isinstance(err, ray.exceptions.RayActorError | ray.exceptions.WorkerCrashedError):
        return WorkerLost(f"a training worker died: {err}")
    return err


def placement_strategy(resources: Resources) -> str:
    """The Ray placement-group strategy of `resources.placement`."""
    return RAY_STRATEGIES[resources.placement]


class WorkerGroup:
    """`num_workers` Ray actors of the plain class `cls`, joined into one torch.distributed group.

    `cls(*args, rank=r, world_size=n)` is built in each actor; it must provide `rendezvous()`,
    `init_process_group(endpoint)` and `node()`, and may provide `shutdown()`.
    """

    def __init__(self, cls: type, *args: Any, resources: Resources, ray_address: str | None = None) -> None:
        import ray
        from ray.util.placement_group import placement_group
        from ray.util.scheduling_strategies import PlacementGroupSchedulingStrategy

        connect(ray_address)
        self.size = resources.num_workers
        bundle = {"CPU": resources.cpus_per_worker}
        if resources.gpus_per_worker:
            bundle["GPU"] = resources.gpus_per_worker
        strategy = placement_strategy(resources)
        self._pg = placement_group([dict(bundle) for _ in range(self.size)], strategy=strategy)
        try:
            ray.get(self._pg.ready(), timeout=_PLACEMENT_TIMEOUT_S)
        except ray.exceptions.GetTimeoutError as err:
            ray.util.remove_placement_group(self._pg)
            raise EngineError(f"could not reserve {self.size} workers x {bundle} ({strategy}): {err}",
                              code="resources_unavailable") from None
        remote = _remote(cls)
        self.workers = [
            remote.options(
                num_cpus=resources.cpus_per_worker, num_gpus=resources.gpus_per_worker,
                scheduling_strategy=PlacementGroupSchedulingStrategy(self._pg, placement_group_bundle_index=i),
                **code_options(),
            ).remote(*args, rank=i, world_size=self.size)
            for i in range(self.size)
        ]
        try:
            endpoint = self._get([self.workers[0].rendezvous.remote()])[0]
            self._get([w.init_process_group.remote(endpoint) for w in self.workers])
        except BaseException:
            self.shutdown()
            raise

    def _get(self, refs: Sequence[Any]) -> list[Any]:
        import ray

        try:
            # Fail fast: when one worker fails, the others may be blocked in a collective forever.
            pending = list(refs)
            while pending:
                ready, pending = ray.wait(pending, num_returns=1)
                ray.get(ready)
            return ray.get(list(refs))
        except ray.exceptions.RayError as err:
            raise _unwrap_ray_error(err) from None

    def call(self, method: str, *args: Any, **kwargs: Any) -> list[Any]:
        """Call `method` on every worker at once; the results in rank order."""
        return self._get([getattr(w, method).remote(*args, **kwargs) for w in self.workers])

    def call_rank0(self, method: str, *args: Any, **kwargs: Any) -> Any:
        return self._get([getattr(self.workers[0], method).remote(*args, **kwargs)])[0]

    def placement(self, role: str = "trainer") -> list[dict[str, Any]]:
        """`{role, rank, node_id, node_ip, hostname, pid}` of every worker, in rank order."""
        return [{"role": role, "rank": i, **where} for i, where in enumerate(self.call("node"))]

    def shutdown(self) -> None:
        import ray

        for worker in self.workers if hasattr(self, "workers") else ():
            # A worker whose creation Ray cancelled cannot be killed: that error must not hide the
            # WorkerLost being handled (start_group builds the group again on that one).
            with contextlib.suppress(ray.exceptions.RayError):
                ray.kill(worker, no_restart=True)
        ray.util.remove_placement_group(self._pg)


def make_group(cls: type, *args: Any, resources: Resources, ray_address: str | None = None,
               in_process: bool | None = None) -> LocalGroup | WorkerGroup:
    """`LocalGroup` for one worker (unless `in_process=False`), else a Ray `WorkerGroup`."""
    if in_process is None:
        in_process = resources.num_workers == 1
    if in_process:
        if resources.num_workers != 1:
            raise ValueError("an in-process group has exactly one worker")
        return LocalGroup(cls, *args)
    return start_group(lambda: WorkerGroup(cls, *args, resources=resources, ray_address=ray_address))


def start_group(build: Callable[[], T]) -> T:
    """`build()` a group of Ray workers; a group whose worker died while starting is built again,
    up to `GROUP_STARTS` times: a node lost moments ago is still offered by Ray until its health
    checks fail, and a job should not spend an attempt on that."""
    for start in range(1, GROUP_STARTS + 1):
        try:
            return build()
        except WorkerLost as err:
            if start == GROUP_STARTS:
                raise
            log.warning("a worker died while its group started (%s); starting the group again", err)
            time.sleep(GROUP_RESTART_DELAY_S)
    raise AssertionError("unreachable")
