"""Jobs over HTTP: create (validation, references, defaults, overrides), cancel, tenancy. No worker:
the dispatcher is replaced by a recorder."""

from __future__ import annotations

import copy
import json
import secrets
from datetime import UTC, datetime

import pytest
from sqlalchemy import select, update

from core.models import Checkpoint, Job, JobEvent
from tests.api.job_requests import create, make_file, make_model, ppo_body, project_of, rm_body


@pytest.fixture
def dispatched(monkeypatch):
    """Calls the API made into workers.dispatch: [(name, job_id)]."""
    from workers import dispatch

    calls: list[tuple[str, str]] = []
    monkeypatch.setattr(dispatch, "enqueue_job", lambda job_id: calls.append(("enqueue_job", job_id)) or True)
    monkeypatch.setattr(dispatch, "request_cancel", lambda job_id: calls.append(("request_cancel", job_id)) or False)
    return calls


# --- create ---------------------------------------------------------------------------------------

def test_create_fills_in_defaults_with_verl_names(client, auth, db, files, dispatched, awaiting_dispatch):
    r = create(client, auth, rm_body(files))
    assert r.status_code == 201, r.text
    job = r.json()
    assert job["object"] == "job" and job["id"].startswith("job-") and job["status"] == "queued"
    hp = job["method"]["hyperparameters"]
    assert job["method"]["type"] == "reward_model" and job["method"]["overrides"] == []
    assert hp["data"] == {"train_batch_size": 16, "val_batch_size": None, "max_prompt_length": 1024,
                          "max_response_length": 2048, "max_length": 256, "truncation": "error",
                          "filter_overlong_prompts": False, "shuffle": True}
    assert hp["optim"]["lr"] == 1e-4 and hp["optim"]["betas"] == [0.9, 0.999]
    assert hp["trainer"] == {"total_epochs": 1, "total_training_steps": 100, "save_freq": 20, "test_freq": 20,
                             "val_before_train": True, "critic_warmup": 0, "max_duration_s": None, "max_actor_ckpt_to_keep": None,
                             "max_critic_ckpt_to_keep": None}
    assert hp["model"]["lora_rank"] == 0 and hp["center_rewards_coefficient"] == 0.0
    assert hp["micro_batch_size_per_gpu"] == 2 and hp["max_token_len_per_gpu"] == 3072
    assert job["model"] == "org/name" and job["training_file"] == files["preference"]
    assert job["validation_file"] is None and job["output_model"] is None and job["error"] is None
    assert job["metadata"] == {"team": "align"} and job["seed"] == 0 and job["attempts"] == 0
    assert job["resources"] == {"num_workers": 1, "cpus_per_worker": 1.0, "gpus_per_worker": 0.0, "colocate": True,
                                "placement": "pack", "executor": "ray", "rollout_workers": 0}
    assert job["queue_position"] == 1 and isinstance(job["created_at"], int)
    assert job["started_at"] is None and job["finished_at"] is None
    assert job["progress"] == {"step": None, "total_steps": None, "epoch": None, "seconds_remaining": None}
    # The row is the contract with the workers.
    row = db.get(Job, job["id"])
    assert row.status == "queued" and row.method == "reward_model" and row.model == "org/name"
    assert row.training_file_id == files["preference"] and row.seed == 0 and row.meta == {"team": "align"}
    assert row.spec["method"] == job["method"] and row.spec["training_file"] == files["preference"]
    assert dispatched == [] and awaiting_dispatch(job["id"])  # the API never publishes: the sweepers send it


def test_create_every_method_with_its_own_defaults(client, auth, db, project_key, files, dispatched):
    sft = create(client, auth, {"model": "org/name", "training_file": files["sft"], "method": {"type": "sft"}})
    assert sft.status_code == 201, sft.text
    assert sft.json()["method"]["hyperparameters"]["optim"]["lr"] == 1e-5
    teacher = make_model(db, project_key[0], "reward_model")
    rmd = create(client, auth, {"model": "org/small", "training_file": files["preference"],
                                "validation_file": files["preference"],
                                "method": {"type": "rm_distill", "teacher": teacher}})
    assert rmd.status_code == 201, rmd.text
    m = rmd.json()["method"]
    assert m["teacher"] == teacher and m["hyperparameters"]["model"]["lora_rank"] == "auto"
    assert m["hyperparameters"]["optim"]["lr"] == 1e-4 and m["hyperparameters"]["gate_kl"] == 0.05
    ppo = create(client, auth, {**ppo_body(files), "suffix": "gsm8k-v1", "seed": 7,
                                "resources": {"num_workers": 2, "gpus_per_worker": 1}})
    assert ppo.status_code == 201, ppo.text
    job = ppo.json()
    hp = job["method"]["hyperparameters"]
    assert job["method"]["reward"] == {"model": None, "function": "gsm8k", "options": {}}
    assert hp["actor"]["optim"]["lr"] == 1e-6 and hp["critic"]["optim"]["lr"] == 1e-5
    assert hp["actor"]["clip_ratio_c"] == 3.0 and hp["rollout"]["n"] == 5 and hp["trainer"]["total_epochs"] == 3
    assert hp["algorithm"]["kl_ctrl"] == {"type": "adaptive", "kl_coef": 0.001, "target_kl": 0.1, "horizon": 10000}
    assert job["suffix"] == "gsm8k-v1" and job["seed"] == 7
    assert job["resources"] == {"num_workers": 2, "cpus_per_worker": 1.0, "gpus_per_worker": 1.0, "colocate": True,
                                "placement": "pack", "executor": "ray", "rollout_workers": 0}
    assert db.get(Job, job["id"]).seed == 7


def test_overrides_are_mapped_onto_the_nested_names(client, auth, files, dispatched):
    body = ppo_body(files, actor={"ppo_epochs": 2}, data={"train_batch_size": 128})
    body["method"]["overrides"] = [
        "actor_rollout_ref.actor.ppo_epochs=4",              # wins over the nested value
        "actor_rollout_ref.actor.optim.lr=1e-4",
        "actor_rollout_ref.rollout.n=8",
        "actor_rollout_ref.model.enable_gradient_checkpointing=True",
        "algorithm.kl_ctrl.type=fixed",
        "critic.ppo_epochs=null",
        "actor_rollout_ref.model.target_modules=[q_proj, v_proj]",
        "+trainer.save_freq=10",
    ]
    r = create(client, auth, body)
    assert r.status_code == 201, r.text
    method = r.json()["method"]
    hp = method["hyperparameters"]
    assert method["overrides"] == []
    assert hp["actor"]["ppo_epochs"] == 4 and hp["actor"]["optim"]["lr"] == 1e-4
    assert hp["rollout"]["n"] == 8 and hp["model"]["enable_gradient_checkpointing"] is True
    assert hp["algorithm"]["kl_ctrl"]["type"] == "fixed" and hp["critic"]["ppo_epochs"] is None
    assert hp["model"]["target_modules"] == ["q_proj", "v_proj"] and hp["trainer"]["save_freq"] == 10
    assert hp["data"]["train_batch_size"] == 128 and hp["actor"]["clip_ratio"] == 0.2


def _set(body: dict, path: str, value) -> dict:
    body = copy.deepcopy(body)
    *parents, leaf = path.split(".")
    node = body
    for p in parents:
        node = node.setdefault(p, {})
    node[leaf] = value
    return body


RM_HP = "method.hyperparameters"
# (body field to set, value, status, code, param)
INVALID_RM = [
    ("foo", 1, 422, "unknown_parameter", "foo"),
    (f"{RM_HP}.optim.foo", 1, 422, "unknown_parameter", f"{RM_HP}.optim.foo"),
    (f"{RM_HP}.actor", {}, 422, "unknown_parameter", f"{RM_HP}.actor"),
    (f"{RM_HP}.data.train_batch_size", "16", 422, "invalid_request", f"{RM_HP}.data.train_batch_size"),
    (f"{RM_HP}.data.shuffle", 1, 422, "invalid_request", f"{RM_HP}.data.shuffle"),
    (f"{RM_HP}.data.train_batch_size", 10**7, 422, "invalid_request", f"{RM_HP}.data.train_batch_size"),
    (f"{RM_HP}.data.max_length", 10**7, 422, "invalid_request", f"{RM_HP}.data.max_length"),
    (f"{RM_HP}.data.train_batch_size", 0, 422, "invalid_request", f"{RM_HP}.data.train_batch_size"),
    (f"{RM_HP}.micro_batch_size_per_gpu", 32, 422, "invalid_request", f"{RM_HP}.micro_batch_size_per_gpu"),
    (f"{RM_HP}.optim.lr", 0, 422, "invalid_request", f"{RM_HP}.optim.lr"),
    (f"{RM_HP}.optim.betas", [0.9], 422, "invalid_request", f"{RM_HP}.optim.betas.1"),
    (f"{RM_HP}.optim.betas", [0.9, 1.5], 422, "invalid_request", f"{RM_HP}.optim.betas.1"),
    (f"{RM_HP}.trainer.save_freq", 0, 422, "invalid_request", f"{RM_HP}.trainer.save_freq"),
    (f"{RM_HP}.model.lora_rank", "big", 422, "invalid_request", f"{RM_HP}.model.lora_rank"),
    ("method.type", "orpo", 422, "invalid_request", "method.type"),
    ("method", {"hyperparameters": {}}, 422, "invalid_request", "method.type"),
    ("method", "sft", 422, "invalid_request", "method"),
    ("seed", -1, 422, "invalid_request", "seed"),
    ("suffix", "no spaces", 422, "invalid_request", "suffix"),
    ("metadata", {"k": 1}, 422, "invalid_request", "metadata.k"),
    ("metadata", {f"k{i}": "v" for i in range(17)}, 422, "invalid_request", "metadata"),
    ("resources.num_workers", 0, 422, "invalid_request", "resources.num_workers"),
    ("resources.gpus_per_worker", 1000, 422, "invalid_request", "resources.gpus_per_worker"),
    ("resources.executor", "dask", 422, "invalid_request", "resources.executor"),
    ("resources", {"executor": "local", "num_workers": 2}, 422, "invalid_request", "resources.num_workers"),
    ("model", "not a model", 422, "invalid_model", "model"),
    ("model", "/tmp/../etc", 422, "invalid_model", "model"),
    ("model", "/etc", 422, "invalid_model", "model"),
    ("model", "model-doesnotexist", 404, "not_found", "model"),
    ("training_file", "file-doesnotexist", 404, "not_found", "training_file"),
    ("from_checkpoint", "ckpt-doesnotexist", 404, "not_found", "from_checkpoint"),
]


@pytest.mark.parametrize(("field", "value", "status", "code", "param"), INVALID_RM,
                         ids=[f"{c[0]}={str(c[1])[:20]}" for c in INVALID_RM])
def test_invalid_create_names_the_exact_field(client, auth, files, dispatched, field, value, status, code, param):
    r = create(client, auth, _set(rm_body(files), field, value))
    assert r.status_code == status, r.text
    assert r.headers["content-type"].startswith("application/problem+json")
    assert (r.json()["code"], r.json()["param"]) == (code, param), r.json()
    assert dispatched == []


PPO_HP = "method.hyperparameters"
INVALID_PPO = [
    (f"{PPO_HP}.actor.clip_ratio_c", 1.0, f"{PPO_HP}.actor.clip_ratio_c"),
    (f"{PPO_HP}.actor.clip_ratio_c", 0.5, f"{PPO_HP}.actor.clip_ratio_c"),
    (f"{PPO_HP}.actor.clip_ratio", 1.5, f"{PPO_HP}.actor.clip_ratio"),
    (f"{PPO_HP}.actor.ppo_mini_batch_size", 128, f"{PPO_HP}.actor.ppo_mini_batch_size"),
    (f"{PPO_HP}.critic.ppo_mini_batch_size", 128, f"{PPO_HP}.critic.ppo_mini_batch_size"),
    (f"{PPO_HP}.algorithm.kl_ctrl.type", "pid", f"{PPO_HP}.algorithm.kl_ctrl.type"),
    (f"{PPO_HP}.guardrails.warn_kl", 0.5, f"{PPO_HP}.guardrails.warn_kl"),
    (f"{PPO_HP}.rollout.top_p", 0, f"{PPO_HP}.rollout.top_p"),
    ("method.reward", {}, "method.reward"),
    ("method.reward", {"function": "gsm8k", "model": "org/rm"}, "method.reward"),
    ("method.reward.function", "bleu", "method.reward.function"),
    ("method.overrides", ["actor.ppo_epochs"], "method.overrides.0"),
    ("method.overrides", ["rollout.n=4", "bad key=1"], "method.overrides.1"),
    ("method.overrides", ["actor_rollout_ref.actor.nope=1"], f"{PPO_HP}.actor.nope"),
    ("method.overrides", ["actor_rollout_ref.ref.log_prob_micro_batch_size=4"],
     f"{PPO_HP}.ref.log_prob_micro_batch_size"),
    ("method.overrides", ["actor_rollout_ref.actor.ppo_epochs=four"], f"{PPO_HP}.actor.ppo_epochs"),
    ("method.overrides", ["actor_rollout_ref.actor.clip_ratio_c=1"], f"{PPO_HP}.actor.clip_ratio_c"),
    ("method.overrides", ["algorithm.gamma=.nan"], f"{PPO_HP}.algorithm.gamma"),
    ("method.overrides", ["algorithm=1", "algorithm.gamma=1"], "method.overrides.1"),
]


@pytest.mark.parametrize(("field", "value", "param"), INVALID_PPO, ids=[f"{c[0]}={c[1]}" for c in INVALID_PPO])
def test_invalid_ppo_names_the_exact_field(client, auth, files, dispatched, field, value, param):
    r = create(client, auth, _set(ppo_body(files), field, value))
    assert r.status_code == 422, r.text
    assert r.json()["param"] == param, r.json()


def test_non_finite_floats_are_refused(client, auth, files, dispatched):
    for literal in ("NaN", "Infinity", "-Infinity"):
        raw = json.dumps(rm_body(files)).replace('"lr": 0.0001', f'"lr": {literal}')
        r = client.post("/v1/jobs", content=raw, headers={**auth, "Content-Type": "application/json"})
        assert r.status_code == 422, r.text
        assert r.json()["param"] == "method.hyperparameters.optim.lr"


def test_training_files_must_fit_the_method(client, auth, db, project_key, other_auth, files, dispatched):
    for method, wrong in (("sft", "preference"), ("reward_model", "prompts"), ("ppo", "sft")):
        body = ppo_body(files) if method == "ppo" else {"model": "org/name", "method": {"type": method}}
        body["training_file"] = files[wrong]
        r = create(client, auth, body)
        assert r.status_code == 422 and r.json()["code"] == "invalid_file_purpose", r.text
        assert r.json()["param"] == "training_file"
    r = create(client, auth, {**rm_body(files), "validation_file": files["sft"]})
    assert (r.status_code, r.json()["param"]) == (422, "validation_file")
    not_ready = make_file(db, project_key[0], "preference", status="error")
    r = create(client, auth, {**rm_body(files), "training_file": not_ready})
    assert (r.status_code, r.json()["code"], r.json()["param"]) == (422, "file_not_ready", "training_file")
    deleted = make_file(db, project_key[0], "preference", deleted_at=datetime.now(UTC))
    r = create(client, auth, {**rm_body(files), "training_file": deleted})
    assert (r.status_code, r.json()["param"]) == (404, "training_file")
    # Another project's file is exactly as unknown as a missing one.
    r = create(client, other_auth, rm_body(files))
    assert (r.status_code, r.json()["code"], r.json()["param"]) == (404, "not_found", "training_file")


def test_model_references(client, auth, db, project_key, other_auth, files, keel_home, dispatched):
    base = keel_home / "models" / f"base-{secrets.token_hex(3)}"
    base.mkdir(parents=True)
    r = create(client, auth, {**rm_body(files), "model": str(base) + "/"})
    assert r.status_code == 201, r.text
    assert r.json()["model"] == str(base)
    r = create(client, auth, {**rm_body(files), "model": str(base / "missing")})
    assert (r.status_code, r.json()["code"], r.json()["param"]) == (422, "invalid_model", "model")
    r = create(client, auth, {**rm_body(files), "model": f"{keel_home}/models/../models/{base.name}"})
    assert (r.status_code, r.json()["param"]) == (422, "model")
    escape = keel_home / "models" / f"escape-{secrets.token_hex(3)}"
    escape.symlink_to("/tmp")
    r = create(client, auth, {**rm_body(files), "model": str(escape)})
    assert (r.status_code, r.json()["code"]) == (422, "invalid_model"), r.text
    # Keel models: this project's only; teacher and reward model must be reward models.
    policy = make_model(db, project_key[0], "policy")
    rm = make_model(db, project_key[0], "reward_model")
    assert create(client, auth, {**rm_body(files), "model": policy}).status_code == 201
    r = create(client, other_auth, {**rm_body(files), "model": policy})
    assert (r.status_code, r.json()["param"]) == (404, "model")
    distill = {"model": policy, "training_file": files["preference"], "method": {"type": "rm_distill"}}
    r = create(client, auth, _set(distill, "method.teacher", policy))
    assert (r.status_code, r.json()["code"], r.json()["param"]) == (422, "invalid_model", "method.teacher")
    assert create(client, auth, _set(distill, "method.teacher", rm)).status_code == 201
    r = create(client, auth, _set(distill, "method", {"type": "rm_distill"}))
    assert (r.status_code, r.json()["param"]) == (422, "method.teacher")
    r = create(client, auth, _set(ppo_body(files), "method.reward", {"model": policy}))
    assert (r.status_code, r.json()["param"]) == (422, "method.reward.model")
    r = create(client, auth, _set(ppo_body(files), "method.reward", {"model": "model-nope"}))
    assert (r.status_code, r.json()["code"], r.json()["param"]) == (404, "not_found", "method.reward.model")
    assert create(client, auth, _set(ppo_body(files), "method.reward", {"model": rm})).status_code == 201
    adapter = "method.hyperparameters.model.lora_adapter_path"
    r = create(client, auth, _set(ppo_body(files), adapter, "/etc"))
    assert (r.status_code, r.json()["param"]) == (422, adapter)
    r = create(client, auth, _set(ppo_body(files), adapter, str(base)))
    assert r.status_code == 201 and r.json()["method"]["hyperparameters"]["model"]["lora_adapter_path"] == str(base)


def test_from_checkpoint_continues_a_job_of_the_same_method(client, auth, other_auth, db, project_key, files,
                                                            dispatched):
    first = create(client, auth, rm_body(files)).json()
    ckpt = Checkpoint(job_id=first["id"], project_id=project_key[0], step=20, path="/nowhere")
    db.add(ckpt)
    db.commit()
    r = create(client, auth, {**rm_body(files), "from_checkpoint": ckpt.id})
    assert r.status_code == 201 and r.json()["from_checkpoint"] == ckpt.id
    r = create(client, auth, {**ppo_body(files), "from_checkpoint": ckpt.id})
    assert (r.status_code, r.json()["code"], r.json()["param"]) == (422, "invalid_checkpoint", "from_checkpoint")
    other_files = {"preference": make_file(db, project_of(db, other_auth), "preference")}
    r = create(client, other_auth, {**rm_body(other_files), "from_checkpoint": ckpt.id})
    assert (r.status_code, r.json()["param"]) == (404, "from_checkpoint")


def test_a_create_never_waits_for_the_broker(client, auth, db, files, monkeypatch, awaiting_dispatch):
    """The broker down (every publish fails) changes nothing for a create: it is never called, and the
    job waits in the outbox for the sweepers."""
    from workers import dispatch
    from workers.celery_app import celery_app

    def down(*args, **kwargs):
        raise ConnectionError("broker down")

    monkeypatch.setattr(dispatch, "_publish", down)
    monkeypatch.setattr(celery_app, "send_task", down)
    r = create(client, auth, rm_body(files))
    assert r.status_code == 201, r.text
    assert awaiting_dispatch(r.json()["id"])


# --- cancel ----------------------------------------------------------------------------------------

def _events(db, job_id):
    db.expire_all()
    return [(e.type, e.data) for e in db.scalars(select(JobEvent).where(JobEvent.job_id == job_id)
                                                 .order_by(JobEvent.seq))]


def test_cancel_queued_running_and_terminal(client, auth, db, files, dispatched):
    queued = create(client, auth, rm_body(files)).json()["id"]
    r = client.post(f"/v1/jobs/{queued}/cancel", headers=auth)
    assert r.status_code == 200, r.text
    assert r.json()["status"] == "cancelled" and r.json()["finished_at"] is not None
    assert _events(db, queued) == [("job.status", {"status": "cancelled"}), ("job.done", {"status": "cancelled"})]
    assert ("request_cancel", queued) in dispatched

    running = create(client, auth, rm_body(files)).json()["id"]
    db.execute(update(Job).where(Job.id == running).values(status="running"))
    db.commit()
    r = client.post(f"/v1/jobs/{running}/cancel", headers=auth)
    assert (r.status_code, r.json()["status"]) == (200, "cancelling")
    assert _events(db, running) == [("job.status", {"status": "cancelling"})]
    assert ("request_cancel", running) in dispatched
    again = client.post(f"/v1/jobs/{running}/cancel", headers=auth)  # already cancelling: nothing new
    assert (again.status_code, again.json()["status"]) == (200, "cancelling")
    assert len(_events(db, running)) == 1

    for terminal in ("succeeded", "failed", "cancelled"):
        db.execute(update(Job).where(Job.id == running).values(status=terminal))
        db.commit()
        r = client.post(f"/v1/jobs/{running}/cancel", headers=auth)
        assert (r.status_code, r.json()["code"]) == (409, "job_terminal"), r.text
        db.expire_all()
        assert db.get(Job, running).status == terminal


def test_cancel_accepts_an_idempotency_key(client, auth, files, dispatched):
    job_id = create(client, auth, rm_body(files)).json()["id"]
    key = {"Idempotency-Key": f"c-{secrets.token_hex(4)}"}
    first = client.post(f"/v1/jobs/{job_id}/cancel", headers={**auth, **key})
    second = client.post(f"/v1/jobs/{job_id}/cancel", headers={**auth, **key})
    assert first.status_code == second.status_code == 200 and first.json() == second.json()
    assert client.post(f"/v1/jobs/{job_id}/cancel", headers=auth).status_code == 409


# --- tenancy ---------------------------------------------------------------------------------------

def test_another_projects_job_is_404_everywhere(client, auth, other_auth, files, dispatched):
    job_id = create(client, auth, rm_body(files)).json()["id"]
    for method, path in (("GET", f"/v1/jobs/{job_id}"), ("POST", f"/v1/jobs/{job_id}/cancel"),
                         ("GET", f"/v1/jobs/{job_id}/events"), ("GET", f"/v1/jobs/{job_id}/metrics"),
                         ("GET", f"/v1/jobs/{job_id}/events/stream"), ("GET", f"/v1/jobs/{job_id}/checkpoints")):
        r = client.request(method, path, headers=other_auth)
        assert (r.status_code, r.json()["code"], r.json()["param"]) == (404, "not_found", "job_id"), path
        missing = client.request(method, path.replace(job_id, "job-0000000000nothing00000000"), headers=auth)
        assert missing.status_code == 404 and missing.json()["detail"].replace("job-0000000000nothing00000000", "X") \
            == r.json()["detail"].replace(job_id, "X")
    assert client.get(f"/v1/jobs/{job_id}").status_code == 401
