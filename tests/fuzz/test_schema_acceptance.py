"""Bodies generated from the OpenAPI document for `create_job` (with real files of the right purpose
and a hub model id) are never a 5xx, and a 422 only comes from a rule the document states: the field
it names (`param`) carries a description in the schema, where the cross-field rules are written
(`at most data.train_batch_size`, `needs strategy fsdp2`, ...). `dry_run=true`: nothing is queued."""

from __future__ import annotations

from collections import Counter
from typing import Any

import pytest
import schemathesis
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from schemathesis.generation import GenerationMode

from api.main import app

pytestmark = pytest.mark.slow

EXAMPLES = 60
_PURPOSE = {"sft": "sft", "reward_model": "preference", "rm_distill": "preference", "dpo": "preference",
            "ppo": "prompts", "eval": "prompts"}


def _resolve(doc: dict[str, Any], node: dict[str, Any]) -> dict[str, Any]:
    while "$ref" in node:
        node = doc["components"]["schemas"][node["$ref"].rsplit("/", 1)[-1]]
    return node


def _field(doc: dict[str, Any], body: dict[str, Any], param: str) -> dict[str, Any] | None:
    """The schema of the body field at the dotted `param` (discriminated unions by their `type`)."""
    node: dict[str, Any] = _resolve(doc, doc["paths"]["/v1/jobs"]["post"]["requestBody"]["content"][
        "application/json"]["schema"])
    value: Any = body
    for part in param.split("."):
        if part.isdigit():
            node, value = _resolve(doc, node.get("items", {})), value[int(part)]
        else:
            for key in ("oneOf", "anyOf"):
                members = [_resolve(doc, m) for m in node.get(key, [])]
                objects = [m for m in members if "properties" in m]
                if objects:
                    kind = value.get("type") if isinstance(value, dict) else None
                    node = next((m for m in objects if (m["properties"].get("type") or {}).get("const") == kind),
                                objects[0])
            if part not in node.get("properties", {}):
                # A free-form map (`reward.options`): its entries are described by the map's description.
                extra = node.get("additionalProperties")
                if not isinstance(extra, dict) or not node.get("description"):
                    return None
                value = value.get(part) if isinstance(value, dict) else None
                node = _resolve(doc, extra) | {"description": node["description"]}
                continue
            field = node["properties"][part]
            value = value.get(part) if isinstance(value, dict) else None
            resolved = _resolve(doc, field)
            node = resolved | {"description": field.get("description") or resolved.get("description", "")}
    return node


def _ints(value: Any) -> Any:
    """Integral floats as ints: JSON Schema counts `1.0` as an integer, Keel's strict schemas do not
    (a known divergence the document cannot state)."""
    if isinstance(value, dict):
        return {k: _ints(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_ints(v) for v in value]
    return int(value) if isinstance(value, float) and value.is_integer() and abs(value) < 2**53 else value


def test_generated_job_bodies_are_accepted_or_refused_for_a_stated_rule(client, auth, db, project_key):
    from tests.api.job_requests import make_file

    files = {p: make_file(db, project_key[0], p) for p in ("sft", "preference", "prompts")}
    schema = schemathesis.openapi.from_asgi("/openapi.json", app)
    doc = client.get("/openapi.json").json()
    operation = schema["/v1/jobs"]["POST"]
    seen: Counter[str] = Counter()

    @given(st.data())
    @settings(max_examples=EXAMPLES, deadline=None, database=None, derandomize=True,
              suppress_health_check=list(HealthCheck))
    def check(data):
        case = data.draw(operation.as_strategy(generation_mode=GenerationMode.POSITIVE))
        body = _ints(case.body)
        if not isinstance(body, dict) or not isinstance(body.get("method"), dict):
            return
        kind = body["method"].get("type")
        body.update(model="org/name", training_file=files[_PURPOSE.get(kind, "sft")])
        for optional in ("validation_file", "from_checkpoint", "integrations"):
            body.pop(optional, None)
        # An override's value is free text the schema cannot type (its key has a pattern): left out.
        body["method"]["overrides"] = []
        reward = body["method"].get("reward")
        if isinstance(reward, dict) and reward.get("model") is not None:
            reward["model"] = "org/name"
        for ref in ("teacher", "compare_to"):
            if ref in body["method"]:
                body["method"][ref] = "org/name"
        r = client.post("/v1/jobs", params={"dry_run": "true"}, json=body, headers=auth)
        assert r.status_code < 500, r.text
        if r.status_code == 422:
            param = r.json().get("param") or ""
            field = _field(doc, body, param)
            assert field is not None and field.get("description"), (param, r.json()["detail"])
            seen[r.json()["code"]] += 1
        else:
            seen[str(r.status_code)] += 1

    check()
    print(f"\ncreate_job, {EXAMPLES} generated bodies: {dict(seen)}")
    assert sum(seen.values()) > 0
