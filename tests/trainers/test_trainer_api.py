"""The trainer routes without a worker: creation, validation with the exact `param` and nothing queued,
ownership, the 409 of a deleted trainer, idempotency, the operation's lifecycle fields, events."""

from __future__ import annotations

import pytest
from sqlalchemy import func, select
from trainer_support import VOCAB, WINDOW, assert_problem, ce_datum, datum, fake_model

from core.models import Trainer, TrainerOperation


@pytest.fixture
def sent(monkeypatch):
    """Trainer ids handed to the dispatcher (nothing reaches a broker)."""
    from workers import dispatch

    calls: list[str] = []
    monkeypatch.setattr(dispatch, "enqueue_trainer", lambda trainer_id, **_: calls.append(trainer_id) or True)
    return calls


@pytest.fixture
def trainer(client, auth, keel_home, sent) -> dict:
    r = client.post("/v1/trainers", headers=auth, json={"model": fake_model(keel_home), "seed": 3,
                                                         "lora": {"rank": 4}, "metadata": {"team": "rl"}})
    assert r.status_code == 201, r.text
    return r.json()


def _ops(db, trainer_id: str) -> int:
    db.expire_all()
    return db.scalar(select(func.count()).select_from(TrainerOperation).where(TrainerOperation.trainer_id == trainer_id))


def test_create_reads_the_vocabulary_and_lists(client, auth, other_auth, trainer):
    assert trainer["object"] == "trainer" and trainer["status"] == "active" and trainer["step"] == 0
    assert trainer["vocab_size"] == VOCAB and trainer["lora"] == {"rank": 4, "alpha": 16, "target_modules": "all-linear"}
    assert trainer["resources"] == {"num_cpus": 1.0, "num_gpus": 0.0} and trainer["idle_timeout_s"] == 600
    assert trainer["metadata"] == {"team": "rl"} and trainer["created_by"]
    assert client.get(f"/v1/trainers/{trainer['id']}", headers=auth).json() == trainer
    assert [t["id"] for t in client.get("/v1/trainers", headers=auth).json()["data"]] == [trainer["id"]]
    assert client.get("/v1/trainers?status=deleted", headers=auth).json()["data"] == []
    assert client.get("/v1/trainers", headers=other_auth).json()["data"] == []
    events = client.get(f"/v1/trainers/{trainer['id']}/events", headers=auth).json()
    assert [(e["seq"], e["type"], e["data"]["status"]) for e in events["data"]] == [(1, "trainer.status", "active")]


@pytest.mark.parametrize(("body", "param"), [
    ({"model": "../etc"}, "model"),
    ({"model": "org/name", "lora": {"rank": 0}}, "lora.rank"),
    ({"model": "org/name", "resources": {"num_gpus": -1}}, "resources.num_gpus"),
    ({"model": "org/name", "idle_timeout_s": 0}, "idle_timeout_s"),
    ({"model": "org/name", "dtype": "int8"}, "dtype"),
    ({"model": "org/name", "optimizer": "sgd"}, "optimizer"),
    ({"model": "model-01nosuchmodel"}, "model"),
])
def test_bad_creates_name_the_field(client, auth, db, project_key, body, param, sent):
    r = client.post("/v1/trainers", headers=auth, json=body)
    assert r.status_code in (404, 422), r.text
    assert r.json()["param"] == param
    assert db.scalar(select(func.count()).select_from(Trainer).where(Trainer.project_id == project_key[0])) == 0


def test_a_call_is_queued_with_its_location(client, auth, db, trainer, sent):
    r = client.post(f"/v1/trainers/{trainer['id']}/forward_backward", headers=auth,
                    json={"data": [ce_datum(), ce_datum(6)], "loss_fn": "cross_entropy"})
    assert r.status_code == 202, r.text
    op = r.json()
    assert (op["object"], op["kind"], op["status"], op["seq"], op["result"], op["error"]) == \
        ("trainer.operation", "forward_backward", "queued", 1, None, None)
    assert r.headers["Location"] == f"/v1/trainers/{trainer['id']}/operations/{op['id']}"
    assert client.get(r.headers["Location"], headers=auth).json() == op
    assert sent == [trainer["id"]]
    r2 = client.post(f"/v1/trainers/{trainer['id']}/optim_step", headers=auth, json={"adam_params": {"learning_rate": 0.01}})
    assert r2.status_code == 202 and r2.json()["seq"] == 2
    stored = db.get(TrainerOperation, r2.json()["id"]).request
    assert stored["adam_params"] == {"learning_rate": 0.01, "beta1": 0.9, "beta2": 0.95, "eps": 1e-12,
                                     "weight_decay": 0.0, "grad_clip_norm": 0.0}
    listed = client.get(f"/v1/trainers/{trainer['id']}/operations", headers=auth).json()["data"]
    assert [o["seq"] for o in listed] == [2, 1]
    # A long-poll on an operation no worker runs answers after `wait`, still queued.
    assert client.get(r.headers["Location"] + "?wait=0.3", headers=auth).json()["status"] == "queued"


BAD_CALLS = [
    ("forward_backward", {"data": []}, "data"),
    ("forward_backward", {"data": [datum(4, target_tokens=[1, 2, 3, 4])]}, "data.0.loss_fn_inputs.weights"),
    ("forward_backward", {"data": [ce_datum(), datum(4, target_tokens=[1, 2, 3], weights=[1.0] * 4)]},
     "data.1.loss_fn_inputs.target_tokens"),
    ("forward_backward", {"data": [ce_datum()], "loss_fn": "importance_sampling"}, "data.0.loss_fn_inputs.weights"),
    ("forward_backward", {"data": [datum(2, target_tokens=[1, 2])], "loss_fn": "importance_sampling"},
     "data.0.loss_fn_inputs.logprobs"),
    ("forward_backward", {"data": [datum(2, target_tokens=[1, 2], logprobs=[0.0, 0.0])], "loss_fn": "ppo"},
     "data.0.loss_fn_inputs.advantages"),
    ("forward_backward", {"data": [ce_datum()], "loss_fn": "dpo"}, "data"),
    ("forward_backward", {"data": [ce_datum()], "loss_fn_config": {"beta": 0.1}}, "loss_fn_config.beta"),
    ("forward_backward", {"data": [datum(2, target_tokens=[1, 2], weights=[1.0, 1.0], advantages=[1.0, 1.0])]},
     "data.0.loss_fn_inputs.advantages"),
    ("forward_backward", {"data": [{"model_input": [1, -2], "loss_fn_inputs": {}}]}, "data.0.model_input.1"),
    ("forward_backward", {"data": [datum(3, target_tokens=[1, VOCAB, 2], weights=[1.0] * 3)]},
     "data.0.loss_fn_inputs.target_tokens"),
    ("forward_backward", {"data": [{"model_input": [VOCAB + 5], "loss_fn_inputs": {"target_tokens": [1],
                                                                                   "weights": [1.0]}}]},
     "data.0.model_input"),
    ("forward_backward", {"data": [ce_datum(WINDOW + 1)]}, "data.0.model_input"),
    ("forward_backward", {"data": [ce_datum()], "loss_fn": "hinge"}, "loss_fn"),
    ("forward", {"data": [datum(2, target_tokens=[1, 2], weights=[1.0, float("nan")])]}, None),
    ("optim_step", {"adam_params": {"learning_rate": 0}}, "adam_params.learning_rate"),
    ("optim_step", {"adam_params": {"beta2": 1.0}}, "adam_params.beta2"),
    ("optim_step", {"adam_params": {"momentum": 0.9}}, "adam_params.momentum"),
    ("sample", {"prompts": []}, "prompts"),
    ("sample", {"prompts": [[1, 2]], "num_samples": 0}, "num_samples"),
    ("sample", {"prompts": [[1, 2]] * 100, "num_samples": 11}, "num_samples"),
    ("sample", {"prompts": [[1, VOCAB]]}, "prompts.0"),
    ("sample", {"prompts": [[1, 2]], "sampling_params": {"top_p": 0}}, "sampling_params.top_p"),
    ("sample", {"prompts": [[1, 2]], "sampling_params": {"max_tokens": WINDOW}}, "sampling_params.max_tokens"),
    ("sample", {"prompts": [[1, 2]], "sampler_path": "model-01nosuchmodel"}, "sampler_path"),
    ("save_state", {"name": "../up"}, "name"),
    ("save_state", {}, "name"),
    ("load_state", {"path": "/etc/passwd"}, "path"),
    ("load_state", {"path": "model-01nosuchmodel"}, "path"),
    ("save_weights_for_sampler", {"name": ""}, "name"),
]


@pytest.mark.parametrize(("kind", "body", "param"), BAD_CALLS, ids=[f"{k}-{p}" for k, _, p in BAD_CALLS])
def test_bad_calls_are_4xx_with_param_and_queue_nothing(client, auth, db, trainer, sent, kind, body, param):
    import json

    r = client.post(f"/v1/trainers/{trainer['id']}/{kind}", headers={**auth, "Content-Type": "application/json"},
                    content=json.dumps(body))  # (NaN survives as JSON's NaN token)
    assert r.status_code in (404, 422), r.text
    if param is not None:
        assert r.json()["param"] == param, r.json()
    assert _ops(db, trainer["id"]) == 0 and sent == []
    after = client.get(f"/v1/trainers/{trainer['id']}", headers=auth).json()
    assert after == trainer  # step, tokens, status: unchanged


def test_another_projects_trainer_is_404(client, other_auth, trainer, db, sent):
    tid = trainer["id"]
    for method, path, body in [("GET", f"/v1/trainers/{tid}", None), ("DELETE", f"/v1/trainers/{tid}", None),
                               ("POST", f"/v1/trainers/{tid}/forward_backward", {"data": [ce_datum()]}),
                               ("POST", f"/v1/trainers/{tid}/optim_step", {}),
                               ("GET", f"/v1/trainers/{tid}/events", None),
                               ("GET", f"/v1/trainers/{tid}/events/stream", None),
                               ("GET", f"/v1/trainers/{tid}/operations", None)]:
        r = client.request(method, path, headers=other_auth, json=body)
        assert_problem(r, 404, "not_found", "trainer_id")
    assert _ops(db, tid) == 0 and db.get(Trainer, tid).status == "active"


def test_a_deleted_trainer_is_409_and_its_queue_fails(client, auth, db, trainer, sent):
    tid = trainer["id"]
    queued = client.post(f"/v1/trainers/{tid}/forward_backward", headers=auth, json={"data": [ce_datum()]}).json()
    r = client.delete(f"/v1/trainers/{tid}", headers=auth)
    assert r.status_code == 200 and r.json()["status"] == "deleted"
    assert sent == [tid, tid]  # the queued call, then the release
    assert client.delete(f"/v1/trainers/{tid}", headers=auth).json()["status"] == "deleted"  # idempotent
    op = client.get(f"/v1/trainers/{tid}/operations/{queued['id']}", headers=auth).json()
    assert op["status"] == "failed" and op["error"]["code"] == "trainer_deleted"
    for kind, body in [("forward_backward", {"data": [ce_datum()]}), ("optim_step", {}),
                       ("save_state", {"name": "x"})]:
        assert_problem(client.post(f"/v1/trainers/{tid}/{kind}", headers=auth, json=body), 409, "trainer_deleted",
                       "trainer_id")
    assert _ops(db, tid) == 1
    types = [(e["type"], e["data"].get("status")) for e in
             client.get(f"/v1/trainers/{tid}/events", headers=auth).json()["data"]]
    assert types == [("trainer.status", "active"), ("trainer.status", "deleted")]
    # The stream of an ended trainer replays its log and ends.
    with client.stream("GET", f"/v1/trainers/{tid}/events/stream", headers={**auth, "Last-Event-ID": "1"}) as s:
        body = "".join(s.iter_text())
    assert "id: 2\n" in body and "id: 1\n" not in body and "event: trainer.status" in body


def test_idempotency_key_replays_the_same_operation(client, auth, db, trainer, sent):
    tid = trainer["id"]
    headers = {**auth, "Idempotency-Key": "fb-1"}
    first = client.post(f"/v1/trainers/{tid}/forward_backward", headers=headers, json={"data": [ce_datum()]})
    again = client.post(f"/v1/trainers/{tid}/forward_backward", headers=headers, json={"data": [ce_datum()]})
    assert first.status_code == again.status_code == 202
    assert again.json() == first.json() and again.headers["Idempotent-Replayed"] == "true"
    assert _ops(db, tid) == 1 and sent == [tid]
    other = client.post(f"/v1/trainers/{tid}/forward_backward", headers=headers, json={"data": [ce_datum(5)]})
    assert_problem(other, 422, "idempotency_mismatch", "Idempotency-Key")


def test_save_names_are_unique_per_kind(client, auth, db, trainer, sent):
    tid = trainer["id"]
    assert client.post(f"/v1/trainers/{tid}/save_state", headers=auth, json={"name": "a"}).status_code == 202
    assert_problem(client.post(f"/v1/trainers/{tid}/save_state", headers=auth, json={"name": "a"}), 409,
                   "name_taken", "name")
    assert client.post(f"/v1/trainers/{tid}/save_weights_for_sampler", headers=auth, json={"name": "a"}).status_code == 202
    assert _ops(db, tid) == 2


def test_unknown_operation_is_404(client, auth, trainer):
    r = client.get(f"/v1/trainers/{trainer['id']}/operations/op-01nosuch", headers=auth)
    assert_problem(r, 404, "not_found", "operation_id")


def test_a_model_a_live_trainer_needs_is_not_deleted(client, auth, db, project_key, keel_home, sent):
    from core.models import Model

    model = Model(project_id=project_key[0], name="base", kind="policy", format="hf", base_model="x",
                  path=fake_model(keel_home))
    db.add(model)
    db.commit()
    tid = client.post("/v1/trainers", headers=auth, json={"model": model.id}).json()["id"]
    assert client.get(f"/v1/trainers/{tid}", headers=auth).json()["vocab_size"] == VOCAB
    assert_problem(client.delete(f"/v1/models/{model.id}", headers=auth), 409, "in_use", "model_id")
    assert client.delete(f"/v1/trainers/{tid}", headers=auth).status_code == 200
    assert client.delete(f"/v1/models/{model.id}", headers=auth).status_code == 200
