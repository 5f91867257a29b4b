"""A remote environment over the OpenEnv protocol (Meta's `openenv-core`): any server built with its
`create_app` serves episodes to a job.

Spec (`environment` on a job or a row):

    {"type": "openenv", "url": "http://envs.internal:8000",
     "transport": "websocket",      # or "http" (see below)
     "action_field": "message",     # the action's field that carries the assistant's text
     "action_args": {},             # further fields of every action
     "observation_field": "prompt", # the observation's field that becomes the next message
     "observation_role": "user",    # or "tool"
     "reset_fields": {"target": "ground_truth"}, "reset_args": {},  # what `reset` sends: row fields, values
     "timeout_s": 30, "retries": 2}

An episode holds one WebSocket session (`/ws`: its own environment instance on the server), taken from the
worker's pool and handed back when the episode ends cleanly. `reset` sends the named row fields (a list
sends them under their own names; an object maps the server's argument to the row field) plus
`reset_args`; the observation (if any text) becomes the first user message. Each assistant turn is a step
with `{action_field: text, **action_args}`; the observation becomes the next message (role
`observation_role`), a reward on a step that is not the last is that turn's reward, and on the last (`done`)
the episode's outcome. `transport: "http"` uses `POST /reset` and `POST /step` instead, for servers that keep
state between calls or single-turn environments (openenv-core's servers make a fresh environment per
HTTP call).

Without `action_field`, the server's `GET /schema` decides: the action's one required string field (or its
only string field). Without `observation_field`: the observation's only string field, else the whole
observation as JSON.

Failures: reset (and the schema) are retried `retries` times with backoff when the server is unreachable,
slow or busy; a step is never repeated (it is not idempotent). What still fails raises `EnvironmentFailure`:
the episode is dropped and counted, and the job fails only past `rollout.multi_turn.max_failed_frac`.
The URL is checked again here, at connect time: a host outside the deployment's allow-list
(`EnvironmentContext.allowed_hosts`) must resolve to public addresses only.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urlsplit

from websockets.sync.client import ClientConnection

from engine.environments.base import EnvironmentFailure, Step
from engine.environments.openenv_client import POOL, Server, exchange, with_retries
from engine.errors import ConfigError

_KEYS = frozenset({"type", "url", "transport", "action_field", "action_args", "observation_field",
                   "observation_role", "reset_fields", "reset_args", "timeout_s", "retries"})


@dataclass(frozen=True)
class OpenEnvSpec:
    url: str
    transport: str = "websocket"
    action_field: str | None = None
    action_args: dict[str, Any] = field(default_factory=dict)
    observation_field: str | None = None
    observation_role: str = "user"
    reset_fields: tuple[tuple[str, str], ...] = ()
    """(argument of the server's reset, row field) pairs."""
    reset_args: dict[str, Any] = field(default_factory=dict)
    timeout_s: float = 30.0
    retries: int = 2

    @classmethod
    def parse(cls, spec: Mapping[str, Any]) -> OpenEnvSpec:
        """The spec's fields, checked; `ConfigError(code="invalid_environment")` names the first bad one."""
        unknown = sorted(set(spec) - _KEYS)
        if unknown:
            _bad(unknown[0], f"unknown field (one of {', '.join(sorted(_KEYS))})")
        url = spec.get("url")
        parts = urlsplit(url) if isinstance(url, str) else None
        if parts is None or parts.scheme not in ("http", "https") or not parts.hostname or parts.query:
            _bad("url", "must be an absolute http:// or https:// URL without a query")
        for name in ("action_field", "observation_field"):
            if spec.get(name) is not None and (not isinstance(spec[name], str) or not spec[name]):
                _bad(name, "must be a field name")
        for name in ("action_args", "reset_args"):
            if not isinstance(spec.get(name, {}), Mapping):
                _bad(name, "must be an object")
        fields = spec.get("reset_fields", [])
        if isinstance(fields, list | tuple):
            fields = {f: f for f in fields}
        if not isinstance(fields, Mapping) or not all(isinstance(f, str) and f for f in (*fields, *fields.values())):
            _bad("reset_fields", "must be a list of row field names, or an object of reset argument: row field")
        timeout_s, retries = spec.get("timeout_s", 30.0), spec.get("retries", 2)
        if isinstance(timeout_s, bool) or not isinstance(timeout_s, int | float) or not 0 < timeout_s <= 600:
            _bad("timeout_s", "must be a number of seconds in (0, 600]")
        if isinstance(retries, bool) or not isinstance(retries, int) or not 0 <= retries <= 10:
            _bad("retries", "must be an integer in [0, 10]")
        if spec.get("transport", "websocket") not in ("websocket", "http"):
            _bad("transport", "must be websocket or http")
        if spec.get("observation_role", "user") not in ("user", "tool"):
            _bad("observation_role", "must be user or tool")
        return cls(url=url, transport=spec.get("transport", "websocket"), action_field=spec.get("action_field"),
                   action_args=dict(spec.get("action_args", {})), observation_field=spec.get("observation_field"),
                   observation_role=spec.get("observation_role", "user"), reset_fields=tuple(fields.items()),
                   reset_args=dict(spec.get("reset_args", {})), timeout_s=float(timeout_s), retries=retries)


class OpenEnvEnvironment:
    """One episode on an OpenEnv server (see the module doc)."""

    def __init__(self, spec: Mapping[str, Any], context: Any) -> None:
        """`context`: the worker's `engine.environments.building.EnvironmentContext` (its `allowed_hosts`)."""
        self.spec = OpenEnvSpec.parse(spec)
        self.server = Server(self.spec.url, tuple(context.allowed_hosts), self.spec.timeout_s)
        self._session: ClientConnection | None = None
        self._action_field: str | None = None
        self._clean = False
        """Whether the session may serve another episode (the last answer came back whole)."""

    def reset(self, row: Mapping[str, Any]) -> list[dict[str, Any]]:
        data = {name: row[column] for name, column in self.spec.reset_fields if row.get(column) is not None}
        data.update(self.spec.reset_args)
        self._action_field = self.spec.action_field or action_field(POOL.schema(self.server, self.spec.retries))
        if self.spec.transport == "http":
            answer = with_retries(lambda: self._http("/reset", data), self.spec.retries)
        else:
            answer = with_retries(lambda: self._on_session({"type": "reset", "data": data}),
                                  self.spec.retries, on_failure=self._drop_session)
        text = self._text(_observation(answer))
        return [{"role": "user", "content": text}] if text else []

    def step(self, text: str) -> Step:
        if self._action_field is None:
            raise EnvironmentFailure("step before reset")
        action = {**self.spec.action_args, self._action_field: text}
        try:
            if self.spec.transport == "http":
                answer = self._http("/step", {"action": action})
            else:
                answer = self._on_session({"type": "step", "data": action})
        except EnvironmentFailure:
            self._drop_session()
            raise
        reward = _reward(answer.get("reward"))
        if bool(answer.get("done")):
            return Step(done=True, final_reward=reward)
        observation = self._text(_observation(answer))
        messages = [{"role": self.spec.observation_role, "content": observation}] if observation else []
        return Step(messages=messages, reward=reward)

    def close(self) -> None:
        session, self._session = self._session, None
        if session is not None:
            if self._clean:
                POOL.give_back(self.server, session)
            else:
                session.close()

    def _on_session(self, message: dict[str, Any]) -> dict[str, Any]:
        if self._session is None:
            self._session = POOL.session(self.server)
        self._clean = False
        answer = exchange(self._session, message, self.spec.timeout_s)
        self._clean = True
        return answer

    def _drop_session(self) -> None:
        """A session that failed is closed, and the server's idle ones with it (a restarted or dead
        server leaves them all stale)."""
        session, self._session = self._session, None
        if session is not None:
            session.close()
        POOL.forget(self.server)

    def _http(self, route: str, body: Any) -> dict[str, Any]:
        answer = self.server.http(POOL.client(self.server), "POST", route, body)
        if not isinstance(answer, dict):
            raise EnvironmentFailure(f"POST {route} answered with no object")
        return answer

    def _text(self, observation: dict[str, Any]) -> str:
        name = self.spec.observation_field
        if name is not None:
            if name not in observation:
                raise EnvironmentFailure(f"the observation has no field {name!r} (it has "
                                         f"{', '.join(sorted(observation)) or 'none'})")
            value = observation[name]
        else:
            strings = [v for v in observation.values() if isinstance(v, str)]
            value = strings[0] if len(strings) == 1 else (observation or None)
        if value is None:
            return ""
        return value if isinstance(value, str) else json.dumps(value, sort_keys=True)


def action_field(schema: Mapping[str, Any]) -> str:
    """The action field a server's `GET /schema` leaves for the text: its one required string field,
    else its only string field; `EnvironmentFailure` when that is ambiguous (set `action_field`)."""
    action = schema.get("action") if isinstance(schema.get("action"), Mapping) else {}
    properties = action.get("properties") if isinstance(action.get("properties"), Mapping) else {}
    strings = [name for name, prop in properties.items()
               if name != "metadata" and isinstance(prop, Mapping) and prop.get("type") == "string"]
    required = [name for name in strings if name in (action.get("required") or ())]
    for candidates in (required, strings):
        if len(candidates) == 1:
            return candidates[0]
    raise EnvironmentFailure("the server's action has no single text field (fields: "
                             f"{', '.join(p for p in properties if p != 'metadata') or 'none'}); set action_field")


def _observation(answer: Mapping[str, Any]) -> dict[str, Any]:
    observation = answer.get("observation")
    if not isinstance(observation, dict):
        raise EnvironmentFailure("the server's answer has no observation object")
    return observation


def _reward(value: Any) -> float | None:
    if value is None:
        return None
    if isinstance(value, bool | int | float):
        return float(value)
    raise EnvironmentFailure(f"the server's reward is not a number ({type(value).__name__})")


def _bad(name: str, reason: str) -> None:
    raise ConfigError(f"environment.{name}: {reason}", code="invalid_environment", param=f"environment.{name}")
