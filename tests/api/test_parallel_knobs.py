"""Sequence and tensor parallelism knobs at job create: `ulysses_sequence_parallel_size` (SFT, reward
models and each PPO role) must divide the workers and the model's heads and needs packed rows;
`rollout.tensor_model_parallel_size` must divide a rollout worker's GPUs and needs vllm. Every
refusal is a 422 naming the parameter."""

from __future__ import annotations

import json
import secrets
from pathlib import Path

import pytest

from tests.api.job_requests import create, make_file, ppo_body, rm_body


@pytest.fixture
def dispatched(monkeypatch):
    from workers import dispatch

    monkeypatch.setattr(dispatch, "enqueue_job", lambda job_id: True)


@pytest.fixture
def files(db, project_key):
    return {p: make_file(db, project_key[0], p) for p in ("preference", "prompts")}

SP = "method.hyperparameters.ulysses_sequence_parallel_size"


def _model(heads: int, kv_heads: int) -> str:
    from core.config import settings

    model = Path(settings.model_roots[0]) / f"heads-{secrets.token_hex(4)}"
    model.mkdir(parents=True)
    (model / "config.json").write_text(json.dumps({"max_position_embeddings": 4096, "num_attention_heads": heads,
                                                   "num_key_value_heads": kv_heads}))
    return str(model)


def _sp(files, sp: int, workers: int = 2, base: str = "org/name", **hyper) -> dict:
    body = rm_body(files)
    body["model"] = base
    body["method"]["hyperparameters"].update(ulysses_sequence_parallel_size=sp, **hyper)
    body["resources"] = {"num_workers": workers, "cpus_per_worker": 1}
    return body


def _refused(r, param: str) -> None:
    assert r.status_code == 422, r.text
    assert r.json()["param"] == param, r.json()


def test_sequence_parallel_size_is_accepted_and_kept(client, auth, files, dispatched):
    r = create(client, auth, _sp(files, 2, base=_model(4, 2)))
    assert r.status_code == 201, r.text
    assert r.json()["method"]["hyperparameters"]["ulysses_sequence_parallel_size"] == 2


@pytest.mark.parametrize(("sp", "workers", "heads", "kv"), [(2, 3, 4, 4), (4, 4, 6, 6), (2, 2, 4, 1)])
def test_sequence_parallel_size_must_divide_workers_and_heads(client, auth, files, dispatched, sp, workers, heads, kv):
    _refused(create(client, auth, _sp(files, sp, workers, base=_model(heads, kv))), SP)


def test_sequence_parallelism_needs_packed_rows(client, auth, files, dispatched):
    _refused(create(client, auth, _sp(files, 2, model={"use_remove_padding": False})), SP)


@pytest.mark.parametrize("role", ["actor", "critic", "ref"])
def test_ppo_roles_take_sequence_parallelism_with_the_same_rules(client, auth, files, dispatched, role):
    param = f"method.hyperparameters.{role}.ulysses_sequence_parallel_size"

    def body(workers: int, heads: int, **hyper) -> dict:
        b = ppo_body(files, **{role: {"ulysses_sequence_parallel_size": 2}}, **hyper)
        return {**b, "model": _model(heads, heads), "resources": {"num_workers": workers, "cpus_per_worker": 1}}

    r = create(client, auth, body(2, 4))
    assert r.status_code == 201, r.text
    assert r.json()["method"]["hyperparameters"][role]["ulysses_sequence_parallel_size"] == 2
    _refused(create(client, auth, body(3, 4)), param)
    _refused(create(client, auth, body(2, 3)), param)
    _refused(create(client, auth, body(2, 4, model={"use_remove_padding": False})), param)


def test_tp_needs_vllm_and_gpus(client, auth, files, dispatched):
    tp = "method.hyperparameters.rollout.tensor_model_parallel_size"
    _refused(create(client, auth, ppo_body(files, rollout={"tensor_model_parallel_size": 2})), tp)
    body = ppo_body(files, rollout={"name": "vllm", "tensor_model_parallel_size": 2})
    _refused(create(client, auth, {**body, "resources": {"gpus_per_worker": 1}}), tp)
    r = create(client, auth, {**body, "resources": {"gpus_per_worker": 2}})
    assert r.status_code == 201, r.text
    assert r.json()["method"]["hyperparameters"]["rollout"]["tensor_model_parallel_size"] == 2
