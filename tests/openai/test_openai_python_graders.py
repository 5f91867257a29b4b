"""`python` graders through the API (run, validate, job creation; refused unless the deployment allows them)
and grader checks on Keel's own `/v1/jobs` (`method.reward.function: grader`). A reinforcement job with a
python grader trains on the session's Celery worker."""

from __future__ import annotations

import json
import secrets
import time

import openai
import pytest
from openai_support import jsonl

from core.config import settings
from core.models import File, Job

LENGTH = {"type": "python", "name": "length", "source": (
    "def grade(sample, item):\n"
    "    return 0.1 + min(1.0, len(sample['output_text']) / 20) * (item['weight'] if 'weight' in item else 1)\n")}
RFT = [{"messages": [{"role": "user", "content": "What is 3 + 4?"}], "answer": "7"}]


@pytest.fixture
def python_off(monkeypatch):
    monkeypatch.setattr(settings, "ALLOW_PYTHON_GRADERS", False)


@pytest.fixture
def dispatched(monkeypatch):
    """Keel jobs created here are never sent to a broker (and are cancelled before the test ends)."""
    from workers import dispatch

    calls: list[tuple[str, str]] = []
    monkeypatch.setattr(dispatch, "enqueue_job", lambda job_id: calls.append(("enqueue_job", job_id)) or True)
    monkeypatch.setattr(dispatch, "request_cancel", lambda job_id: calls.append(("request_cancel", job_id)) or False)
    return calls


def test_run_scores_a_sample_with_the_items_fields(oai):
    r = oai.fine_tuning.alpha.graders.run(grader=LENGTH, model_sample="x" * 10, item={"weight": 2})
    assert r.reward == pytest.approx(0.1 + 0.5 * 2)
    assert r.metadata.type == "python" and r.metadata.scores == {"length": pytest.approx(1.1)}
    assert r.metadata.errors.python_grader_runtime_error is False
    assert oai.fine_tuning.alpha.graders.validate(grader=LENGTH).grader.type == "python"


def test_a_failing_grader_scores_zero_with_the_error_in_the_metadata(oai):
    crash = {**LENGTH, "source": "def grade(sample, item):\n    return open('/etc/passwd').read()\n"}
    r = oai.fine_tuning.alpha.graders.run(grader=crash, model_sample="x", item={})
    assert r.reward == 0.0
    assert r.metadata.errors.python_grader_runtime_error is True
    assert "refused by the grader sandbox" in r.metadata.errors.python_grader_runtime_error_details
    broken = {**LENGTH, "source": "def grade(sample, item)\n    return 1\n"}
    with pytest.raises(openai.BadRequestError) as err:
        oai.fine_tuning.alpha.graders.validate(grader=broken)
    assert err.value.param == "grader.source" and "line 1" in err.value.message


def test_python_graders_are_refused_when_the_deployment_does_not_allow_them(oai, tmp_path, demo_assets, python_off):
    nested = {"type": "multi", "name": "m", "calculate_output": "p", "graders": {"p": LENGTH}}
    for call in (lambda: oai.fine_tuning.alpha.graders.validate(grader=LENGTH),
                 lambda: oai.fine_tuning.alpha.graders.run(grader=LENGTH, model_sample="x")):
        with pytest.raises(openai.BadRequestError) as err:
            call()
        assert (err.value.code, err.value.param) == ("python_graders_disabled", "grader.type")
    rft = oai.files.create(file=jsonl(tmp_path, "rft.jsonl", RFT).open("rb"), purpose="fine-tune")
    with pytest.raises(openai.BadRequestError) as err:
        oai.fine_tuning.jobs.create(model=demo_assets["model"], training_file=rft.id, method={
            "type": "reinforcement", "reinforcement": {"grader": nested}})
    assert err.value.code == "python_graders_disabled"
    assert err.value.param == "method.reinforcement.grader.graders.p.type"


# --- Keel's /v1/jobs with reward.function "grader" -------------------------------------------------------

def _prompts_file(db, project_id: str) -> str:
    f = File(project_id=project_id, purpose="prompts", filename="p.parquet", bytes=10, sha256=secrets.token_hex(32),
             format="parquet", storage_key=f"files/{secrets.token_hex(4)}")
    db.add(f)
    db.commit()
    return f.id


def _grader_job(file_id: str, grader) -> dict:
    text = grader if isinstance(grader, str) else json.dumps(grader)
    return {"model": "org/name", "training_file": file_id,
            "method": {"type": "ppo", "reward": {"function": "grader", "options": {"grader": text}}}}


@pytest.mark.parametrize(("grader", "code", "param"), [
    ("{not json", "invalid_grader", "method.reward.options.grader"),
    ({"type": "label_model", "name": "x"}, "invalid_grader", "method.reward.options.grader.type"),
    ({"type": "multi", "name": "m", "calculate_output": "a + open", "graders": {
        "a": {"type": "string_check", "name": "a", "input": "{{sample.output_text}}", "reference": "7",
              "operation": "eq"}}}, "invalid_grader", "method.reward.options.grader.calculate_output"),
    ({**LENGTH, "source": "grade = 1 +"}, "invalid_grader", "method.reward.options.grader.source"),
    ({"type": "score_model", "name": "s", "model": "gpt-4o", "input": [{"role": "user", "content": "x"}]},
     "invalid_model", "method.reward.options.grader.model"),
])
def test_keel_jobs_check_the_grader_at_creation(client, auth, db, project_key, dispatched, grader, code, param):
    r = client.post("/v1/jobs", json=_grader_job(_prompts_file(db, project_key[0]), grader), headers=auth)
    assert r.status_code == 422, r.text
    assert (r.json()["code"], r.json()["param"]) == (code, param)
    assert dispatched == []


def test_keel_jobs_refuse_python_graders_when_off_and_unknown_models(client, auth, db, project_key, dispatched,
                                                                     python_off):
    file_id = _prompts_file(db, project_key[0])
    r = client.post("/v1/jobs", json=_grader_job(file_id, LENGTH), headers=auth)
    assert r.status_code == 422 and r.json()["code"] == "python_graders_disabled"
    assert r.json()["param"] == "method.reward.options.grader.type"
    judge = {"type": "score_model", "name": "s", "model": "model-nope", "input": [{"role": "user", "content": "x"}]}
    r = client.post("/v1/jobs", json=_grader_job(file_id, judge), headers=auth)
    assert r.status_code == 404 and r.json()["param"] == "method.reward.options.grader.model"


def test_keel_jobs_accept_a_valid_grader(client, auth, db, project_key, dispatched):
    file_id = _prompts_file(db, project_key[0])
    r = client.post("/v1/jobs", json=_grader_job(file_id, LENGTH), headers=auth)
    assert r.status_code == 201, r.text
    job = r.json()
    assert json.loads(job["method"]["reward"]["options"]["grader"]) == LENGTH
    assert client.post(f"/v1/jobs/{job['id']}/cancel", headers=auth).json()["status"] == "cancelled"
    assert db.get(Job, job["id"]) is not None


# --- training ---------------------------------------------------------------------------------------------

@pytest.mark.slow
def test_reinforcement_with_a_python_grader_trains(oai, tmp_path, demo_assets, celery_worker):
    """Every sample scores at least 0.1 from the python grader (0 had the sandbox failed), so each step's
    mean reward is at least 0.1; and the job succeeds."""
    import pyarrow.parquet as pq

    rows = [{"messages": [{"role": "user", "content": r["prompt"]}], "answer": r["ground_truth"]}
            for r in pq.read_table(demo_assets["prompts_train"]).to_pylist()[:16]]
    train = oai.files.create(file=jsonl(tmp_path, "rft.jsonl", rows).open("rb"), purpose="fine-tune")
    job = oai.fine_tuning.jobs.create(model=demo_assets["model"], training_file=train.id, method={
        "type": "reinforcement",
        "reinforcement": {"grader": LENGTH, "hyperparameters": {
            "n_epochs": 1, "batch_size": 8, "compute_multiplier": 0.5, "eval_interval": 2}},
        "keel_overrides": ["data.max_response_length=8"]})
    deadline = time.monotonic() + 600
    while (done := oai.fine_tuning.jobs.retrieve(job.id)).status not in ("succeeded", "failed", "cancelled"):
        assert time.monotonic() < deadline, done.status
        time.sleep(0.5)
    assert done.status == "succeeded", done.error
    events = oai.fine_tuning.jobs.list_events(job.id, limit=100).data
    rewards = [e.data["train_mean_reward"] for e in reversed(events) if e.type == "metrics"]
    assert len(rewards) == 2 and all(r >= 0.1 for r in rewards), rewards
