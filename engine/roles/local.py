"""The in-process executor (`resources.executor: local`): every PPO role lives in the driver's
process, on its one device, and Ray is never imported.

`LocalRoleCluster` has the interface of `engine.roles.remote.RoleCluster` (`cluster[name].submit`,
`submit_all`, `submit_then`, `get`, `placement`, `shutdown`), so the driver loop is the same text for
both executors. `submit` runs the call at once and returns a `Done` holding its result or its exception;
a `Done` passed as an argument to a later call is replaced by its value, as Ray resolves object
refs. Submission order is execution order, which is what a colocated Ray host does too.

What it gives up: one worker per role (no data parallelism), roles run one after another, and the
step watchdog can only notice a phase that ran past its deadline once it has finished (nothing can
interrupt a call running in this very thread).
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from engine.config import Resources
from engine.errors import ConfigError
from engine.runtime.distributed import TorchThreads, node_identity, worker_threads


@dataclass
class RoleSpec:
    """One role to start: `cls(*args, **kwargs, rank=i, world_size=num_workers, ...)` per worker. Either
    executor takes it (`engine.roles.remote.RoleCluster`, `LocalRoleCluster`); it lives here, where Ray is
    never imported."""

    name: str
    cls: type
    args: tuple = ()
    kwargs: dict[str, Any] = field(default_factory=dict)
    num_workers: int = 1
    data_parallel: bool = False
    """Join the workers into a torch.distributed group (trained roles)."""
    uses_gpu: bool = True
    separate: bool = False
    """Its own processes and placement group even when `resources.colocate` (PPO's rollout workers,
    which generate while the colocated roles train)."""


class Done:
    """A finished call: `result()` gives its value or raises what it raised."""

    __slots__ = ("error", "value")

    def __init__(self, value: Any = None, error: BaseException | None = None) -> None:
        self.value, self.error = value, error

    def result(self) -> Any:
        if self.error is not None:
            raise self.error
        return self.value


def _resolve(value: Any) -> Any:
    return value.result() if isinstance(value, Done) else value


class LocalRoleGroup:
    """The single worker of one role, called directly."""

    def __init__(self, name: str, worker: Any) -> None:
        self.name = name
        self.workers = [worker]

    def __len__(self) -> int:
        return 1

    def submit(self, worker: int, method: str, *args: Any, num_returns: int = 1, **kwargs: Any) -> Any:
        """Run `method` now; a `Done` (a tuple of `num_returns` of them when it is not 1)."""
        try:
            value = getattr(self.workers[0], method)(*map(_resolve, args),
                                                    **{k: _resolve(v) for k, v in kwargs.items()})
        except Exception as err:  # noqa: BLE001 - handed to whoever gets the result, as Ray does
            return Done(error=err) if num_returns == 1 else tuple(Done(error=err) for _ in range(num_returns))
        if num_returns == 1:
            return Done(value)
        return tuple(Done(v) for v in value)

    def submit_all(self, method: str, *args: Any, **kwargs: Any) -> list[Done]:
        return [self.submit(0, method, *args, **kwargs)]

    def submit_then(self, worker: int, method: str, args: Sequence[Any],
                    then: Sequence[tuple[Any, str, Sequence[Any]]], *, num_returns: int = 1) -> tuple[Any, ...]:
        """See `submit_then` (the module function): the calls run now, in order."""
        return submit_then(self, worker, method, args, then, num_returns=num_returns)


def submit_then(group: Any, worker: int, method: str, args: Sequence[Any],
                then: Sequence[tuple[Any, str, Sequence[Any]]], *, num_returns: int = 1) -> tuple[Any, ...]:
    """`group.submit(worker, method, *args)`, then `other.submit(worker, name, first, *more)` for each
    `(other, name, more)` of `then`, `first` being the first call's (first) output: a phase whose
    calls all read what one call produced (the rollout batch). Returns the first call's `num_returns`
    outputs, then one per entry of `then`. Either executor's groups; a colocated Ray host runs the
    whole chain in one call instead (`RoleGroup.submit_then`)."""
    head = group.submit(worker, method, *args, num_returns=num_returns)
    outs = tuple(head) if num_returns != 1 else (head,)
    return (*outs, *(other.submit(worker, name, outs[0], *more) for other, name, more in then))


def get(refs: Sequence[Done], timeout: float | None = None) -> list[Any]:
    """The results of finished calls. A phase that ended after its deadline (`timeout` 0: the driver
    computes it from the time left) raises `TimeoutError`, as Ray's `GetTimeoutError` (also a
    `TimeoutError`) would."""
    values = [ref.result() for ref in refs]
    if timeout is not None and timeout <= 0:
        raise TimeoutError("the phase finished after its deadline")
    return values


class LocalRoleCluster:
    """Every role's single worker, built in this process, one after another.

    Args:
        specs: the roles; each must have one worker.
        resources: the job's `Resources`; a GPU is used when `gpus_per_worker > 0` and one is visible.
    """

    def __init__(self, specs: Sequence[RoleSpec], resources: Resources, *,
                 startup_timeout_s: float = 0.0) -> None:
        if resources.num_workers != 1 or any(s.num_workers != 1 for s in specs if not s.separate):
            raise ConfigError("resources.executor 'local' runs one worker per role: "
                              "set resources.num_workers to 1", param="resources.num_workers")
        self.groups: dict[str, LocalRoleGroup] = {}
        self.started_s = 0.0
        start = time.perf_counter()
        # The roles run one after another in this process, each on the worker's CPUs (as a colocated
        # Ray host does); the process's own setting comes back at `shutdown`.
        self._threads = TorchThreads(worker_threads(resources))
        try:
            for spec in specs:
                worker = spec.cls(*spec.args, **spec.kwargs, rank=0, world_size=1, num_threads=None,
                                  use_gpu=resources.gpus_per_worker > 0 and spec.uses_gpu)
                self.groups[spec.name] = LocalRoleGroup(spec.name, worker)
        except BaseException:
            self.shutdown()
            raise
        self.started_s = time.perf_counter() - start

    def __getitem__(self, name: str) -> LocalRoleGroup:
        return self.groups[name]

    def __contains__(self, name: str) -> bool:
        return name in self.groups

    def get(self, refs: Sequence[Done], timeout: float | None = None) -> list[Any]:
        return get(refs, timeout)

    def placement(self) -> list[dict[str, Any]]:
        """`{role, rank, node_id, node_ip, hostname, pid}` per role: all of them this process."""
        where = node_identity()
        return [{"role": name, "rank": 0, **where} for name in self.groups]

    def shutdown(self) -> None:
        """Let every role release what it holds (idempotent)."""
        for group in self.groups.values():
            shutdown = getattr(group.workers[0], "shutdown", None)
            if shutdown is not None:
                shutdown()
        self.groups = {}
        self._threads.restore()
