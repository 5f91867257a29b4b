"""The fault tests' deployment (`Stack`): PostgreSQL behind a `PgProxy`, a private Redis, the API and
a worker (tests/faults/fault_processes.py), over the session's Ray cluster, seen through a `RayProbe`;
with the jobs it creates, the events it waits for, and what every recovered job's log must look like.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx
from faults.fault_processes import ApiServer, PgProxy, RayProbe, RedisServer, Worker, wait_until

# --- the deployment ---------------------------------------------------------------------------------

HEARTBEAT_S = 0.5
HEARTBEAT_TIMEOUT_S = 6.0
"""The stack's workers heartbeat twice a second and count as lost after 6 s of silence."""

PPO_HYPERPARAMETERS = {
    "data": {"train_batch_size": 8, "max_prompt_length": 32, "max_response_length": 32},
    "actor": {"ppo_mini_batch_size": 2, "ppo_epochs": 2, "optim": {"lr": 1e-4}},
    "rollout": {"n": 2},
    "trainer": {"total_training_steps": 20, "save_freq": 2},
}
"""About 0.7 s a step on two CPU cores: 20 steps outlast a lost worker's detection (a few seconds, while
the orphaned controller keeps training), so the resumed attempt still has steps to run."""


def sft_hyperparameters(steps: int, save_freq: int = -1) -> dict[str, Any]:
    return {"data": {"train_batch_size": 8, "max_prompt_length": 32, "max_response_length": 32},
            "optim": {"lr": 1e-3}, "trainer": {"total_training_steps": steps, "save_freq": save_freq}}


class Stack:
    """PostgreSQL (through `proxy`), a private Redis (broker + fan-out), the API and one worker on the
    session's Ray cluster, over the fault tests' own database; a project, its key and uploaded files."""

    def __init__(self, *, db_url: str, ray_address: str, home: Path, assets: dict[str, str]) -> None:
        from sqlalchemy.engine import make_url

        self.db_url, self.ray_address, self.home, self.assets = db_url, ray_address, home, assets
        url = make_url(db_url)
        self.proxy = PgProxy(url.host or "127.0.0.1", url.port or 5432)
        self.proxy.start()
        self.proxied_url = url.set(host="127.0.0.1", port=self.proxy.port).render_as_string(hide_password=False)
        self.redis = RedisServer(home / "redis")
        self.env = {**os.environ, "KEEL_DATABASE_URL": self.proxied_url, "KEEL_REDIS_URL": self.redis.url(0),
                    "KEEL_BROKER_URL": self.redis.url(1), "KEEL_QUEUE_NAMESPACE": f"faults{os.getpid()}.",
                    "KEEL_RAY_ADDRESS": ray_address, "KEEL_WORKER_HEARTBEAT_S": str(HEARTBEAT_S),
                    "KEEL_WORKER_HEARTBEAT_TIMEOUT_S": str(HEARTBEAT_TIMEOUT_S), "HF_HUB_OFFLINE": "1"}
        self.api = ApiServer(self.env, home / "api.log")
        self.worker = Worker(self.env, home / "worker.log")
        self.probe: RayProbe | None = None
        self.api_key = ""
        self.files: dict[str, str] = {}

    def start(self) -> None:
        from core.db import session_scope
        from core.security import create_api_key, get_or_create_project

        self.redis.start()
        self.api.launch()
        self.worker.launch()
        self.probe = RayProbe(self.ray_address)
        self.api.wait_ready()
        self.worker.wait_ready()
        with session_scope(self.db_url) as db:
            project, _ = get_or_create_project(db, "faults")
            self.project_id = project.id
            self.api_key = create_api_key(db, project)
        self.files = {"prompts": self.upload(self.assets["prompts_train"], "prompts"),
                      "sft": self.upload(self.assets["sft_train"], "sft")}

    def ensure_up(self) -> None:
        """Whatever a previous test broke, up again."""
        self.proxy.restore()
        for proc in (self.redis, self.api, self.worker):
            if not proc.alive():
                proc.start()

    def close(self) -> None:
        """Stop everything; a job controller still alive on the shared Ray cluster (a test that failed
        midway) is killed, so it cannot hold CPUs for the rest of the session."""
        from sqlalchemy import select

        from core.models import Job
        from engine.runtime.jobs import actor_name

        for proc in (self.worker, self.api, self.redis):
            proc.stop(grace=20)
        if self.probe is not None:
            with self.session() as db:
                for job_id in db.scalars(select(Job.id)):
                    self.probe.kill_actor(actor_name(job_id))
            self.probe.close()
        self.proxy.close()

    # --- the API ----------------------------------------------------------------------------------

    def http(self, timeout: float = 30.0) -> httpx.Client:
        return httpx.Client(base_url=self.api.base_url, headers={"Authorization": f"Bearer {self.api_key}"},
                            timeout=timeout)

    def sdk(self):
        from keel_client import AuthenticatedClient

        return AuthenticatedClient(base_url=self.api.base_url, token=self.api_key, timeout=30.0)

    def upload(self, path: str, purpose: str) -> str:
        with self.http() as http:
            r = http.post("/v1/files", data={"purpose": purpose},
                          files={"file": (Path(path).name, Path(path).read_bytes())})
        assert r.status_code in (200, 201), r.text
        return r.json()["id"]

    def create_job(self, method: dict[str, Any], *, file: str, seed: int = 7) -> str:
        body = {"model": self.assets["model"], "training_file": self.files[file], "method": method, "seed": seed}
        with self.http() as http:
            r = http.post("/v1/jobs", json=body)
        assert r.status_code == 201, r.text
        return r.json()["id"]

    def create_ppo_job(self, hyperparameters: dict[str, Any] | None = None) -> str:
        return self.create_job({"type": "ppo", "reward": {"function": "gsm8k"},
                                "hyperparameters": hyperparameters or PPO_HYPERPARAMETERS}, file="prompts")

    def create_sft_job(self, steps: int, save_freq: int = -1) -> str:
        return self.create_job({"type": "sft", "hyperparameters": sft_hyperparameters(steps, save_freq)}, file="sft")

    def cancel(self, job_id: str) -> None:
        with self.http() as http:
            r = http.post(f"/v1/jobs/{job_id}/cancel")
        assert r.status_code in (200, 409), r.text

    # --- the database, read directly (never through the proxy) --------------------------------------

    def session(self):
        from core.db import session_factory

        return session_factory(self.db_url)()

    def job(self, job_id: str):
        from core.models import Job

        with self.session() as db:
            return db.get(Job, job_id)

    def events(self, job_id: str) -> list:
        from sqlalchemy import select

        from core.models import JobEvent

        with self.session() as db:
            return list(db.scalars(select(JobEvent).where(JobEvent.job_id == job_id).order_by(JobEvent.seq)))

    def wait_event(self, job_id: str, predicate: Callable[[Any], bool], timeout: float, what: str,
                   interval: float = 0.05):
        """The first event of the job matching `predicate`, polling the table."""
        return wait_until(lambda: next((e for e in self.events(job_id) if predicate(e)), None), timeout,
                          interval=interval, what=what)

    def wait_terminal(self, job_id: str, timeout: float):
        return wait_until(lambda: (job := self.job(job_id)).status in ("succeeded", "failed", "cancelled") and job,
                          timeout, interval=0.25, what=f"job {job_id} to finish")

    def active_jobs(self) -> list[str]:
        """The stack's project's jobs not finished yet."""
        from sqlalchemy import select

        from core.models import Job

        with self.session() as db:
            return list(db.scalars(select(Job.id).where(Job.project_id == self.project_id,
                                                        Job.status.in_(("queued", "running", "cancelling")))))


# --- what every recovered job's log must look like -----------------------------------------------------

def assert_step_log(events: list, *, total_steps: int, save_freq: int, statuses: list[str]) -> None:
    """Contiguous seqs; every step's metrics exactly once and in order (no gap, no repeat); every
    checkpoint step once; the status history `statuses`; one `job.done`, last."""
    where = f"\nthe job's events:\n{timeline(events)}"
    assert [e.seq for e in events] == list(range(1, len(events) + 1)), where
    steps = [e.data["step"] for e in events if e.type == "job.metrics"]
    assert steps == list(range(1, total_steps + 1)), f"metrics steps {steps}{where}"
    checkpoints = [e.data["step"] for e in events if e.type == "job.checkpoint"]
    expected = sorted({*range(save_freq, total_steps + 1, save_freq), total_steps}) if save_freq > 0 else [total_steps]
    assert checkpoints == expected, f"checkpoint steps {checkpoints}{where}"
    assert [e.data["status"] for e in events if e.type == "job.status"] == statuses, where
    assert [e.type for e in events].count("job.done") == 1 and events[-1].type == "job.done", where


def timeline(events: list) -> str:
    """The job's events as `+seconds type data`, for failure messages."""
    if not events:
        return "(no events)"
    t0 = events[0].created_at
    return "\n".join(f"+{(e.created_at - t0).total_seconds():6.2f} {e.seq:3d} {e.type} {str(e.data)[:100]}"
                     for e in events)
