"""The step watchdog and the run's time limit, for every method.

`run_watched(fn, request, reporter)` runs a method's entry point in a thread of the job's controller
and watches it: the loop calls `reporter.heartbeat(step)` at every step (and phase); the watchdog
fails the job with `step_timeout` when one step runs past `guardrails.step_timeout_s`, and with
`max_duration_exceeded` when the run as a whole passes `trainer.max_duration_s` (counting earlier
attempts, `request.time_used_s`).

Two ways out, so that a hung loop cannot hold the job:

- soft: `heartbeat` itself raises `MaxDurationExceeded` at the first step boundary past the limit,
  so the loop can save a checkpoint of the last finished step on its way out (cheap: it is at a
  step boundary, the state is consistent);
- hard: the watching thread raises `StepTimeout` (a step is overdue: the loop may be hung in a
  collective, a stuck read, a deadlock) or `MaxDurationExceeded` (`DURATION_GRACE_S` past the limit
  without reaching a boundary) from `run_watched` itself. The loop's thread is left where it is: the
  caller kills the controller process, and every worker and placement group with it.

While the loop is within its step budget the watching thread also beats for the controller
(`reporter.heartbeat()` about every `POLL_S`; the service's reporter throttles the writes): the
job's liveness then measures the controller and its training, not just the worker process.

No torch here: `engine.runtime.jobs` imports this module before the method's own.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from engine.config import JobRequest, JobResult
from engine.errors import EngineError, StepTimeout
from engine.runtime.reporting import Reporter

POLL_S = 1.0
"""How often the watching thread looks (and beats for the controller)."""
DEFAULT_STEP_TIMEOUT_S = 3600.0
DURATION_GRACE_S = 600.0
"""Past `max_duration_s`, how long the loop gets to reach a step boundary and checkpoint (at most
`step_timeout_s`) before the run is cut without one."""


class MaxDurationExceeded(EngineError):
    """The run passed `trainer.max_duration_s`."""

    code = "max_duration_exceeded"
    user_error = True


def limits(config: Any) -> tuple[float, float | None]:
    """`(step_timeout_s, max_duration_s)` of a method's config (None: no time limit)."""
    guardrails = getattr(config, "guardrails", None)
    trainer = getattr(config, "trainer", None)
    return (float(getattr(guardrails, "step_timeout_s", DEFAULT_STEP_TIMEOUT_S)),
            getattr(trainer, "max_duration_s", None))


class WatchedReporter:
    """A reporter that times the loop's steps; everything else goes to the wrapped reporter."""

    def __init__(self, inner: Reporter, *, step_timeout_s: float, max_duration_s: float | None,
                 time_used_s: float = 0.0, clock: Callable[[], float] = time.monotonic) -> None:
        self.inner, self.clock = inner, clock
        self.step_timeout_s, self.max_duration_s = step_timeout_s, max_duration_s
        self.started = clock() - time_used_s
        self.step: int | None = None
        self.step_started: float | None = None
        """When the current step began; None until the loop's first step (set-up is not timed here)."""

    # --- the loop's side ---------------------------------------------------------------------------

    def heartbeat(self, step: int | None = None) -> None:
        """The loop is at `step` (a new step restarts the step clock). Past `max_duration_s`, raises
        `MaxDurationExceeded` so the loop stops at this boundary."""
        now = self.clock()
        if step is not None and step != self.step:
            self.step, self.step_started = step, now
        if self.over_duration(now):
            raise self.duration_error(now)

    def over_duration(self, now: float) -> bool:
        return self.max_duration_s is not None and now - self.started > self.max_duration_s

    def duration_error(self, now: float) -> MaxDurationExceeded:
        return MaxDurationExceeded(
            f"the run passed trainer.max_duration_s={self.max_duration_s:g} ({now - self.started:.0f} s, "
            f"at step {self.step})", param="trainer.max_duration_s",
            data={"step": self.step, "elapsed_s": round(now - self.started, 1), "max_duration_s": self.max_duration_s})

    # --- the watching thread's side ------------------------------------------------------------------

    def expired(self) -> EngineError | None:
        """The error to end the run with now, if any (see the module docstring)."""
        now = self.clock()
        if self.step_started is not None and now - self.step_started > self.step_timeout_s:
            return StepTimeout(f"step {self.step} ran past step_timeout_s={self.step_timeout_s:g} "
                               f"({now - self.step_started:.0f} s without finishing)", param="guardrails.step_timeout_s",
                               data={"step": self.step, "timeout_s": self.step_timeout_s, "phase": "watchdog"})
        if self.over_duration(now) and now - self.started > self.max_duration_s + min(
                DURATION_GRACE_S, self.step_timeout_s):
            return self.duration_error(now)
        return None

    # --- the rest of the Reporter protocol -----------------------------------------------------------

    def metrics(self, step: int, values: Mapping[str, float], *, total_steps: int | None = None,
                epoch: int | None = None) -> None:
        self.inner.metrics(step, values, total_steps=total_steps, epoch=epoch)

    def checkpoint(self, step: int, path: str, metrics: Mapping[str, float]) -> None:
        self.inner.checkpoint(step, path, metrics)

    def log(self, message: str) -> None:
        self.inner.log(message)

    def warning(self, code: str, message: str, data: Mapping[str, Any] | None = None) -> None:
        self.inner.warning(code, message, data)

    def should_stop(self) -> bool:
        return self.inner.should_stop()

    def should_pause(self) -> bool:
        return self.inner.should_pause()

    def placement(self, workers: Sequence[Mapping[str, Any]]) -> None:
        self.inner.placement(workers)

    def samples(self, step: int, rows: Sequence[Mapping[str, Any]]) -> None:
        """Optional in the protocol: passed on when the wrapped reporter takes samples (the worker's does)."""
        inner = getattr(self.inner, "samples", None)
        if inner is not None:
            inner(step, rows)


def run_watched(fn: Callable[[JobRequest, Reporter], JobResult], request: JobRequest, reporter: Reporter, *,
                clock: Callable[[], float] = time.monotonic, poll_s: float = POLL_S) -> JobResult:
    """`fn(request, reporter)` under the step watchdog and the time limit (see the module docstring)."""
    step_timeout_s, max_duration_s = limits(request.config)
    watched = WatchedReporter(reporter, step_timeout_s=step_timeout_s, max_duration_s=max_duration_s,
                              time_used_s=request.time_used_s, clock=clock)
    outcome: dict[str, Any] = {}

    def target() -> None:
        try:
            outcome["result"] = fn(request, watched)
        except BaseException as exc:  # noqa: BLE001 - handed to the watching thread as is
            outcome["error"] = exc

    loop = threading.Thread(target=target, daemon=True, name=f"keel-loop-{request.job_id}")
    loop.start()
    while True:
        loop.join(poll_s)
        if not loop.is_alive():
            break
        error = watched.expired()
        if error is not None:
            raise error
        try:
            reporter.heartbeat(watched.step)  # the controller is alive and its loop on time
        except Exception:  # noqa: BLE001, S110 - a liveness beat never fails the run; the next one may get through
            pass
    if "error" in outcome:
        raise outcome["error"]
    return outcome["result"]
