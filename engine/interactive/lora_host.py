"""The shared LoRA host: one frozen copy of a base model and the adapters of every LoRA trainer on it,
each trainer with its own adapter, AdamW state and pending gradients (a `TrainingSession` over a view
of the shared base, `engine.models.lora_view`). N clients of one base cost one base plus N adapters.

A plain class; `engine.interactive.host` wraps it with `ray.remote` once, as a named detached threaded
actor per base model (`engine.interactive.spec.host_name`). Operations of different trainers take
turns (`Turns`): round robin across trainers, one operation each, so a trainer with a long queue never
starves another. `has` and `stats` answer without waiting for a turn.

A trainer leaves the host by `release` (its state saved first when asked: the idle page-out); its next
operation brings it back from that save. An empty host closes: it refuses further operations with
`host_closing`, and its caller ends it (the next operation starts a new host).
"""

from __future__ import annotations

import gc
import itertools
import os
import threading
from collections import deque
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import torch
from torch import nn

from engine import models
from engine.config import ModelConfig
from engine.errors import ConfigError, EngineError
from engine.interactive.session import TrainingSession
from engine.interactive.spec import SessionSpec, host_name, shares_base
from engine.runtime.artifacts import Artifacts

STATS_CLIENT = "\0stats"
"""`stats` reads the trainers' tensors between operations: it takes a turn of its own."""


class Turns:
    """One operation at a time, round robin across clients: when an operation ends, the next client
    in ring order (the order clients first came) that has one waiting goes, each client's operations
    in their arrival order."""

    def __init__(self) -> None:
        self._cond = threading.Condition()
        self._waiting: dict[str, deque[int]] = {}
        self._ring: list[str] = []
        self._tickets = itertools.count()
        self._granted: int | None = None
        self._busy = False
        self._last: str | None = None

    @contextmanager
    def turn(self, client: str) -> Iterator[None]:
        with self._cond:
            ticket = next(self._tickets)
            self._waiting.setdefault(client, deque()).append(ticket)
            if client not in self._ring:
                self._ring.append(client)
            if not self._busy:
                self._grant()
            while self._granted != ticket:
                self._cond.wait()
        try:
            yield
        finally:
            with self._cond:
                self._busy, self._last = False, client
                self._grant()
                self._cond.notify_all()

    def _grant(self) -> None:
        ring = self._ring
        start = ring.index(self._last) + 1 if self._last in ring else 0
        for i in range(len(ring)):
            client = ring[(start + i) % len(ring)]
            queue = self._waiting.get(client)
            if queue:
                self._granted, self._busy = queue.popleft(), True
                if not queue:
                    del self._waiting[client]
                return
        self._granted = None

    def forget(self, client: str) -> None:
        """Drop a client that left from the ring (unless it has operations waiting)."""
        with self._cond:
            if client in self._ring and client not in self._waiting:
                if self._last == client:  # keep the rotation where it was
                    i = self._ring.index(client)
                    self._last = self._ring[i - 1] if len(self._ring) > 1 else None
                self._ring.remove(client)

    def waiting(self) -> int:
        """Operations waiting for a turn."""
        with self._cond:
            return sum(len(q) for q in self._waiting.values())


class LoraHost:
    """The base model of `spec` (its model, dtype and device; the first trainer's resources) and the
    LoRA trainers on it.

    Args:
        spec: the trainer that started the host; any LoRA trainer of the same `host_name` may join.
        num_threads: torch intra-op threads for the whole host (None: torch's default).
    """

    def __init__(self, spec: SessionSpec, num_threads: int | None = None) -> None:
        self.spec = spec
        self.name = host_name(spec)
        self.num_threads = num_threads
        self.base: nn.Module | None = None
        self.sessions: dict[str, TrainingSession] = {}
        self.turns = Turns()
        self.closing = False
        self._loading = threading.Lock()

    def _threads(self) -> None:
        # Ray runs each call on a thread of its pool: the count is set where the work runs.
        if self.num_threads and torch.get_num_threads() != self.num_threads:
            torch.set_num_threads(self.num_threads)

    def start(self) -> dict[str, Any]:
        """Load the base model once (frozen, in the compute dtype, as under a LoRA trainer of its own)."""
        with self._loading:  # a first operation may come while the host's own start still loads
            self._load_base()
        return {"name": self.name, "sessions": len(self.sessions)}

    def _load_base(self) -> None:
        if self.base is None:
            self._threads()
            spec = self.spec
            device = (torch.device("cuda", 0) if spec.num_gpus > 0 and torch.cuda.is_available()
                      else torch.device("cpu"))
            artifacts = Artifacts(dict(spec.storage_options or {}), spec.artifact_cache_dir)
            local = artifacts.stage(spec.model_path)
            roots = (tuple(spec.allowed_roots) or None) if local == spec.model_path else None
            path = local
            if os.path.isfile(os.path.join(local, "adapter_config.json")):  # each trainer loads the adapter itself
                path = models.adapter_base(local)
                if roots:
                    path = models.resolve_model_path(path, roots)
            self.base = models.load_policy(path, ModelConfig(dtype=spec.dtype), trainable=False,
                                           allowed_roots=roots).to(device)

    def has(self, session_id: str) -> bool:
        return session_id in self.sessions

    def run(self, spec: SessionSpec, op: str, payload: dict[str, Any], restore_from: str | None = None) -> dict:
        """Run `op` for the trainer `spec.session_id`, adding it first when it is not here (from the
        state at `restore_from`, else a fresh adapter). JSON in, JSON out, as `TrainingSession.run`."""
        with self.turns.turn(spec.session_id):
            if self.closing:
                raise EngineError("this LoRA host is closing; start another", code="host_closing")
            self._threads()
            session = self.sessions.get(spec.session_id)
            if session is None:
                session = self._join(spec, restore_from)
            return session.run(op, payload)

    def _join(self, spec: SessionSpec, restore_from: str | None) -> TrainingSession:
        if not shares_base(spec) or host_name(spec) != self.name:
            raise ConfigError(f"trainer {spec.session_id} does not belong on the LoRA host {self.name}",
                              param="model")
        self.start()
        session = TrainingSession(spec, base=self.base)
        session.start(restore_from)  # a failure leaves nothing half-restored behind: it is not kept
        self.sessions[spec.session_id] = session
        return session

    def release(self, session_id: str, save_to: str | None = None) -> dict[str, Any]:
        """Save the trainer's state to `save_to` (when given), then drop its adapter and optimizer
        state. A save that fails raises and keeps the trainer here. Returns `{saved, closing}`:
        `closing` when the host is empty now and ends (the caller kills it)."""
        with self.turns.turn(session_id):
            session = self.sessions.get(session_id)
            saved = None
            if session is not None:
                if save_to:
                    session.save_to(save_to)
                    saved = save_to
                del self.sessions[session_id]
                session = None
                gc.collect()  # the adapter's tensors go now, not at some later collection
            self.turns.forget(session_id)
            self.closing = not self.sessions and self.turns.waiting() == 0
            return {"saved": saved, "closing": self.closing}

    def stats(self) -> dict[str, Any]:
        """What the host holds, in bytes: `base` (the shared weights), per trainer `own` (its adapter,
        gradients and optimizer state), `unique` (every distinct tensor storage the host holds), and
        `shared`: whether every trainer's frozen weights are the base's own storage."""
        with self.turns.turn(STATS_CLIENT):
            base_ptrs = {p.data_ptr() for p in self.base.parameters()} if self.base is not None else set()
            seen: dict[int, int] = {}

            def add(t: torch.Tensor | None) -> int:
                if t is None or not isinstance(t, torch.Tensor):
                    return 0
                ptr = t.untyped_storage().data_ptr()
                if ptr in seen:
                    return 0
                seen[ptr] = t.untyped_storage().nbytes()
                return seen[ptr]

            base = sum(add(p) for p in self.base.parameters()) if self.base is not None else 0
            own: dict[str, int] = {}
            shared = True
            for sid, session in self.sessions.items():
                n = 0
                for p in session.model.parameters():
                    if p.requires_grad:
                        n += add(p) + add(p.grad)
                    elif p.data_ptr() not in base_ptrs:
                        shared = False
                        n += add(p)
                if session.optimizer is not None:
                    n += sum(add(v) for s in session.optimizer.state.values() for v in s.values())
                own[sid] = n
            return {"name": self.name, "base": base, "own": own, "unique": sum(seen.values()),
                    "shared": shared, "waiting": self.turns.waiting()}
