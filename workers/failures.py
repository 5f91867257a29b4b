"""What a tenant sees of a failure, in `job.error` and the `job.error` event.

User errors (bad data, a gate, a hyperparameter) keep the engine's wording: it is about the user's
input and tells them what to change. Anything else (an exception Keel did not expect, a lost Ray
actor, a placement that timed out) can carry SQL, host names, paths or a remote traceback: the
tenant gets its stable `code`, a generic message and an `error_id`, and the details go to the
worker's log under that id, for the operator.
"""

from __future__ import annotations

import logging
import uuid
from typing import Any

from engine.errors import EngineError

log = logging.getLogger(__name__)

WORDED_FOR_USERS = frozenset({"invalid_model", "invalid_config", "invalid_file", "invalid_checkpoint",
                              "invalid_reference", "model_not_allowed", "step_timeout", "max_duration_exceeded",
                              "rollout_unavailable", "distill_gate", "diverged"})
"""Codes whose messages the engine writes for the user even where `user_error` is false (they name a
hyperparameter to change, never the system's internals)."""

MESSAGES = {
    "internal_error": "The job stopped because of an internal error.",
    "worker_lost": "The job's worker was lost.",
    "resources_unavailable": "The cluster could not provide the job's resources in time; check `resources` "
                             "or try again later.",
}
DEFAULT_MESSAGE = "The job stopped because of a system error."


def new_error_id() -> str:
    return "err_" + uuid.uuid4().hex[:20]


def is_worded_for_users(err: BaseException) -> bool:
    return isinstance(err, EngineError) and (err.user_error or err.code in WORDED_FOR_USERS)


def public_error(job_id: str, err: BaseException) -> dict[str, Any]:
    """`{code, message[, param][, error_id]}` for the job row and its `job.error` event; a system error
    is logged here, with its details and traceback, under the new error id."""
    if is_worded_for_users(err):
        out = {"code": err.code, "message": err.message}
        if err.param:
            out["param"] = err.param
        return out
    code = err.code if isinstance(err, EngineError) else "internal_error"
    error_id = log_details(job_id, code, err)
    return {"code": code, "message": generic_message(code, error_id), "error_id": error_id}


def log_details(job_id: str, code: str, err: BaseException) -> str:
    """Log a system error's details (and traceback) under a new error id; returns the id."""
    error_id = new_error_id()
    log.error("job %s: system error %s (error_id=%s): %s: %s", job_id, code, error_id, err.__class__.__name__, err,
              exc_info=(type(err), err, err.__traceback__), extra={"error_id": error_id})
    return error_id


def generic_message(code: str, error_id: str) -> str:
    return f"{MESSAGES.get(code, DEFAULT_MESSAGE)} Quote error id {error_id} when reporting it."
