"""VERL-style dotted overrides (`actor_rollout_ref.actor.ppo_epochs=4`) merged onto the nested
hyperparameters before validation."""

from __future__ import annotations

import json
import re
from typing import Any

import yaml

from api.schemas.hyperparameters.fields import errors_at

MAX_OVERRIDES = 200
_KEY = re.compile(r"\+?[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_]*)*")
_VERL_PREFIX = "actor_rollout_ref."
"""VERL nests actor, rollout, ref and model under `actor_rollout_ref`; Keel puts them at the top."""


def parse_value(text: str) -> Any:
    """A JSON value (`1e-4`, `true`, `[0.9, 0.95]`), else a YAML scalar (`True`, `null`, `~`), else the text."""
    try:
        return json.loads(text)
    except ValueError:
        pass
    try:
        value = yaml.safe_load(text)
    except yaml.YAMLError:
        return text
    return value if isinstance(value, bool | int | float | list | dict) or value is None else text


def map_key(key: str) -> list[str]:
    """`actor_rollout_ref.actor.ppo_epochs` -> `["actor", "ppo_epochs"]` (Keel's nesting)."""
    key = key.removeprefix("+")
    key = key.removeprefix(_VERL_PREFIX)
    return key.split(".")


def apply_overrides(hyperparameters: dict[str, Any], overrides: list[str]) -> dict[str, Any]:
    """Merge `key=value` overrides into a copy of the nested hyperparameters (later ones win).

    Raises a ValidationError located at `("overrides", i)` for an override that is not `key=value`
    or that sets a key below a non-object value; everything else is left to schema validation, so an
    unknown or mistyped key is reported at its nested path (`hyperparameters.actor.ppo_epochs`)."""
    merged = json.loads(json.dumps(hyperparameters))  # a deep copy of plain JSON
    for i, item in enumerate(overrides):
        key, sep, raw = item.partition("=")
        key = key.strip()
        if not sep or not _KEY.fullmatch(key):
            raise errors_at("overrides", (("overrides", i), item,
                                        "an override must look like `section.key=value` (VERL dotted name)"))
        *parents, leaf = map_key(key)
        node = merged
        for depth, part in enumerate(parents):
            node = node.setdefault(part, {})
            if not isinstance(node, dict):
                raise errors_at("overrides", (("overrides", i), item,
                                            f"{'.'.join(parents[:depth + 1])} is not an object"))
        node[leaf] = parse_value(raw.strip())
    return merged
