"""Every code block of README.md and docs/*.md runs, against a live server over the test database:
bash blocks in bash (curl fails on an HTTP error), python blocks with the SDK or the `openai` client,
JSON and YAML blocks parsed (a job spec also validated by the API's JobCreate schema), JSON Lines
blocks parsed and, after `<!-- purpose: NAME -->`, uploaded as a file of that purpose.

A block that cannot run here says so with `<!-- not-run: reason -->` on the line before it (a GPU, a
cluster, Docker, minutes of benchmarks, a diagram, a fragment of a loop); the test lists them. Any other
block runs, so a new one is executed by default.

What the test fills in, as a reader would (`SANDBOX`): the service's address (`http://127.0.0.1:8000`,
`http://keel-host:8000`) is the live server's; `KEY`/`KEEL_KEY` (and `$ADMIN_KEY`) are a fresh project's
keys, also in `./.keel/api_key`; the placeholder ids `file-...`, `job-...`, `model-...` and `wh-...` name a
preference file, a finished job, its output model and a webhook seeded for the test; `/models/NAME` and the
README's model path are the demo model; `./pairs.parquet` and `./train.jsonl` exist; a webhook URL is a
loopback one (no DNS here)."""

from __future__ import annotations

import json
import os
import re
import secrets
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[1]
DOCS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
FENCE = re.compile(r"^(?P<indent> *)```(?P<lang>[\w-]*)[^\n]*\n(?P<body>.*?)^(?P=indent)```[ \t]*$", re.MULTILINE | re.DOTALL)
NOT_RUN = re.compile(r"^\s*<!--\s*not-run:\s*(?P<reason>.*?)\s*-->\s*$")
PURPOSE = re.compile(r"^\s*<!--\s*purpose:\s*(?P<purpose>[\w-]+)\s*-->\s*$")
RUNNERS = ("bash", "sh", "python", "json", "jsonl", "yaml")


@dataclass
class Block:
    path: Path
    line: int
    lang: str
    body: str
    marker: str  # the line before the block, if it is a comment

    @property
    def name(self) -> str:
        return f"{self.path.relative_to(ROOT)}:{self.line}"

    @property
    def not_run(self) -> str | None:
        m = NOT_RUN.match(self.marker)
        return m["reason"] if m else None

    @property
    def purpose(self) -> str | None:
        m = PURPOSE.match(self.marker)
        return m["purpose"] if m else None


def blocks() -> list[Block]:
    found = []
    for path in DOCS:
        text = path.read_text()
        for m in FENCE.finditer(text):
            line = text.count("\n", 0, m.start()) + 1
            before = [x for x in text[:m.start()].splitlines() if x.strip()]
            marker = before[-1] if before and before[-1].lstrip().startswith("<!--") else ""
            body = "\n".join(x[len(m["indent"]):] for x in m["body"].splitlines())
            found.append(Block(path, line, m["lang"], body, marker))
    return found


ALL = blocks()
RUN = [b for b in ALL if b.not_run is None]


def test_every_block_runs_or_says_why_not(capsys):
    unmarked = [f"{b.name} ({b.lang or 'no language'})" for b in RUN if b.lang not in RUNNERS]
    assert not unmarked, f"blocks neither runnable ({', '.join(RUNNERS)}) nor marked <!-- not-run: reason -->: " \
                         f"{unmarked}"
    skipped = [b for b in ALL if b.not_run is not None]
    assert all(b.not_run for b in skipped), "a not-run marker needs a reason"
    with capsys.disabled():
        print(f"\n{len(RUN)} of {len(ALL)} doc code blocks run; not run:")
        for b in skipped:
            print(f"  {b.name}: {b.not_run}")
    assert len(RUN) >= 10 and len(ALL) >= 25  # the parser found the blocks


# --- the sandbox ---------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def sandbox(live_server, keel_home, tmp_path_factory):
    """A project with seeded resources, the working directory the blocks run in, and what to fill in."""
    import httpx

    from core.db import session_scope
    from core.events import append_event
    from core.models import Job, Model
    from core.security import create_api_key, get_or_create_project
    from engine.demo import build_demo_assets

    assets = build_demo_assets(keel_home / "models" / "docs-demo")
    with session_scope() as db:
        project, _ = get_or_create_project(db, f"docs-{secrets.token_hex(4)}")
        key, admin_key = create_api_key(db, project), create_api_key(db, project, admin=True)
        project_id = project.id
    auth = {"Authorization": f"Bearer {key}"}
    cwd = tmp_path_factory.mktemp("docs-cwd")
    (cwd / ".keel").mkdir()
    (cwd / ".keel" / "api_key").write_text(key + "\n")
    shutil.copy(assets["preference_train"], cwd / "pairs.parquet")
    (cwd / "train.jsonl").write_text("".join(json.dumps({"messages": [
        {"role": "user", "content": f"What is {i} + {i}?"}, {"role": "assistant", "content": str(2 * i)}]}) + "\n"
        for i in range(12)))
    with open(assets["preference_train"], "rb") as f:
        r = httpx.post(f"{live_server}/v1/files", headers=auth, data={"purpose": "preference"},
                       files={"file": ("pairs.parquet", f)}, timeout=60)
    assert r.status_code in (200, 201), r.text
    file_id = r.json()["id"]
    r = httpx.post(f"{live_server}/v1/webhooks", headers=auth, json={"url": "http://127.0.0.1:9/hook"}, timeout=30)
    assert r.status_code == 201, r.text
    webhook_id = r.json()["id"]
    with session_scope() as db:  # a finished reward-model job and its output model (the demo model's files)
        job = Job(project_id=project_id, method="reward_model", model=assets["model"], training_file_id=file_id,
                  status="succeeded", spec={"model": assets["model"], "training_file": file_id, "seed": 0,
                                            "method": {"type": "reward_model", "hyperparameters": {}}})
        db.add(job)
        db.flush()
        model = Model(project_id=project_id, name="docs-rm", kind="policy", format="hf", base_model=assets["model"],
                      path=assets["model"], job_id=job.id)
        db.add(model)
        db.flush()
        job.output_model_id = model.id
        job_id, model_id = job.id, model.id
        append_event(db, job_id, "job.status", {"status": "succeeded"})
        append_event(db, job_id, "job.done", {"status": "succeeded"})
    fill = {"http://127.0.0.1:8000": live_server, "http://keel-host:8000": live_server,
            "https://hooks.example.com/keel": "http://127.0.0.1:9/keel",
            "/abs/path/under/KEEL_MODEL_ROOTS/my-sft-model": assets["model"],
            "file-...": file_id, "job-...": job_id, "model-...": model_id, "wh-...": webhook_id}
    yield {"url": live_server, "key": key, "admin_key": admin_key, "cwd": cwd, "fill": fill,
           "model": assets["model"], "project_id": project_id}
    _cancel_queued(project_id)


def _cancel_queued(project_id: str) -> None:
    """No worker runs the jobs the blocks create; one started later in the session must not either."""
    from sqlalchemy import update

    from core.db import session_scope
    from core.models import Job

    with session_scope() as db:
        db.execute(update(Job).where(Job.project_id == project_id, Job.status.in_(("queued", "paused")))
                   .values(status="cancelled"))


def _filled(body: str, sandbox: dict) -> str:
    for placeholder, value in sandbox["fill"].items():
        body = body.replace(placeholder, value)
    return re.sub(r"(?<![\w/.])/models/[\w.-]+", sandbox["model"], body)


def _validate_spec(value, name: str) -> None:
    """A job spec in the docs is one the API's schema accepts."""
    from api.schemas.jobs import JobCreate

    if isinstance(value, dict) and {"model", "method"} <= set(value):
        try:
            JobCreate.model_validate(value)
        except Exception as exc:  # noqa: BLE001 - any refusal: the block is wrong
            pytest.fail(f"{name}: the job spec is not valid: {exc}")


@pytest.mark.parametrize("block", RUN, ids=[b.name for b in RUN])
def test_block_runs(block: Block, sandbox, monkeypatch):
    body = _filled(block.body, sandbox)
    if block.lang in ("bash", "sh"):
        env = {**os.environ, "KEY": sandbox["key"], "ADMIN_KEY": sandbox["admin_key"], "KEEL_URL": sandbox["url"],
               "PATH": f"{ROOT / '.venv' / 'bin'}:{os.environ['PATH']}"}
        env.pop("KEEL_API_KEY", None)
        # curl reports an HTTP error as a failure (and still shows the problem's body).
        script = 'set -euo pipefail\ncurl() { command curl -sS --fail-with-body --max-time 60 "$@"; }\n' + body
        proc = subprocess.run(["bash", "-c", script], check=False, cwd=sandbox["cwd"], env=env, capture_output=True, text=True,
                              timeout=120)
        assert proc.returncode == 0, f"{block.name} exited {proc.returncode}:\n{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}"
    elif block.lang == "python":
        monkeypatch.chdir(sandbox["cwd"])
        namespace = {"__name__": "__docs__", "KEY": sandbox["key"], "KEEL_KEY": sandbox["key"], "URL": sandbox["url"]}
        exec(compile(body, block.name, "exec"), namespace)  # noqa: S102 - our own docs
    elif block.lang == "json":
        _validate_spec(json.loads(body), block.name)
    elif block.lang == "yaml":
        _validate_spec(yaml.safe_load(body), block.name)
    elif block.lang == "jsonl":
        rows = [json.loads(line) for line in body.splitlines() if line.strip()]
        assert rows, block.name
        if block.purpose:
            import httpx

            r = httpx.post(f"{sandbox['url']}/v1/files", headers={"Authorization": f"Bearer {sandbox['key']}"},
                           data={"purpose": block.purpose}, files={"file": ("example.jsonl", body.encode())},
                           timeout=60)
            assert r.status_code in (200, 201), f"{block.name}: {r.text}"
            assert r.json()["rows"] == len(rows)
    _cancel_queued(sandbox["project_id"])
