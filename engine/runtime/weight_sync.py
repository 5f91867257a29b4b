"""Collective weight sync for separate rollout workers (`rollout.weight_sync: collective`): the
trainer's rank 0 and every rollout worker join a process group of their own (gloo on CPU, NCCL on
GPU; the only difference between the two paths) and the trainer broadcasts each version's trained
tensors to them, in a fixed order.

The group is built from a TCP store of its own, not `torch.distributed.init_process_group`: the
trainer ranks already share the default group (data parallelism), and a rollout worker belongs to
none of it. The trainer's rank 0 hosts the store on its node's address (`distributed.rendezvous`).

A broadcast is announced in the store (`weights/<seq>`) before it starts, and each rollout worker
receives it in a thread of its own into a staging copy: a worker that is generating still takes
its part at once, so the trainer is held only for the copy itself, and no collective waits posted
for minutes (NCCL's watchdog would abort it). The worker applies a staged version
(`RolloutWorker.load_broadcast`) in order with its generations, as the object-store path does.
"""

from __future__ import annotations

import datetime
import json
import os
import threading
import time
from typing import Any

import torch
import torch.distributed as dist
from torch import nn

from engine.errors import EngineError
from engine.runtime.distributed import _interface_of, node_ip

TIMEOUT_S = 600.0
"""How long joining the group, or one broadcast, may take."""
_IDLE_WAIT_S = 60.0
"""A receiver waits for the next announcement this long at a time (a step may take much longer)."""


def trained_tensors(model: nn.Module) -> dict[str, torch.Tensor]:
    """The tensors a version carries: the trained parameters (as `ActorRollout.export_weights`)."""
    return {k: p for k, p in sorted(model.named_parameters()) if p.requires_grad}


class WeightGroup:
    """One member of the weight-sync group: rank 0 the trainer, 1.. the rollout workers."""

    def __init__(self, endpoint: tuple[str, int], rank: int, world_size: int, device: torch.device) -> None:
        host, port = endpoint
        timeout = datetime.timedelta(seconds=TIMEOUT_S)
        iface = _interface_of(node_ip())  # as `distributed.init_process_group`: the Ray address's interface
        if iface:
            os.environ.setdefault("GLOO_SOCKET_IFNAME", iface)
            os.environ.setdefault("NCCL_SOCKET_IFNAME", iface)
        self.store = dist.TCPStore(host, port, world_size, is_master=rank == 0, timeout=timeout,
                                   wait_for_workers=False)
        if device.type == "cuda":
            torch.cuda.set_device(device)
            options = dist.ProcessGroupNCCL.Options()
            options._timeout = timeout
            self.pg = dist.ProcessGroupNCCL(self.store, rank, world_size, options)
        else:
            self.pg = dist.ProcessGroupGloo(self.store, rank, world_size, timeout)
        self.backend = "nccl" if device.type == "cuda" else "gloo"
        self.rank, self.world_size, self.device = rank, world_size, device

    def broadcast(self, tensors: list[torch.Tensor]) -> None:
        options = dist.BroadcastOptions()
        options.rootRank = 0
        for tensor in tensors:
            self.pg.broadcast([tensor], options).wait()
        if self.device.type == "cuda":
            torch.cuda.current_stream(self.device).synchronize()


class Sender:
    """The trainer's side: `send` broadcasts the model's trained tensors as broadcast number `seq`."""

    def __init__(self, group: WeightGroup, model: nn.Module) -> None:
        self.group, self.model = group, model
        tensors = trained_tensors(model)
        group.store.set("weights/names", json.dumps([[k, list(t.shape)] for k, t in tensors.items()]))
        self.seq = 0

    def send(self, version: int) -> dict[str, Any]:
        start = time.perf_counter()
        self.seq += 1
        header = torch.tensor([self.seq, version], dtype=torch.int64, device=self.group.device)
        self.group.store.set(f"weights/{self.seq}", "1")
        with torch.no_grad():
            tensors = [p.detach().contiguous() for p in trained_tensors(self.model).values()]
            self.group.broadcast([header, *tensors])
        return {"seq": self.seq, "time_s": time.perf_counter() - start}


class Receiver:
    """A rollout worker's side: a thread that takes every broadcast into a staging copy; `take(seq)`
    waits for broadcast `seq` and hands over its tensors by name."""

    def __init__(self, group: WeightGroup, model: nn.Module) -> None:
        self.group = group
        own = dict(model.named_parameters())
        names = json.loads(group.store.get("weights/names"))
        missing = [k for k, _ in names if k not in own or list(own[k].shape) != list(_)]
        if missing:
            raise EngineError(f"weight sync: the rollout worker's model has no tensor {missing[0]!r} of the "
                              "trainer's shape", code="weight_sync_failed", data={"missing": missing[:5]})
        self.like = {k: own[k] for k, _ in names}
        self.staged: dict[int, tuple[int, dict[str, torch.Tensor]]] = {}
        self.received = 0
        self.error: BaseException | None = None
        self.ready = threading.Condition()
        self.thread = threading.Thread(target=self._loop, name="weight-sync", daemon=True)
        self.thread.start()

    def _loop(self) -> None:
        try:
            if self.group.device.type == "cuda":
                torch.cuda.set_device(self.group.device)
            while True:
                seq = self.received + 1
                self._announced(f"weights/{seq}")
                header = torch.zeros(2, dtype=torch.int64, device=self.group.device)
                state = {k: torch.empty_like(t, device=self.group.device) for k, t in self.like.items()}
                self.group.broadcast([header, *state.values()])
                got, version = (int(x) for x in header.tolist())
                if got != seq:
                    raise EngineError(f"weight sync: received broadcast {got}, expected {seq}",
                                      code="weight_sync_failed", data={"expected": seq, "got": got})
                with self.ready:
                    self.staged[seq] = (version, state)
                    self.received = seq
                    self.ready.notify_all()
        except BaseException as exc:  # noqa: BLE001 - handed to the next `take`; a lost trainer ends it too
            with self.ready:
                self.error = exc
                self.ready.notify_all()

    def _announced(self, key: str) -> None:
        """Block until the trainer sets `key` (the store's server wakes the waiter: no polling)."""
        while True:
            try:
                self.group.store.wait([key], datetime.timedelta(seconds=_IDLE_WAIT_S))
                return
            except dist.DistStoreError as exc:
                if "timeout" not in str(exc).lower():
                    raise

    def take(self, seq: int, timeout_s: float = TIMEOUT_S) -> tuple[int, dict[str, torch.Tensor]]:
        """`(version, tensors)` of broadcast `seq` (older staged ones are dropped: never applied)."""
        with self.ready:
            if not self.ready.wait_for(lambda: seq in self.staged or self.error is not None, timeout=timeout_s):
                raise EngineError(f"weight sync: broadcast {seq} did not arrive in {timeout_s:.0f} s",
                                  code="weight_sync_failed", data={"seq": seq})
            if seq not in self.staged:
                raise EngineError(f"weight sync: receiving broadcast {seq} failed: {self.error}",
                                  code="weight_sync_failed", data={"seq": seq}) from self.error
            for old in [s for s in self.staged if s < seq]:
                del self.staged[old]
            return self.staged.pop(seq)


def trainer_verb(actor: Any, verb: str, *args: Any) -> Any:
    """`ActorRollout.weight_broadcast` on the trainer's rank 0: `device` (where its weights live: the
    driver's default for `rollout.weight_sync`), `join` (endpoint, world size: rank 0 of the group;
    the `Sender` is kept on the actor as `weight_sender`), `send` (the current version to every
    rollout worker; returns what the driver checks, as `export_weights`' second value, plus `seq`)."""
    from engine.rollout.sampling import weights_fingerprint

    if verb == "device":
        return actor.device.type
    if verb == "join":
        actor.weight_sender = Sender(WeightGroup(args[0], 0, args[1], actor.device), actor.model)
        return actor.weight_sender.group.backend
    if verb == "send":
        sent = actor.weight_sender.send(actor.weights_version)
        return {"version": actor.weights_version, "fingerprint": weights_fingerprint(actor.model), **sent}
    raise ValueError(f"unknown weight_broadcast verb {verb!r}")
