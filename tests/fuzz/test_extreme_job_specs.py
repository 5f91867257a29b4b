"""Job specs with extreme numbers and sizes are a 422 naming the field, before anything happens: no job
row is written and nothing is sent to the broker (the dispatcher is a recorder here, and Celery's
`send_task` fails the test if anything reaches it)."""

from __future__ import annotations

import copy
import json
import math

import pytest
import security_support
from sqlalchemy import func, select

from core.models import Job, Model

jobs_api = security_support.api_jobs()
HP = "method.hyperparameters"


@pytest.fixture(autouse=True)
def field_checks_past_the_body_limit(monkeypatch):
    """Megabyte-sized fields: with the default `KEEL_MAX_JSON_BODY_BYTES` (1 MiB) such bodies are a
    413 before they are read (tests/api/test_limits.py); here the limit is raised so the per-field
    checks behind it are what is tested."""
    from core.config import settings

    monkeypatch.setattr(settings, "MAX_JSON_BODY_BYTES", 64 * 2**20)


@pytest.fixture
def nothing_sent(monkeypatch):
    """Calls into workers.dispatch, [(name, job_id)]; any publish to the broker raises."""
    from workers import dispatch
    from workers.celery_app import celery_app

    calls: list[tuple[str, str]] = []
    monkeypatch.setattr(dispatch, "enqueue_job", lambda job_id: calls.append(("enqueue_job", job_id)) or True)
    monkeypatch.setattr(dispatch, "request_cancel", lambda job_id: calls.append(("request_cancel", job_id)))

    def refuse(*args, **kwargs):
        raise AssertionError(f"sent to the broker: {args} {kwargs}")

    monkeypatch.setattr(celery_app, "send_task", refuse)
    return calls


@pytest.fixture
def files(db, project_key):
    return {p: jobs_api.make_file(db, project_key[0], p) for p in ("sft", "preference", "prompts")}


def body_for(files, method: str) -> dict:
    if method == "ppo":
        return jobs_api.ppo_body(files)
    body = jobs_api.rm_body(files)
    if method == "sft":
        body["training_file"] = files["sft"]
        body["method"]["type"] = "sft"
    return body


def put(body: dict, dotted: str, value) -> dict:
    """A copy of `body` with `value` at the dotted path (containers created on the way)."""
    body = copy.deepcopy(body)
    *parents, leaf = dotted.split(".")
    node = body
    for part in parents:
        node = node.setdefault(part, {})
    node[leaf] = value
    return body


def job_count(db, project_id: str) -> int:
    db.expire_all()
    return db.scalar(select(func.count()).select_from(Job).where(Job.project_id == project_id))


def post_raw(client, auth, raw: str | bytes):
    """POST a body as given: JSON's NaN and Infinity tokens, 1e999, deep nesting survive untouched."""
    return client.post("/v1/jobs", content=raw, headers={**auth, "Content-Type": "application/json"})


def assert_refused(r, db, project_id, sent, param: str | None, code: str = "invalid_request"):
    body = security_support.api_files().assert_problem(r, 422, code, param)
    assert job_count(db, project_id) == 0 and sent == []
    return body


BIG = 10**12
EXTREME = [
    # (method, field, value): sizes and counts far beyond anything real
    ("reward_model", f"{HP}.data.train_batch_size", BIG),
    ("ppo", f"{HP}.data.train_batch_size", BIG),
    ("ppo", f"{HP}.actor.ppo_mini_batch_size", BIG),
    ("ppo", f"{HP}.actor.ppo_micro_batch_size_per_gpu", BIG),
    ("ppo", f"{HP}.actor.ppo_max_token_len_per_gpu", BIG),
    ("ppo", f"{HP}.rollout.n", BIG),
    ("ppo", f"{HP}.rollout.top_k", BIG),
    ("sft", f"{HP}.micro_batch_size_per_gpu", BIG),
    ("sft", f"{HP}.trainer.total_training_steps", BIG),
    ("sft", f"{HP}.trainer.total_epochs", BIG),
    ("sft", f"{HP}.model.lora_rank", BIG),
    ("reward_model", "resources.num_workers", BIG),
    ("reward_model", "resources.gpus_per_worker", 1e12),
    ("reward_model", "seed", 2**63),
    ("reward_model", "seed", 10**400),
    # lengths beyond any model's context window
    ("sft", f"{HP}.data.max_prompt_length", 10**7),
    ("ppo", f"{HP}.data.max_response_length", 2**31),
    ("reward_model", f"{HP}.data.max_length", BIG),
    # negative and zero sizes
    ("reward_model", f"{HP}.data.train_batch_size", -1),
    ("reward_model", f"{HP}.data.train_batch_size", 0),
    ("ppo", f"{HP}.data.max_prompt_length", -512),
    ("ppo", f"{HP}.rollout.n", -3),
    ("sft", f"{HP}.trainer.save_freq", -2),
    ("sft", f"{HP}.optim.lr", -1e-5),
    ("sft", f"{HP}.optim.weight_decay", -0.1),
    ("reward_model", "resources.cpus_per_worker", -1.0),
    ("reward_model", "seed", -1),
    ("ppo", f"{HP}.guardrails.step_timeout_s", -1.0),
    # tiny and huge floats that are still finite
    ("sft", f"{HP}.optim.lr", 1e308),
    ("ppo", f"{HP}.actor.clip_ratio", 5e-324 * 0 - 1e-300),
    ("ppo", f"{HP}.rollout.temperature", 1e300),
    # wrong types for sizes: no coercion of strings, bools or floats
    ("reward_model", f"{HP}.data.train_batch_size", "64"),
    ("reward_model", f"{HP}.data.train_batch_size", True),
    ("reward_model", f"{HP}.data.train_batch_size", 64.5),
]


@pytest.mark.parametrize(("method", "field", "value"), EXTREME,
                         ids=[f"{f.removeprefix(HP + '.')}={v!r:.12}" for _, f, v in EXTREME])
def test_extreme_numbers_are_refused_before_anything_happens(client, auth, db, project_key, files, nothing_sent,
                                                            method, field, value):
    r = client.post("/v1/jobs", json=put(body_for(files, method), field, value), headers=auth)
    assert_refused(r, db, project_key[0], nothing_sent, field)


NON_FINITE = [
    (f"{HP}.actor.optim.lr", "NaN"),
    (f"{HP}.actor.optim.lr", "Infinity"),
    (f"{HP}.critic.optim.lr", "-Infinity"),
    (f"{HP}.actor.optim.lr", "1e999"),  # a finite-looking literal that parses to inf
    (f"{HP}.actor.clip_ratio", "NaN"),
    (f"{HP}.actor.entropy_coeff", "Infinity"),
    (f"{HP}.algorithm.gamma", "NaN"),
    (f"{HP}.algorithm.kl_ctrl.target_kl", "-1e999"),
    (f"{HP}.rollout.temperature", "NaN"),
    (f"{HP}.guardrails.rollback_kl", "Infinity"),
    (f"{HP}.actor.optim.betas", "[NaN, 0.999]"),
    ("resources.cpus_per_worker", "NaN"),
    ("method.reward.options", '{"scale": NaN}'),
]


@pytest.mark.parametrize(("field", "literal"), NON_FINITE, ids=[f"{f}={v}" for f, v in NON_FINITE])
def test_nan_and_infinity_are_refused(client, auth, db, project_key, files, nothing_sent, field, literal):
    marker = "__VALUE__"
    raw = json.dumps(put(body_for(files, "ppo"), field, marker)).replace(f'"{marker}"', literal)
    body = json.loads(raw)  # Python's parser reads these tokens as the server's does
    assert any(isinstance(v, float) and not math.isfinite(v) for v in _leaves(body))
    r = post_raw(client, auth, raw)
    problem = assert_refused(r, db, project_key[0], nothing_sent, None)
    assert problem["param"].startswith(field), problem


def _leaves(value):
    if isinstance(value, dict):
        for v in value.values():
            yield from _leaves(v)
    elif isinstance(value, list):
        for v in value:
            yield from _leaves(v)
    else:
        yield value


MB = 1024 * 1024
HUGE = [
    ("reward_model", "model", "a" * MB),
    ("reward_model", "model", "org/" + "n" * MB),
    ("reward_model", "training_file", "file-" + "x" * MB),
    ("reward_model", "validation_file", "file-" + "x" * MB),
    ("reward_model", "from_checkpoint", "ckpt-" + "x" * MB),
    ("reward_model", "suffix", "s" * MB),
    ("reward_model", "metadata", {"k": "v" * MB}),
    ("reward_model", "metadata", {"k" * MB: "v"}),
    ("reward_model", "metadata", {f"k{i}": "v" for i in range(10_000)}),
    ("rm_distill", "method.teacher", "t" * MB),
    ("ppo", "method.reward.model", "r" * MB),
    ("ppo", "method.reward.options", {"pattern": "a" * MB}),
    ("ppo", "method.reward.options", {f"o{i}": 1 for i in range(10_000)}),
    ("ppo", "method.overrides", ["actor.ppo_epochs=4"] * 10_000),
    ("ppo", "method.overrides", ["actor.ppo_epochs=" + "4" * MB]),
    ("sft", f"{HP}.model.lora_adapter_path", "/" + "p" * MB),
    ("sft", f"{HP}.model.target_modules", "m" * MB),
    ("sft", f"{HP}.model.target_modules", ["q_proj"] * 100_000),
    ("sft", f"{HP}.model.target_modules", ["q" * MB]),
]


@pytest.mark.parametrize(("method", "field", "value"), HUGE,
                         ids=[f"{f}:{len(json.dumps(v)) // 1000}kB" for _, f, v in HUGE])
def test_huge_strings_and_collections_are_refused(client, auth, db, project_key, files, nothing_sent,
                                                  method, field, value):
    body = body_for(files, "rm_distill" if method == "rm_distill" else method)
    if method == "rm_distill":
        body["method"] = {"type": "rm_distill", "teacher": "org/teacher"}
    r = client.post("/v1/jobs", json=put(body, field, value), headers=auth)
    problem = assert_refused(r, db, project_key[0], nothing_sent, None)
    assert (problem.get("param") or "").startswith(field), problem
    assert len(r.content) < 64 * 1024, "the problem must not echo the huge value back"


def test_a_deeply_nested_body_is_a_422(client, auth, db, project_key, files, nothing_sent):
    """Deep enough to overflow a recursive JSON parser: still a clean 422, never a 5xx."""
    depth = 100_000
    raw = json.dumps(body_for(files, "ppo"))[:-1] + ', "metadata": ' + "[" * depth + "]" * depth + "}"
    assert_refused(post_raw(client, auth, raw), db, project_key[0], nothing_sent, None)


@pytest.mark.parametrize("raw", [b"\xff\xfe{}", b"{", b"[]", b"null", b"1e999", b'"' + b"x" * MB + b'"'],
                         ids=["not-utf8", "truncated", "array", "null", "inf", "huge-string"])
def test_bodies_that_are_not_a_job_object_are_a_422(client, auth, db, project_key, nothing_sent, raw):
    assert_refused(post_raw(client, auth, raw), db, project_key[0], nothing_sent, None)


# --- lengths beyond the model's own context window --------------------------------------------------

@pytest.fixture
def small_model(keel_home, db, project_key):
    """A local model directory (under the model roots) and a Keel model whose context is 512 tokens."""
    import secrets

    path = keel_home / "models" / f"ctx512-{secrets.token_hex(3)}"
    path.mkdir(parents=True)
    (path / "config.json").write_text(json.dumps({"model_type": "llama", "max_position_embeddings": 512}))
    model = Model(project_id=project_key[0], name="ctx512", kind="policy", format="hf", base_model="org/x",
                  path=str(path))
    db.add(model)
    db.commit()
    return {"dir": str(path), "model_id": model.id}


@pytest.mark.parametrize("ref", ["dir", "model_id"])
@pytest.mark.parametrize(("method", "data", "param"), [
    ("sft", {"max_prompt_length": 1024}, "max_response_length"),  # the response left out: 1 token, still over
    ("sft", {"max_prompt_length": 256, "max_response_length": 257}, "max_response_length"),
    ("ppo", {"max_prompt_length": 500, "max_response_length": 100}, "max_response_length"),
    ("reward_model", {"max_length": 4096}, "max_length"),
    ("reward_model", {"max_length": 513}, "max_length"),
])
def test_lengths_beyond_the_models_context_are_refused(client, auth, db, project_key, files, nothing_sent,
                                                       small_model, ref, method, data, param):
    body = put(put(body_for(files, method), "model", small_model[ref]), f"{HP}.data", data)
    r = client.post("/v1/jobs", json=body, headers=auth)
    problem = assert_refused(r, db, project_key[0], nothing_sent, f"{HP}.data.{param}", "context_too_long")
    assert "512" in problem["detail"]


@pytest.mark.parametrize("ref", ["dir", "model_id"])
def test_lengths_within_the_context_are_accepted(client, auth, db, project_key, files, nothing_sent, small_model,
                                                 ref):
    body = put(put(body_for(files, "reward_model"), "model", small_model[ref]), f"{HP}.data", {"max_length": 512})
    r = client.post("/v1/jobs", json=body, headers=auth)
    assert r.status_code == 201, r.text
    assert nothing_sent == []  # a create publishes nothing: the sweepers send the job
    security_support.retire_jobs(project_key[0])
