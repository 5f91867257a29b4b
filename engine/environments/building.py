"""An environment by its spec (`environment` on the job, or a row's `environment` column): one object
per episode (`make_environment`).

Specs (JSON objects, `type` first):
- `{"type": "tools", "tools": ["python", "calculator"]}`: the model calls built-in tools in its template's
  format (Hermes `<tool_call>{json}</tool_call>`); the episode ends at a turn without a call and the
  job's reward function scores that final turn (`engine.environments.tools`).
- `{"type": "echo_token"}` / `{"type": "arithmetic"}`: small learnable games shipped for tests and demos
  (`engine.environments.games`).
- `{"type": "openenv", "url": "http://...", ...}`: a remote OpenEnv server (`engine.environments.openenv`).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from engine.environments.base import Environment
from engine.errors import EngineError

TYPES = ("tools", "echo_token", "arithmetic", "openenv")


@dataclass(frozen=True)
class EnvironmentContext:
    """What every environment of one worker shares: deployment limits, and the worker's pools."""

    allowed_hosts: tuple[str, ...] = ()
    """Hosts a remote environment may name although they are not public addresses (the deployment's
    `KEEL_ENV_ALLOWED_HOSTS`); every other URL must pass the public-address check."""
    python_limits: Any = None
    """`engine.rewards.sandbox.Limits` of the `python` tool (None: the sandbox's defaults)."""
    python_allowed: bool = True
    """False where the deployment runs no python (`KEEL_ALLOW_PYTHON_GRADERS` off): the `python` tool is
    then not offered, and a call to it is answered as a tool error."""
    seed: int = 0
    tool_format: str = "hermes"
    """How the model writes tool calls (`rollout.multi_turn.tool_format`): what the tools environment and the
    arithmetic game parse."""


def make_environment(spec: Mapping[str, Any], context: EnvironmentContext) -> Environment:
    """A fresh environment for one episode; raises `EngineError(code="invalid_environment")` for a bad spec."""
    kind = spec.get("type")
    if kind == "tools":
        from engine.environments.tools import ToolEnvironment

        return ToolEnvironment(spec, context)
    if kind in ("echo_token", "arithmetic"):
        from engine.environments.games import make_game

        return make_game(spec, context)
    if kind == "openenv":
        from engine.environments.openenv import OpenEnvEnvironment

        return OpenEnvEnvironment(spec, context)
    raise EngineError(f"unknown environment type {kind!r} (one of {', '.join(TYPES)})", code="invalid_environment")
