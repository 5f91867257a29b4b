"""Models and checkpoints as downloadable Hugging Face directories, checkpoints as models of new jobs,
and deleting jobs, models and checkpoints (files freed; 409 while in use). No worker: checkpoint and
model directories are laid out here exactly as the engine writes them (`tests/engine/test_export.py`
shows the engine writes them so; `tests/workers/test_downloads_e2e.py` runs it all for real)."""

from __future__ import annotations

import io
import shutil
import tarfile
from pathlib import Path

import pytest
from sqlalchemy import select, update

from core.models import Checkpoint, Job, JobEvent, Model
from tests.api.job_requests import create, make_file, rm_body

TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json")


@pytest.fixture(scope="session")
def tiny_model(tmp_path_factory) -> Path:
    """The demo's tiny Llama (config, safetensors, tokenizer)."""
    from engine.demo import build_demo_assets

    return Path(build_demo_assets(tmp_path_factory.mktemp("assets"))["model"])


@pytest.fixture
def dispatched(monkeypatch):
    """No worker here: the API's enqueues go nowhere."""
    from workers import dispatch

    monkeypatch.setattr(dispatch, "enqueue_job", lambda job_id: True)


@pytest.fixture
def store(keel_home) -> Path:
    return keel_home / "artifacts"


def make_job(db, project_id: str, *, status: str = "succeeded", method: str = "sft", **spec) -> str:
    job = Job(project_id=project_id, status=status, method=method, model=spec.pop("model", "org/name"),
              training_file_id=make_file(db, project_id, "sft"),
              spec={"method": {"type": method, **spec.pop("method", {})}, **spec})
    db.add(job)
    db.commit()
    return job.id


def write_step(root: Path, *, model: Path | None, roles: tuple[str, ...] = ()) -> Path:
    """A complete checkpoint directory: training state, plus `hf/` (or one part per PPO role)."""
    for part in [root / r for r in roles] or [root]:
        part.mkdir(parents=True)
        (part / "model.safetensors").write_bytes(b"trainable")
        (part / "model.optim.pt").write_bytes(b"adam")
        (part / "rng.pt").write_bytes(b"rng")
        (part / "extra.json").write_text('{"step": 2}')
        (part / "COMPLETE").write_text("ok\n")
        if model is not None:
            shutil.copytree(model, part / "hf")
    (root / "COMPLETE").write_text("ok\n")
    return root


def add_checkpoint(db, project_id: str, job_id: str, path: Path, step: int = 2) -> str:
    ckpt = Checkpoint(job_id=job_id, project_id=project_id, step=step, path=str(path))
    db.add(ckpt)
    db.commit()
    return ckpt.id


class Archive:
    """A downloaded tar, read whole: member names in order, and each file's bytes."""

    def __init__(self, response) -> None:
        with tarfile.open(fileobj=io.BytesIO(response.content)) as tar:
            self.names = tar.getnames()
            self.files = {m.name: tar.extractfile(m).read() for m in tar.getmembers() if m.isfile()}

    def extractfile(self, name: str) -> io.BytesIO:
        return io.BytesIO(self.files[name])


def untar(response) -> tuple[list[str], Archive]:
    archive = Archive(response)
    return archive.names, archive


def test_a_checkpoint_downloads_as_a_hugging_face_directory(client, auth, db, project_key, store, tiny_model,
                                                           tmp_path):
    from keel_client import extract_tar
    from transformers import AutoModelForCausalLM, AutoTokenizer

    pid = project_key[0]
    job = make_job(db, pid)
    ckpt = add_checkpoint(db, pid, job, write_step(store / "jobs" / job / "checkpoints" / "step_2", model=tiny_model))
    assert client.get(f"/v1/checkpoints/{ckpt}", headers=auth).json()["step"] == 2

    r = client.get(f"/v1/checkpoints/{ckpt}/content", headers=auth)
    assert r.status_code == 200, r.text
    assert r.headers["content-disposition"] == f'attachment; filename="{ckpt}.tar"'
    names, _ = untar(r)
    assert names[0] == ckpt and f"{ckpt}/config.json" in names and f"{ckpt}/model.safetensors" in names
    assert not any("optim" in n or "rng" in n or "/hf" in n for n in names)
    extract_tar(io.BytesIO(r.content), tmp_path / "plain")
    AutoModelForCausalLM.from_pretrained(tmp_path / "plain")
    AutoTokenizer.from_pretrained(tmp_path / "plain")

    r = client.get(f"/v1/checkpoints/{ckpt}/content?include=training_state", headers=auth)
    assert r.headers["content-disposition"] == f'attachment; filename="{ckpt}-training-state.tar"'
    names, tar = untar(r)
    root = f"{ckpt}-training-state"
    assert {f"{root}/config.json", f"{root}/training_state/model.optim.pt", f"{root}/training_state/rng.pt",
            f"{root}/training_state/extra.json", f"{root}/training_state/model.safetensors"} <= set(names)
    assert not any(n.startswith(f"{root}/training_state/hf") for n in names)  # the export is not repeated
    assert tar.extractfile(f"{root}/training_state/model.optim.pt").read() == b"adam"
    assert tar.extractfile(f"{root}/model.safetensors").read() == (tiny_model / "model.safetensors").read_bytes()


def test_ppo_checkpoints_give_the_actor_or_the_critic(client, auth, db, project_key, store, tiny_model):
    pid = project_key[0]
    job = make_job(db, pid, method="ppo")
    step = write_step(store / "jobs" / job / "checkpoints" / "step_3", model=tiny_model, roles=("actor", "critic"))
    (step / "critic" / "hf" / "config.json").write_text('{"architectures": ["LlamaForSequenceClassification"]}')
    ckpt = add_checkpoint(db, pid, job, step, step=3)
    actor = client.get(f"/v1/checkpoints/{ckpt}/content", headers=auth)
    critic = client.get(f"/v1/checkpoints/{ckpt}/content?role=critic", headers=auth)
    assert critic.headers["content-disposition"] == f'attachment; filename="{ckpt}-critic.tar"'
    config = "{}/config.json"
    assert b"LlamaForCausalLM" in untar(actor)[1].extractfile(config.format(ckpt)).read()
    assert b"SequenceClassification" in untar(critic)[1].extractfile(config.format(f"{ckpt}-critic")).read()
    names, _ = untar(client.get(f"/v1/checkpoints/{ckpt}/content?include=training_state", headers=auth))
    assert {f"{ckpt}-training-state/training_state/actor/model.optim.pt",
            f"{ckpt}-training-state/training_state/critic/model.optim.pt"} <= set(names)
    assert not any("/hf/" in n for n in names)


def test_checkpoints_without_an_export_or_files(client, auth, db, project_key, store):
    pid = project_key[0]
    job = make_job(db, pid)
    old = add_checkpoint(db, pid, job, write_step(store / "jobs" / job / "checkpoints" / "step_1", model=None), 1)
    r = client.get(f"/v1/checkpoints/{old}/content", headers=auth)
    assert (r.status_code, r.json()["code"], r.json()["param"]) == (404, "checkpoint_unavailable", "role")
    names, _ = untar(client.get(f"/v1/checkpoints/{old}/content?include=training_state", headers=auth))
    assert f"{old}-training-state/training_state/model.optim.pt" in names
    assert client.get(f"/v1/checkpoints/{old}/content?role=critic&include=training_state",
                      headers=auth).status_code == 200
    gone = add_checkpoint(db, pid, job, store / "jobs" / job / "checkpoints" / "step_9", 9)
    r = client.get(f"/v1/checkpoints/{gone}/content", headers=auth)
    assert (r.status_code, r.json()["code"]) == (404, "checkpoint_unavailable")
    r = client.get(f"/v1/checkpoints/{old}/content?include=everything", headers=auth)
    assert (r.status_code, r.json()["param"]) == (422, "include")


def write_lora_output(out: Path, model: Path) -> Path:
    """What `engine.models.save_model` writes for a LoRA job: merged weights + tokenizer, and `adapter/`."""
    shutil.copytree(model, out)
    (out / "adapter").mkdir()
    (out / "adapter" / "adapter_config.json").write_text('{"peft_type": "LORA"}')
    (out / "adapter" / "adapter_model.safetensors").write_bytes(b"lora")
    return out


def test_models_download_full_weights_or_the_adapter(client, auth, db, project_key, store, tiny_model):
    pid = project_key[0]
    job = make_job(db, pid)
    full = Model(project_id=pid, job_id=job, name="rm", kind="reward_model", format="hf", base_model="x",
                 path=str(shutil.copytree(tiny_model, store / "jobs" / job / "output")))
    lora_job = make_job(db, pid)
    lora = Model(project_id=pid, job_id=lora_job, name="sft", kind="policy", format="lora", base_model="x",
                 path=str(write_lora_output(store / "jobs" / lora_job / "output", tiny_model)))
    db.add_all([full, lora])
    db.commit()

    r = client.get(f"/v1/models/{full.id}/content", headers=auth)
    assert r.headers["content-disposition"] == f'attachment; filename="{full.id}.tar"'
    names = untar(r)[0]
    assert {f"{full.id}/config.json", f"{full.id}/model.safetensors", f"{full.id}/tokenizer.json"} <= set(names)

    names, tar = untar(client.get(f"/v1/models/{lora.id}/content", headers=auth))
    files = {n.split("/", 1)[1] for n in names if "/" in n}
    assert {"adapter_config.json", "adapter_model.safetensors", *TOKENIZER_FILES} <= files
    assert "config.json" not in files and "model.safetensors" not in files
    assert tar.extractfile(f"{lora.id}/adapter_model.safetensors").read() == b"lora"

    r = client.get(f"/v1/models/{lora.id}/content?merged=true", headers=auth)
    assert r.headers["content-disposition"] == f'attachment; filename="{lora.id}-merged.tar"'
    files = {n.split("/", 1)[1] for n in untar(r)[0] if "/" in n}
    assert {"config.json", "model.safetensors", *TOKENIZER_FILES} <= files and not any("adapter" in f for f in files)

    shutil.rmtree(store / "jobs" / job / "output")
    r = client.get(f"/v1/models/{full.id}/content", headers=auth)
    assert (r.status_code, r.json()["code"]) == (404, "model_unavailable")


def test_other_projects_cannot_download_or_delete(client, auth, other_auth, db, project_key, store, tiny_model):
    pid = project_key[0]
    job = make_job(db, pid)
    ckpt = add_checkpoint(db, pid, job, write_step(store / "jobs" / job / "checkpoints" / "step_2", model=tiny_model))
    for method, path in (("GET", f"/v1/checkpoints/{ckpt}"), ("GET", f"/v1/checkpoints/{ckpt}/content"),
                         ("DELETE", f"/v1/checkpoints/{ckpt}"), ("DELETE", f"/v1/jobs/{job}")):
        assert client.request(method, path, headers=other_auth).status_code == 404, path


def test_a_checkpoint_is_the_model_of_a_new_job(client, auth, db, project_key, store, tiny_model, dispatched):
    pid = project_key[0]
    files = {"preference": make_file(db, pid, "preference")}
    sft = make_job(db, pid)
    ckpt = add_checkpoint(db, pid, sft, write_step(store / "jobs" / sft / "checkpoints" / "step_2", model=tiny_model))
    body = {**rm_body(files), "model": ckpt}
    body["method"]["hyperparameters"]["data"]["max_length"] = 64
    r = create(client, auth, body)
    assert r.status_code == 201, r.text
    assert r.json()["model"] == ckpt

    from workers.resolve import allowed_model_roots, resolve_model

    assert resolve_model(db, pid, ckpt, allowed_model_roots(), "model") == str(
        store / "jobs" / sft / "checkpoints" / "step_2" / "hf")

    body["method"]["hyperparameters"]["data"]["max_length"] = 100_000  # past the tiny model's context window
    r = create(client, auth, body)
    assert (r.status_code, r.json()["code"]) == (422, "context_too_long")
    r = create(client, auth, {**rm_body(files), "model": "ckpt-nothing"})
    assert (r.status_code, r.json()["param"]) == (404, "model")
    old = add_checkpoint(db, pid, sft, write_step(store / "jobs" / sft / "checkpoints" / "step_1", model=None), 1)
    r = create(client, auth, {**rm_body(files), "model": old})
    assert (r.status_code, r.json()["code"], r.json()["param"]) == (422, "invalid_model", "model")
    ppo = {"model": ckpt, "training_file": make_file(db, pid, "prompts"),
           "method": {"type": "ppo", "reward": {"model": ckpt}, "hyperparameters": {
               "data": {"max_prompt_length": 32, "max_response_length": 16}}}}
    r = create(client, auth, ppo)  # an SFT checkpoint is no reward model
    assert (r.status_code, r.json()["param"]) == (422, "method.reward.model")


def test_deletes_free_storage_and_wait_for_users(client, auth, db, project_key, store, tiny_model):
    pid = project_key[0]
    job = make_job(db, pid)
    steps = store / "jobs" / job / "checkpoints"
    first = add_checkpoint(db, pid, job, write_step(steps / "step_1", model=tiny_model), 1)
    second = add_checkpoint(db, pid, job, write_step(steps / "step_2", model=tiny_model), 2)
    model = Model(project_id=pid, job_id=job, name="m", kind="policy", format="hf", base_model="x",
                  path=str(shutil.copytree(tiny_model, store / "jobs" / job / "output")))
    db.add(model)
    db.add(JobEvent(job_id=job, seq=1, type="job.log", data={"message": "hi"}))
    db.commit()
    model_id = model.id
    user = make_job(db, pid, status="running", model=model_id, from_checkpoint=first)

    for path, ref in ((f"/v1/models/{model_id}", model_id), (f"/v1/checkpoints/{first}", first),
                      (f"/v1/jobs/{job}", first)):
        r = client.delete(path, headers=auth)
        assert (r.status_code, r.json()["code"]) == (409, "in_use"), path
        assert ref in r.json()["detail"] and user in r.json()["detail"]
    r = client.delete(f"/v1/jobs/{user}", headers=auth)
    assert (r.status_code, r.json()["code"], r.json()["param"]) == (409, "job_active", "job_id")

    db.execute(update(Job).where(Job.id == user).values(status="cancelled"))
    db.commit()
    r = client.delete(f"/v1/checkpoints/{first}", headers=auth)
    assert r.json() == {"id": first, "object": "checkpoint", "deleted": True}
    assert not (steps / "step_1").exists() and (steps / "step_2").exists()
    assert client.get(f"/v1/checkpoints/{first}", headers=auth).status_code == 404

    r = client.delete(f"/v1/jobs/{job}", headers=auth)
    assert r.json() == {"id": job, "object": "job", "deleted": True}
    assert not steps.exists() and (store / "jobs" / job / "output" / "config.json").exists()  # the model stays
    db.expire_all()
    assert db.get(Checkpoint, second) is None and db.get(Job, job) is None
    assert db.scalars(select(JobEvent).where(JobEvent.job_id == job)).all() == []
    assert db.get(Model, model_id).job_id is None
    assert client.get(f"/v1/models/{model_id}", headers=auth).status_code == 200

    r = client.delete(f"/v1/models/{model_id}", headers=auth)
    assert r.json() == {"id": model_id, "object": "model", "deleted": True}
    assert not (store / "jobs" / job / "output").exists()
    assert client.get(f"/v1/models/{model_id}/content", headers=auth).status_code == 404


def test_the_newest_checkpoint_of_a_running_job_stays(client, auth, db, project_key, store):
    pid = project_key[0]
    job = make_job(db, pid, status="running")
    steps = store / "jobs" / job / "checkpoints"
    older = add_checkpoint(db, pid, job, write_step(steps / "step_1", model=None), 1)
    newest = add_checkpoint(db, pid, job, write_step(steps / "step_2", model=None), 2)
    r = client.delete(f"/v1/checkpoints/{newest}", headers=auth)
    assert (r.status_code, r.json()["code"]) == (409, "in_use")
    assert client.delete(f"/v1/checkpoints/{older}", headers=auth).status_code == 200
    db.execute(update(Job).where(Job.id == job).values(status="failed"))
    db.commit()


def test_nothing_outside_the_store_is_removed(client, auth, db, project_key, tmp_path, tiny_model):
    pid = project_key[0]
    job = make_job(db, pid)
    outside = write_step(tmp_path / "elsewhere" / "step_1", model=tiny_model)
    ckpt = add_checkpoint(db, pid, job, outside, 1)
    assert client.delete(f"/v1/checkpoints/{ckpt}", headers=auth).status_code == 200
    assert (outside / "COMPLETE").exists()
