"""Agentic reinforcement fine-tuning on the OpenAI route: rows that carry `tools` (OpenAI's function tools,
converted by core/finetune_files.py into a row `environment` of type `tools`) run as multi-turn episodes, so
the Keel PPO job gets `rollout.multi_turn.enable`. Where OpenAI has no shape, Keel's fields are accepted under
Keel's names: `method.reinforcement.hyperparameters.multi_turn` (the episodes' limits) and
`method.reinforcement.environment` (the environment of rows without `tools`)."""

from __future__ import annotations

from typing import Any

from api.errors import ApiError
from api.openai.schemas import ReinforcementSpec
from core import environments
from core.models import File

ROWS_KEY = "environments"
"""A derived training file's `meta` key: how many of its rows carry an `environment`."""
_PARAM = "method.reinforcement"


def count_environments(data: bytes) -> int:
    """Rows of converted Keel JSON Lines that carry an `environment`. The rows are written with sorted keys
    and default separators, and a quote inside a string value is escaped, so the key's text with its
    unescaped quotes occurs only as a row's key."""
    return sum(1 for line in data.splitlines() if b'"environment": {' in line)


def episode_rows(training: File) -> int | None:
    """Rows of the Keel training file that carry an environment; None: all of them, as far as is known (a
    Keel `prompts` file given directly, with an `environment` column)."""
    counted = (training.meta or {}).get(ROWS_KEY)
    if isinstance(counted, int):
        return counted
    return None if "environment" in (training.columns or []) else 0


def multi_turn(spec: ReinforcementSpec, training: File, rows: int, validation: File | None = None
               ) -> tuple[dict[str, Any] | None, dict[str, Any]]:
    """(the Keel job's `rollout.multi_turn`, or None for single-turn responses; the Keel method's extra fields:
    `environment` when given). A file whose rows partly carry tools needs `environment` for the others, and so
    does a validation file of an agentic job (its rows run as episodes too)."""
    with_env = episode_rows(training)
    given = spec.hyperparameters.multi_turn
    environment = spec.environment.model_dump(mode="json") if spec.environment is not None else None
    problem = environments.environment_url_problem(environment)  # a remote environment's URL (blocking DNS)
    if problem is not None:
        param = f"{_PARAM}.environment.{problem[0]}"
        raise ApiError(400, "invalid_url", f"{param}: {problem[1]}.", param=param)
    if not with_env and environment is None:
        if given is not None and given.enable:
            raise ApiError(400, "invalid_request", f"{_PARAM}.hyperparameters.multi_turn: multi-turn episodes need "
                           "rows with `tools` or an environment (method.reinforcement.environment).",
                           param=f"{_PARAM}.hyperparameters.multi_turn")
        return None, {}
    if with_env is not None and with_env < rows and environment is None:
        raise ApiError(400, "invalid_request", f"training_file: {with_env} of {rows} rows carry `tools`; give every "
                       "row tools, or the others an environment (method.reinforcement.environment).",
                       param="training_file")
    limits = given.model_dump(mode="json") if given is not None else {}
    limits["enable"] = given.enable if given is not None and "enable" in given.model_fields_set else True
    if not limits["enable"]:
        return None, {}
    checked = episode_rows(validation) if validation is not None and environment is None else None
    if checked is not None and checked < (validation.rows or 0):
        raise ApiError(400, "invalid_request", f"validation_file: {checked} of {validation.rows} rows carry `tools`; "
                       "a multi-turn job runs its validation rows as episodes too: give every row tools, or the "
                       "others an environment (method.reinforcement.environment).", param="validation_file")
    return limits, ({"environment": environment} if environment is not None else {})
