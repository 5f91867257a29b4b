"""A multi-turn episode's environment as a job names it (`method.environment` of a PPO job; a prompt
row's `environment` column overrides it): `type` is checked here, the other keys belong to that type
(engine/environments/building.py; docs/environments.md) and the engine checks them when it builds one.
The API does not import the engine (torch), so the type names are repeated."""

from __future__ import annotations

import json
from typing import Literal

from pydantic import ConfigDict, model_validator

from api.schemas.hyperparameters import Strict

ENVIRONMENT_TYPES = ("tools", "echo_token", "arithmetic", "openenv")
MAX_SPEC_CHARS = 64 * 1024
"""A spec as JSON: room for tool definitions, never a dataset."""


class EnvironmentSpec(Strict):
    """`{"type": "tools", "tools": ["python"]}`, `{"type": "arithmetic"}`, `{"type": "openenv", "url": ...}`."""

    model_config = ConfigDict(extra="allow", strict=True, allow_inf_nan=False, use_attribute_docstrings=True)

    type: Literal["tools", "echo_token", "arithmetic", "openenv"]
    """`tools`: built-in tools in the template's tool-call format; `echo_token`, `arithmetic`: small
    learnable games; `openenv`: a remote OpenEnv server (`url`)."""

    @model_validator(mode="after")
    def _bounded(self):
        if len(json.dumps(self.model_dump(mode="json"))) > MAX_SPEC_CHARS:
            raise ValueError(f"an environment spec is at most {MAX_SPEC_CHARS} characters of JSON")
        return self
