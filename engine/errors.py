"""Errors the engine raises, each with a stable machine-readable `code`.

User errors (bad data, a gate that failed, a run that diverged) and system errors (a lost worker)
are told apart by `user_error`, so the service can report them honestly.
"""

from __future__ import annotations

from typing import Any


class EngineError(Exception):
    """A failure with a stable `code`, a human `message` and optional evidence in `data`."""

    code = "engine_error"
    user_error = False

    def __init__(self, message: str, *, code: str | None = None, param: str | None = None,
                 data: dict[str, Any] | None = None) -> None:
        super().__init__(message)
        if code is not None:
            self.code = code
        self.message = message
        self.param = param
        self.data = dict(data or {})

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {"code": self.code, "message": self.message}
        if self.param:
            out["param"] = self.param
        if self.data:
            out["data"] = self.data
        return out


class ConfigError(EngineError):
    """A hyperparameter is unknown, mistyped or inconsistent; `param` is its dotted path."""

    code = "invalid_config"
    user_error = True


class DataError(EngineError):
    """A dataset file is unreadable or does not fit the method (`param` names the column)."""

    code = "invalid_file"
    user_error = True


class ModelNotAllowed(EngineError):
    """A model path lies outside the allowed roots, or is not a model directory."""

    code = "model_not_allowed"
    user_error = True


class GateFailed(EngineError):
    """A quality gate (e.g. the distillation KL gate) was not met."""

    code = "distill_gate"
    user_error = True


class Diverged(EngineError):
    """Training diverged and the rollback budget is spent."""

    code = "diverged"
    user_error = True


class StepTimeout(EngineError):
    """A training step ran past `step_timeout_s`."""

    code = "step_timeout"


class Cancelled(EngineError):
    """The job was cancelled while running."""

    code = "cancelled"


class Paused(EngineError):
    """The job was paused at a step boundary; its newest checkpoint (saved on the way out) is where
    it resumes. `data["step"]`: the last step trained."""

    code = "paused"
