"""Paths: models come only from the deployment's model roots or Keel's own outputs, whatever field
names them; an uploaded file's name never becomes a path (the bytes live under an id)."""

from __future__ import annotations

import os
import secrets

import pytest
import security_support

files_api, jobs_api = security_support.api_files(), security_support.api_jobs()


@pytest.fixture
def roots(keel_home, tmp_path):
    """A model inside the root, and a directory beside it with the same prefix (`models-evil`)."""
    inside = keel_home / "models" / f"m-{secrets.token_hex(3)}"
    inside.mkdir(parents=True)
    (inside / "config.json").write_text("{}")
    evil = keel_home / "models-evil"
    evil.mkdir(exist_ok=True)
    link = keel_home / "models" / f"link-{secrets.token_hex(3)}"
    link.symlink_to(tmp_path)
    return {"inside": str(inside), "evil": str(evil), "link": str(link)}


OUTSIDE = [
    "/etc",
    "/",
    "/tmp",
    "{evil}",  # a sibling whose name starts like the root
    "{link}",  # a symlink inside the root that points out of it
    "{inside}/../../..",
    "{inside}/../../models-evil",
    "./models/x",  # relative: neither absolute nor a hub id (`org/name`, which this would be without ./)
    "../../etc/passwd",
    "org/../../etc",
    "file:///etc",
    "hf://org/name",
    "~/.cache/huggingface",
    "C:\\models\\x",
    "/etc\x00/x",
]
FIELDS = ["model", "method.teacher", "method.reward.model", "method.hyperparameters.model.lora_adapter_path"]


def body_with(files, field: str, value: str) -> dict:
    if field == "method.teacher":
        return {"model": "org/student", "training_file": files["preference"],
                "method": {"type": "rm_distill", "teacher": value}}
    if field == "method.reward.model":
        return {**jobs_api.ppo_body(files), "method": {"type": "ppo", "reward": {"model": value}}}
    body = jobs_api.ppo_body(files)
    if field == "model":
        body["model"] = value
    else:
        body["method"]["hyperparameters"] = {"model": {"lora_adapter_path": value}}
    return body


@pytest.fixture
def files(db, project_key):
    return {p: jobs_api.make_file(db, project_key[0], p) for p in ("sft", "preference", "prompts")}


@pytest.mark.parametrize("field", FIELDS)
@pytest.mark.parametrize("ref", OUTSIDE)
def test_models_outside_the_roots_are_refused(client, auth, db, project_key, files, roots, dispatched, field, ref):
    value = ref.format(**roots)
    r = jobs_api.create(client, auth, body_with(files, field, value))
    assert r.status_code in (404, 422), r.text
    body = r.json()
    assert body["param"] == field or body["param"].startswith(field), body
    assert dispatched == []


@pytest.mark.parametrize("field", FIELDS)
def test_models_inside_the_roots_and_keel_outputs_are_accepted(client, auth, db, project_key, files, roots,
                                                               dispatched, field):
    if field == "method.hyperparameters.model.lora_adapter_path":
        refs = [roots["inside"]]  # an adapter is a directory, never a Keel model id or a hub id
    else:
        rm = jobs_api.make_model(db, project_key[0], "reward_model")
        refs = [roots["inside"], rm] + (["org/name"] if field != "method.teacher" else [])
    for ref in refs:
        r = jobs_api.create(client, auth, body_with(files, field, ref))
        assert r.status_code == 201, (ref, r.text)
    security_support.retire_jobs(project_key[0])


def test_the_worker_resolves_only_roots_and_keel_outputs(db, project_key, roots):
    """The worker checks again when it runs the job (a root may have changed since)."""
    resolve = pytest.importorskip("workers.resolve")
    from engine.errors import ModelNotAllowed

    allowed = resolve.allowed_model_roots()
    assert any(root.endswith("/jobs") for root in allowed)  # Keel's own outputs
    for ref in ("/etc", roots["evil"], roots["link"], roots["inside"] + "/../../models-evil"):
        with pytest.raises(ModelNotAllowed):
            resolve.resolve_model(db, project_key[0], ref, allowed, "model")
    assert resolve.resolve_model(db, project_key[0], roots["inside"], allowed, "model") == roots["inside"]


# --- uploaded file names ---------------------------------------------------------------------------------

def tree(root) -> set[str]:
    return {os.path.relpath(os.path.join(d, f), root) for d, _, fs in os.walk(root) for f in fs}


@pytest.mark.parametrize("name", [
    "../../x",
    "../../../../../../tmp/x",
    "..\\..\\x",
    "/etc/cron.d/x",
    "x/../../../x",
    "....//....//x",
    "%2e%2e%2f%2e%2e%2fx",
    "x\x00.jsonl",
    "x\r\nContent-Disposition: inline",
    'x"; filename="evil.sh',
    "é" * 300,
    "",
])
def test_an_uploaded_name_never_touches_a_path(client, auth, project_key, keel_home, name):
    outside = keel_home.parent
    before_home, before_outside = tree(keel_home), set(os.listdir(outside))
    data = files_api.jsonl_bytes([{"prompt": f"{name!r} {secrets.token_hex(4)}", "response": "r"}])
    r = files_api.upload(client, auth, data, purpose="sft", filename=name)
    assert r.status_code == 201, r.text
    file = r.json()
    added = tree(keel_home) - before_home
    assert added == {os.path.join("artifacts", "files", project_key[0], file["id"])}, added
    assert set(os.listdir(outside)) - before_outside == set()
    assert "/" not in file["filename"] and "\\" not in file["filename"] and ".." != file["filename"]
    assert all(ch.isprintable() for ch in file["filename"]) and len(file["filename"]) <= 255
    # The name comes back only as a quoted, escaped attachment name: no header can be injected.
    download = client.get(f"/v1/files/{file['id']}/content", headers=auth)
    assert download.content == data
    disposition = download.headers["content-disposition"]
    assert "\r" not in disposition and "\n" not in disposition
    assert disposition.startswith('attachment; filename="') and disposition.count('"') == 2
