"""Graders (OpenAI's grader objects) checked and run for the API: the checks job creation shares (OpenAI's
reinforcement jobs, Keel's `/v1/jobs` with `reward.function: grader`) and the process behind OpenAI's
grader endpoints (api/openai/graders.py).

Graders are validated and run by `python -m engine.rewards.graders`, a child process: the API never imports the
engine (tests/test_architecture.py), and no grader runs inside the API's process (a `python` grader runs
one level further down, in the engine's sandbox; a `score_model` grader's model loads in the child).
The API adds what only it knows: whether the deployment allows python graders (`KEEL_ALLOW_PYTHON_GRADERS`)
and which score models the project owns, and where they are.
"""

from __future__ import annotations

import asyncio
import contextlib
import copy
import json
import logging
import os
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

from sqlalchemy.orm import Session

from api import model_refs
from api.errors import ApiError
from core.config import settings
from core.models import Model

log = logging.getLogger(__name__)
_ROOT = Path(__file__).resolve().parents[1]
_ARGS = (sys.executable, "-m", "engine.rewards.graders")
_ENV = {"PATH": "/usr/bin:/bin", "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1"}


def _command(request: dict[str, Any]) -> tuple[dict[str, Any], float]:
    """The request for `python -m engine.rewards.graders` (the deployment's limits added) and its timeout."""
    python = settings.python_grader_limits
    timeout = 60 + (python["wall_s"] * 2 if python else 0) + (120 if request.get("models") else 0)
    # The child's own RLIMIT_CPU is its wall-clock allowance: threads cannot spend more than that either.
    return {**request, "python": python, "limits": {"memory_mb": settings.GRADER_MEMORY_MB, "cpu_s": timeout}}, timeout


def _answer(code: int | None, stdout: bytes | str, stderr: bytes | str, timeout: float) -> dict[str, Any]:
    if code == -signal.SIGXCPU:
        raise ApiError(400, "grader_timeout", f"grader: evaluation used more than {timeout:g} CPU seconds.",
                       param="grader")
    if code != 0:
        log.error("grader process: exit status %s: %s", code, stderr[-2000:])
        raise ApiError(500, "internal_error", "The grader process failed.")
    return json.loads(stdout)


def grader_process(request: dict[str, Any]) -> dict[str, Any]:
    """`python -m engine.rewards.graders` on `request`, blocking (validation: no grader code runs). Its whole
    process group is stopped on timeout."""
    request, timeout = _command(request)
    with subprocess.Popen(_ARGS, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, cwd=_ROOT,
                          env=_ENV, start_new_session=True) as proc:
        try:
            out, err = proc.communicate(json.dumps(request).encode(), timeout=timeout)
        except subprocess.TimeoutExpired:
            _signal_group(proc.pid, signal.SIGKILL)
            proc.communicate()
            raise _timed_out(timeout) from None
    return _answer(proc.returncode, out, err, timeout)


async def grader_process_async(request: dict[str, Any], timeout: float | None = None) -> dict[str, Any]:
    """`grader_process` on the event loop: the child is awaited, no worker thread waits for it. On
    timeout (or a client gone) its process group gets SIGTERM (it kills a python grader's sandbox and
    removes its directory), then SIGKILL after `STOP_GRACE_S`. `timeout` overrides the computed one."""
    request, computed = _command(request)
    timeout = computed if timeout is None else timeout
    proc = await asyncio.create_subprocess_exec(*_ARGS, stdin=asyncio.subprocess.PIPE, stdout=asyncio.subprocess.PIPE,
                                                stderr=asyncio.subprocess.PIPE, cwd=_ROOT, env=_ENV,
                                                start_new_session=True)
    try:
        out, err = await asyncio.wait_for(proc.communicate(json.dumps(request).encode()), timeout)
    except TimeoutError:
        await _stop(proc)
        raise _timed_out(timeout) from None
    except BaseException:  # cancelled: the client went away
        await asyncio.shield(_stop(proc))
        raise
    return _answer(proc.returncode, out, err.decode(errors="replace"), timeout)


STOP_GRACE_S = 5.0


async def _stop(proc: asyncio.subprocess.Process) -> None:
    _signal_group(proc.pid, signal.SIGTERM)
    try:
        await asyncio.wait_for(proc.wait(), STOP_GRACE_S)
    except TimeoutError:
        pass
    _signal_group(proc.pid, signal.SIGKILL)  # whatever else the group still holds
    await proc.wait()


def _signal_group(pid: int, sig: int) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pid, sig)


def _timed_out(timeout: float) -> ApiError:
    return ApiError(400, "grader_timeout", f"grader: evaluation took longer than {timeout:g} s.", param="grader")


def refused(result: dict[str, Any], prefix: str, status: int) -> None:
    if "error" in result:
        error = result["error"]
        param = error["param"].replace("grader", prefix, 1)
        raise ApiError(status, error.get("code") or "invalid_grader", f"{param}: {error['message']}", param=param)


def check_grader(grader: Any, prefix: str, *, status: int = 400) -> dict[str, Any]:
    """The engine's validation of `grader` (`item_fields`, `models`); a bad one is a `status` problem
    whose `param` starts with `prefix` (`python_graders_disabled` when the deployment refuses python)."""
    result = grader_process({"op": "validate", "grader": grader})
    refused(result, prefix, status)
    return result


def checked_grader(db: Session, project_id: str, grader: Any, prefix: str, *,
                   status: int = 400) -> tuple[dict[str, Any], dict[str, Any]]:
    """Validate `grader` and the models its score_model graders name (this project's reward models and
    policies: `model_ref`). Returns (the grader with those references normalised, e.g. an `ft:` name
    as its Keel model id, so the worker finds them; the engine's validation answer)."""
    result = check_grader(grader, prefix, status=status)
    names = {ref: model_ref(db, project_id, ref, param.replace("grader", prefix, 1), status=status)
             for ref, param in result.get("models", [])}
    return _renamed(grader, names), result


def model_ref(db: Session, project_id: str, ref: str, param: str, *, status: int = 400) -> str:
    """A score_model grader's `model`, checked and normalised: a Keel model id (a `reward_model` is
    scored as a reward model, a `policy` is a judge), a checkpoint id or a directory under a model root.
    Not found is a `status` problem too on OpenAI's routes (`status` 400), a 404 on Keel's."""
    if not ref.startswith(("model-", "ckpt-", "ft:", "/")):
        raise ApiError(status, "invalid_model",
                       f"{param}: a score_model grader's model is a Keel model id (model-...), an `ft:` name, a "
                       "checkpoint id (ckpt-...) or a directory under a model root.", param=param)
    try:
        ref = model_refs.resolve(db, project_id, ref, param)
    except ApiError as e:
        if status == 400 and e.status == 404:
            raise ApiError(400, e.code, f"{param}: {e.detail}", param=param) from None
        raise
    model = db.get(Model, ref) if ref.startswith("model-") else None
    if model is not None and model.kind == "value_model":
        raise ApiError(status, "invalid_model", f"{param}: {ref} is a value_model; "
                       "a score_model grader needs a reward_model or a policy (a judge).", param=param)
    return ref


def _renamed(grader: Any, names: dict[str, str]) -> Any:
    if not any(a != b for a, b in names.items()):
        return grader
    out = copy.deepcopy(grader)
    stack = [out]
    while stack:
        node = stack.pop()
        if isinstance(node, dict):
            if node.get("type") == "score_model" and node.get("model") in names:
                node["model"] = names[node["model"]]
            stack.extend((node.get("graders") or {}).values() if isinstance(node.get("graders"), dict) else [])
    return out


def check_job_grader(db: Session, project_id: str, options: dict[str, Any]) -> dict[str, Any]:
    """Keel's `/v1/jobs` with `reward.function: grader`: `options.grader` (a grader as JSON) is checked as
    OpenAI's routes check it, with 422s (404 for a model id of no model of the project) whose `param` is
    under `method.reward.options.grader`. Returns the options with the grader's model references
    normalised."""
    prefix = "method.reward.options.grader"
    text = options.get("grader")
    try:
        grader = json.loads(text) if isinstance(text, str) else None
    except ValueError:
        grader = None
    if not isinstance(grader, dict):
        raise ApiError(422, "invalid_grader", f"{prefix}: must be a grader object as a JSON string "
                       "(docs/openai.md#graders).", param=prefix)
    checked, _ = checked_grader(db, project_id, grader, prefix, status=422)
    if checked is grader:
        return options
    return {**options, "grader": json.dumps(checked, separators=(",", ":"), sort_keys=True)}
