"""Schemathesis against the live OpenAPI document: every operation, with a valid key, in-process
over ASGI against PostgreSQL. No response may be a 5xx, and every response must match the document:
a declared status code, the declared content type, a body that fits the schema, the documented
headers (`Allow` on a 405 included), a 4xx for a request that breaks the schema, and a 401 when the
key is left out (each case is replayed without it).

Path parameters are a generated string most of the time and a real id of the fuzzing project's own
resources otherwise (one in three, chosen from the generated value so a failing case replays), so the
200 paths (pages, previews, tars, streams, cancels, deletes) are fuzzed too, not only the 404s.
Created jobs stay queued: the dispatcher is replaced and the project's jobs are cancelled at the end.

Not checked: `positive_data_acceptance`, which expects every schema-valid request to succeed; Keel
rightly refuses some with a 4xx the schema cannot express (`actor.ppo_mini_batch_size` above
`data.train_batch_size`, a training file that does not exist, a `metadata` form field that is not a
JSON object).

Generation is derandomized, so a run repeats the last one's inputs (the count moves by a few dozen:
the real ids, hence some responses, differ). The total is printed at the end of the session and must
reach 2,000. Set KEEL_FUZZ_EXAMPLES to change the examples per operation and KEEL_FUZZ_RANDOM=1 to
explore new inputs.
"""

from __future__ import annotations

import hashlib
import json
import os
import zlib

import pytest
import schemathesis
from fastapi.testclient import TestClient
from hypothesis import HealthCheck, settings
from schemathesis.checks import (
    allow_header_conformance,
    content_type_conformance,
    ignored_auth,
    missing_required_header,
    negative_data_rejection,
    not_a_server_error,
    response_headers_conformance,
    response_schema_conformance,
    status_code_conformance,
    unsupported_method,
)

from api.main import app

pytestmark = pytest.mark.slow

MIN_CASES = 2000
EXAMPLES = int(os.environ.get("KEEL_FUZZ_EXAMPLES", "40"))
"""Hypothesis examples per operation in the fuzzing phase (the coverage phase adds its own cases)."""
CHECKS = [not_a_server_error, status_code_conformance, content_type_conformance, response_headers_conformance,
          response_schema_conformance, negative_data_rejection, missing_required_header, unsupported_method,
          allow_header_conformance, ignored_auth]
"""Everything schemathesis checks on a single response except `positive_data_acceptance` (see above)."""

schema = schemathesis.openapi.from_asgi("/openapi.json", app)
# Keel ignores query parameters it does not know (as most HTTP APIs do), so an unknown one is no
# "schema violation"; the key is sent with every case (`ignored_auth` also replays each without it),
# never generated.
schema.config.generation.update(allow_extra_parameters=False, with_security_parameters=False)
_real: dict[str, dict[str, str]] = {}
"""Per operation id: path parameter -> a real id of the fuzzing project (filled by `world`)."""
_files: dict[str, str] = {}
"""Purpose -> a file of the fuzzing project (filled by `world`)."""
_ROWS = {"sft": [{"prompt": "Say hi.", "response": "Hi."}],
         "prompts": [{"prompt": "What is 2 + 2?", "ground_truth": "4"}],
         "preference": [{"prompt": "2 + 2?", "chosen": "4", "rejected": "5"}]}
"""Valid JSON Lines per purpose: half of the uploads carry them (with fuzzed metadata and names)."""
_PURPOSE = {"sft": "sft", "reward_model": "preference", "rm_distill": "preference", "ppo": "prompts"}


def _pick(value, share: int) -> bool:
    """True for about 1/share of the values, the same way every time (a failing case replays)."""
    return zlib.crc32(json.dumps(value, sort_keys=True, default=str).encode()) % share == 0


@schemathesis.hook  # global-only; acts while `world` is up (schemathesis then re-checks the case's validity)
def before_call(context, case, kwargs):
    """Point a third of the path ids at the project's real resources, half of the uploads' files
    at valid JSON Lines (metadata: the generated text as a value), and half of the `create_job`
    bodies at a real file of the right purpose with a plain hub id, so the 2xx paths (pages,
    previews, tars, streams, cancels, deletes, uploads, created jobs) are fuzzed, not only the 4xx. A
    single-valued query parameter sent several times is sent once, with the value FastAPI would
    read (the last): Keel does not refuse the repetition, and it is no violation to check for."""
    op_id = case.operation.definition.raw.get("operationId", "")
    if not _files:
        return
    for name, value in list((case.path_parameters or {}).items()):
        if name in _real.get(op_id, {}) and _pick(value, 3):
            case.path_parameters[name] = _real[op_id][name]
    for param in case.operation.definition.raw.get("parameters", []):
        value = (case.query or {}).get(param["name"])
        if param.get("in") == "query" and isinstance(value, list) and value and '"array"' not in json.dumps(
                param.get("schema", {})):
            case.query[param["name"]] = value[-1]
    body = case.body
    positive = case.meta is not None and case.meta.generation.mode.value == "positive"
    if op_id == "upload_file" and positive and isinstance(body, dict) and body.get("purpose") in _ROWS and _pick(
            body, 2):  # (text, not bytes: the re-check reads the binary field as a string)
        body["file"] = "".join(json.dumps(row) + "\n" for row in _ROWS[body["purpose"]])
        if isinstance(body.get("metadata"), str):
            body["metadata"] = json.dumps({"note": body["metadata"][:512]})
    if op_id == "create_job" and isinstance(body, dict) and isinstance(body.get("method"), dict):
        kind = body["method"].get("type")
        if isinstance(kind, str) and kind in _PURPOSE and _pick(body, 2):
            body["training_file"], body["model"] = _files[_PURPOSE[kind]], "org/name"
            for optional in ("validation_file", "from_checkpoint"):
                body.pop(optional, None)
            if case.headers and "Idempotency-Key" in case.headers:  # one key per body, not one for all
                case.headers["Idempotency-Key"] = hashlib.sha256(json.dumps(body, sort_keys=True, default=str)
                                                                 .encode()).hexdigest()


@pytest.fixture(scope="module")
def world(database, keel_home):
    import security_support

    with pytest.MonkeyPatch.context() as mp, TestClient(app) as client:
        w = security_support.build_world(client, keel_home, mp, prefix="fuzz")
        ids = w.ids
        files = security_support.api_files()
        for purpose in ("sft", "prompts"):
            rows = [{**row, "prompt": "fuzz " + row["prompt"]} for row in _ROWS[purpose]]
            r = files.upload(client, w.headers, files.jsonl_bytes(rows), purpose=purpose, filename="f.jsonl")
            assert r.status_code == 201, r.text
            _files[purpose] = r.json()["id"]
        _files["preference"] = w.file_id
        for op in schema.get_all_operations():
            operation = op.ok()
            op_id = operation.definition.raw["operationId"]
            real = {name: ids[name] for name in security_support.path_params(operation.path) if name in ids}
            if op_id == "delete_file":
                real["file_id"] = w.spare_file_id  # deleted once, then a 404 like any other id
            elif op_id == "cancel_job":
                real["job_id"] = w.queued_job_id  # cancelled once, then a 409
            _real[op_id] = real
        yield w.headers
        _real.clear()
        _files.clear()
        security_support.retire_jobs(w.project_id)


@schema.parametrize()
@settings(max_examples=EXAMPLES, deadline=None, database=None, suppress_health_check=list(HealthCheck),
          derandomize=os.environ.get("KEEL_FUZZ_RANDOM") != "1")
def test_every_operation_conforms(case, world, schemathesis_cases):
    response = case.call_and_validate(headers=world, checks=CHECKS)
    schemathesis_cases[f"{case.operation.method.upper()} {case.operation.path}"][response.status_code] += 1


def test_generated_enough_cases(schemathesis_cases):
    """Runs after the operations (file order); skipped when only part of them was selected."""
    operations = len(list(schema.get_all_operations()))
    if len(schemathesis_cases) < operations:
        pytest.skip("the schemathesis run was not selected in full")
    total = sum(n for statuses in schemathesis_cases.values() for n in statuses.values())
    print(f"\nschemathesis: {total} generated cases over {operations} operations")
    assert total >= MIN_CASES, f"only {total} cases; raise KEEL_FUZZ_EXAMPLES"


