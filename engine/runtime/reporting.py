"""How a running method talks to whoever runs it: metrics, checkpoints, logs, warnings, stop, pause.

The service passes an implementation that writes the job's event log; tests and benchmarks use
`RecordingReporter`. Implementations must be picklable (they travel into Ray actors).
"""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence
from typing import Any, Protocol


class Reporter(Protocol):
    def metrics(self, step: int, values: Mapping[str, float], *, total_steps: int | None = None,
                epoch: int | None = None) -> None:
        """Record one training step's metrics (VERL-style names such as `actor/pg_loss`)."""

    def checkpoint(self, step: int, path: str, metrics: Mapping[str, float]) -> None:
        """A complete checkpoint directory for `step` now exists at `path`."""

    def log(self, message: str) -> None:
        """A human-readable progress line."""

    def warning(self, code: str, message: str, data: Mapping[str, Any] | None = None) -> None:
        """A guardrail fired (e.g. `kl_high`, `rollback`); training continues."""

    def should_stop(self) -> bool:
        """True when the job was cancelled; methods check it between steps."""

    def should_pause(self) -> bool:
        """True when the job was asked to pause: methods check it between steps, save a checkpoint of
        the last finished step (unless one exists) and raise `engine.errors.Paused`."""

    def placement(self, workers: Sequence[Mapping[str, Any]]) -> None:
        """Where the job's workers landed: `{role, rank, node_id, node_ip, ...}` each."""

    def heartbeat(self, step: int | None = None) -> None:
        """The training loop is alive, at `step`: called at every step (and phase) boundary. The
        step watchdog times steps by it (`engine.runtime.watchdog`); the service also beats for the
        controller with it. Cheap: implementations throttle what they write."""

    def manifest(self, data: Mapping[str, Any]) -> None:
        """What this attempt runs with, as the node sees it (`engine.runtime.manifest.collect`), recorded when
        it starts. Optional: `engine.runtime.manifest.record` skips a reporter without it."""

    def samples(self, step: int, rows: Sequence[Mapping[str, Any]]) -> None:
        """A few of the step's rollouts, `{prompt, response, reward}` each (size-capped by the method).
        Optional: `engine.methods.ppo_samples.report` skips a reporter without it."""


class RecordingReporter:
    """Keeps every report in memory, in order: for tests, benchmarks and the CLI."""

    def __init__(self, stop_after_step: int | None = None, pause_after_step: int | None = None) -> None:
        self.events: list[dict[str, Any]] = []
        self.beats: list[int | None] = []
        """`heartbeat` steps, in order (kept apart from `events`: they are many and carry nothing)."""
        self.stop_after_step = stop_after_step
        self.pause_after_step = pause_after_step

    def _add(self, kind: str, **data: Any) -> None:
        self.events.append({"type": kind, "time": time.time(), **data})

    def metrics(self, step, values, *, total_steps=None, epoch=None):
        self._add("metrics", step=step, values=dict(values), total_steps=total_steps, epoch=epoch)

    def checkpoint(self, step, path, metrics):
        self._add("checkpoint", step=step, path=path, metrics=dict(metrics))

    def log(self, message):
        self._add("log", message=message)

    def warning(self, code, message, data=None):
        self._add("warning", code=code, message=message, data=dict(data or {}))

    def placement(self, workers):
        self._add("placement", workers=[dict(w) for w in workers])

    def heartbeat(self, step=None):
        self.beats.append(step)

    def manifest(self, data):
        self._add("manifest", data=dict(data))

    def samples(self, step, rows):
        self._add("samples", step=step, rows=[dict(r) for r in rows])

    def should_stop(self) -> bool:
        steps = self.steps()
        return self.stop_after_step is not None and bool(steps) and steps[-1] >= self.stop_after_step

    def should_pause(self) -> bool:
        steps = self.steps()
        return self.pause_after_step is not None and bool(steps) and steps[-1] >= self.pause_after_step

    def of(self, kind: str) -> list[dict[str, Any]]:
        return [e for e in self.events if e["type"] == kind]

    def steps(self) -> list[int]:
        """Training steps that reported metrics (not step 0: PPO's validation before training)."""
        return [e["step"] for e in self.of("metrics") if e["step"] > 0]

    def series(self, name: str) -> list[float]:
        return [e["values"][name] for e in self.of("metrics") if name in e["values"]]
