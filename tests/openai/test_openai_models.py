"""Fine-tuned model names through the official client, on a fine-tuning job's rows as a worker leaves them
(no training here: tests/openai/test_openai_e2e.py trains): the job shows `ft:<base>:<project>:<suffix>:<id>`,
`models.list()`/`retrieve()` find it, it and the Keel model id are both the `model` of a next job (both APIs),
an unknown name is a 404 naming `model`; `integrations` are Keel's W&B integration, echoed."""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path

import openai
import pytest
from openai_support import jsonl

from core import fine_tuned_models
from core.db import session_scope
from core.ids import new_id
from core.models import Job, Model, Project
from tests.workers.factories import add_file

CHAT = [{"messages": [{"role": "user", "content": "What is 2 + 3?"}, {"role": "assistant", "content": "5"}]},
        {"messages": [{"role": "user", "content": "What is 4 + 4?"}, {"role": "assistant", "content": "8"}]}]


def _finished_fine_tune(project_id: str, base: str, suffix: str | None, *, openai_job: bool = True
                        ) -> tuple[str, str, str]:
    """(job id, Keel model id, project name) of a succeeded fine-tuning job (or, not `openai_job`, a job of
    Keel's own API) and its output model."""
    file_id = add_file(project_id)
    job_id, model_id = new_id("job"), new_id("model")
    spec = {"model": base, "training_file": file_id, "method": {"type": "sft", "hyperparameters": {}},
            "suffix": suffix, "openai": {"model": base, "training_file": file_id,
                                         "method": {"type": "supervised", "supervised": {"hyperparameters": {}}}}}
    if not openai_job:
        del spec["openai"]
    with session_scope() as db:
        db.add(Job(id=job_id, project_id=project_id, status="succeeded", method="sft", spec=spec, model=base,
                   training_file_id=file_id, output_model_id=model_id, finished_at=datetime.now(UTC)))
        db.flush()
        db.add(Model(id=model_id, project_id=project_id, job_id=job_id, name=f"{Path(base).name}:{suffix}",
                     kind="policy", format="hf", base_model=base, path="/nowhere"))
        return job_id, model_id, db.get(Project, project_id).name


def test_fine_tuned_model_names_resolve_everywhere(oai, project_key, tmp_path, demo_assets):
    base = demo_assets["model"]
    job_id, model_id, project = _finished_fine_tune(project_key[0], base, "arith")
    name = oai.fine_tuning.jobs.retrieve(job_id).fine_tuned_model
    assert name == f"ft:{Path(base).name}:{project}:arith:{model_id.removeprefix('model-')}"

    listed = {m.id: m for m in oai.models.list().data}
    assert {model_id, name} <= set(listed)
    assert listed[name].object == "model" and listed[name].owned_by == project_key[0]
    assert listed[name].model_extra["alias_of"] == model_id and listed[model_id].model_extra["alias_of"] is None
    assert oai.models.retrieve(name).id == name and oai.models.retrieve(model_id).id == model_id

    # Either id is the `model` of the next fine-tuning job; a fine-tune of it keeps the root base's name.
    chat = oai.files.create(file=jsonl(tmp_path, "chat.jsonl", CHAT).open("rb"), purpose="fine-tune")
    for ref in (name, model_id):
        job = oai.fine_tuning.jobs.create(model=ref, training_file=chat.id, suffix="again")
        assert job.model == ref and job.status == "queued"
        assert oai.get(f"/jobs/{job.id}", cast_to=object)["model"] == model_id
        oai.fine_tuning.jobs.cancel(job.id)
    # ... and of a Keel job.
    sft_file = add_file(project_key[0])
    keel = oai.post("/jobs", body={"model": name, "training_file": sft_file, "method": {"type": "sft"}},
                    cast_to=object)
    assert keel["model"] == model_id
    oai.post(f"/jobs/{keel['id']}/cancel", cast_to=object)

    # A fine-tune of the fine-tuned model is named after the root base.
    child_job, child_model, _ = _finished_fine_tune(project_key[0], model_id, None)
    child = oai.fine_tuning.jobs.retrieve(child_job).fine_tuned_model
    assert child == f"ft:{Path(base).name}:{project}::{child_model.removeprefix('model-')}"
    assert oai.models.retrieve(child).id == child


@pytest.mark.parametrize("wrong", ["ft:model:nobody:arith:{id}", "ft:model:{project}:other:{id}",
                                   "ft:model:{project}:arith:01zzzzzzzzzzzzzzzzzzzzzzzz", "ft:just-one-part"])
def test_unknown_fine_tuned_names_are_404_naming_model(oai, project_key, tmp_path, demo_assets, wrong):
    _, model_id, project = _finished_fine_tune(project_key[0], demo_assets["model"], "arith")
    wrong = wrong.format(id=model_id.removeprefix("model-"), project=project)
    chat = oai.files.create(file=jsonl(tmp_path, "chat.jsonl", CHAT).open("rb"), purpose="fine-tune")
    with pytest.raises(openai.NotFoundError) as err:
        oai.fine_tuning.jobs.create(model=wrong, training_file=chat.id)
    assert err.value.param == "model"
    with pytest.raises(openai.NotFoundError):
        oai.models.retrieve(wrong)


def test_another_projects_fine_tuned_model_is_unknown(oai, demo_assets, tmp_path, other_project_key):
    other_project = other_project_key[0]
    other_job, _, _ = _finished_fine_tune(other_project, demo_assets["model"], "x")
    with session_scope() as db:
        name = fine_tuned_models.openai_name(db, db.get(Job, other_job))
    with pytest.raises(openai.NotFoundError):
        oai.models.retrieve(name)
    chat = oai.files.create(file=jsonl(tmp_path, "chat.jsonl", CHAT).open("rb"), purpose="fine-tune")
    with pytest.raises(openai.NotFoundError) as err:
        oai.fine_tuning.jobs.create(model=name, training_file=chat.id)
    assert err.value.param == "model"


def test_a_keel_api_jobs_model_keeps_its_keel_id(oai, project_key, demo_assets):
    job_id, model_id, _ = _finished_fine_tune(project_key[0], demo_assets["model"], "k", openai_job=False)
    assert oai.fine_tuning.jobs.retrieve(job_id).fine_tuned_model == model_id
    assert [m.id for m in oai.models.list().data if m.job_id == job_id] == [model_id]  # no `ft:` entry


def test_wandb_integration_is_keels_and_echoed(oai, tmp_path, demo_assets):
    chat = oai.files.create(file=jsonl(tmp_path, "chat.jsonl", CHAT).open("rb"), purpose="fine-tune")
    wandb = {"project": "ft-runs", "name": "arith", "entity": "team", "tags": ["openai"]}
    job = oai.fine_tuning.jobs.create(model=demo_assets["model"], training_file=chat.id,
                                      integrations=[{"type": "wandb", "wandb": wandb}])
    oai.fine_tuning.jobs.cancel(job.id)
    assert job.integrations[0].type == "wandb" and job.integrations[0].wandb.project == "ft-runs"
    assert job.integrations[0].wandb.tags == ["openai"]
    keel = oai.get(f"/jobs/{job.id}", cast_to=object)
    assert keel["integrations"] == [{"type": "wandb", "wandb": wandb, "mlflow": None}]
    with pytest.raises(openai.BadRequestError) as err:
        oai.fine_tuning.jobs.create(model=demo_assets["model"], training_file=chat.id,
                                    integrations=[{"type": "wandb", "wandb": {"project": "p", "api_key": "x"}}])
    assert err.value.param == "integrations.0.wandb.api_key"
    with pytest.raises(openai.BadRequestError) as err:
        oai.fine_tuning.jobs.create(model=demo_assets["model"], training_file=chat.id,
                                    integrations=[{"type": "wandb"}])
    assert err.value.param and err.value.param.startswith("integrations.0")
