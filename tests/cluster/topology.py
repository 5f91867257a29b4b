"""The production topology as separate processes on loopback: PostgreSQL (a private database), a
private Redis (broker and live fan-out), `keel api`, and `keel worker` joined to a Ray cluster by
`KEEL_RAY_ADDRESS`. It follows README's "Running on a Ray cluster", minus the containers."""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import Any

import httpx
from faults.fault_processes import ApiServer, Proc, RedisServer, wait_until

KEEL = str(Path(sys.executable).with_name("keel"))
TERMINAL = ("succeeded", "failed", "cancelled")


class KeelApi(ApiServer):
    """`keel api --host 127.0.0.1 --port P`."""

    def __init__(self, env: dict[str, str], log: Path) -> None:
        super().__init__(env, log)
        self.argv = [KEEL, "api", "--host", "127.0.0.1", "--port", str(self.port)]


class KeelWorker(Proc):
    """`keel worker`: Celery (and the sweeper) executing jobs on the Ray cluster at KEEL_RAY_ADDRESS."""

    def __init__(self, env: dict[str, str], log: Path) -> None:
        super().__init__("worker", [KEEL, "worker", "--loglevel", "INFO"], env, log)

    def wait_ready(self) -> None:
        wait_until(lambda: self._check_alive("ready") or " ready." in self.output(), 120, interval=0.2,
                   what="keel worker")


class Topology:
    """Redis, `keel api` and `keel worker` over `db_url`, running jobs on the Ray cluster at `ray_address`;
    a project with its key, and the demo files uploaded through the API."""

    def __init__(self, *, name: str, db_url: str, ray_address: str, home: Path, assets: dict[str, str],
                 heartbeat_timeout_s: float = 60.0) -> None:
        self.name, self.db_url, self.assets = name, db_url, assets
        self.redis = RedisServer(home / "redis")
        self.env = {**os.environ, "KEEL_DATABASE_URL": db_url, "KEEL_REDIS_URL": self.redis.url(0),
                    "KEEL_BROKER_URL": self.redis.url(1), "KEEL_QUEUE_NAMESPACE": f"{name}{os.getpid()}.",
                    "KEEL_RAY_ADDRESS": ray_address, "KEEL_WORKER_HEARTBEAT_S": "0.5",
                    "KEEL_WORKER_HEARTBEAT_TIMEOUT_S": str(heartbeat_timeout_s), "HF_HUB_OFFLINE": "1",
                    "RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER": "0", "RAY_USAGE_STATS_ENABLED": "0",
                    "RAY_AUTH_MODE": "disabled"}
        self.api = KeelApi(self.env, home / "api.log")
        self.worker = KeelWorker(self.env, home / "worker.log")
        self.files: dict[str, str] = {}
        self.api_key = ""

    def start(self) -> Topology:
        from core.db import session_scope
        from core.security import create_api_key, get_or_create_project

        self.redis.start()
        self.api.launch()
        self.worker.launch()
        self.api.wait_ready()
        self.worker.wait_ready()
        with session_scope(self.db_url) as db:
            project, _ = get_or_create_project(db, self.name)
            self.api_key = create_api_key(db, project)
        for purpose, asset in (("preference", "preference_train"), ("prompts", "prompts_train"),
                               ("sft", "sft_train")):
            self.files[purpose] = self.upload(self.assets[asset], purpose)
        return self

    def close(self) -> None:
        for proc in (self.worker, self.api, self.redis):
            proc.stop(grace=20)

    def logs(self) -> str:
        return "\n".join(f"--- {p.name} ---\n{p.full_log()[-3000:]}" for p in (self.worker, self.api))

    # --- the API, as a user would call it ------------------------------------------------------------

    def http(self) -> httpx.Client:
        return httpx.Client(base_url=self.api.base_url, headers={"Authorization": f"Bearer {self.api_key}"},
                            timeout=30.0)

    def upload(self, path: str, purpose: str) -> str:
        with self.http() as http:
            r = http.post("/v1/files", data={"purpose": purpose},
                          files={"file": (Path(path).name, Path(path).read_bytes())})
        assert r.status_code in (200, 201), r.text
        return r.json()["id"]

    def create_job(self, method: dict[str, Any], *, file: str, resources: dict[str, Any], seed: int = 3) -> str:
        body = {"model": self.assets["model"], "training_file": self.files[file], "method": method,
                "resources": resources, "seed": seed}
        with self.http() as http:
            r = http.post("/v1/jobs", json=body)
        assert r.status_code == 201, r.text
        return r.json()["id"]

    def job(self, job_id: str) -> dict[str, Any]:
        with self.http() as http:
            r = http.get(f"/v1/jobs/{job_id}")
        assert r.status_code == 200, r.text
        return r.json()

    def events(self, job_id: str) -> list[dict[str, Any]]:
        out: list[dict[str, Any]] = []
        with self.http() as http:
            while True:
                r = http.get(f"/v1/jobs/{job_id}/events", params={"limit": 1000, "after": len(out)})
                assert r.status_code == 200, r.text
                page = r.json()
                out += page["data"]
                if not page["has_more"]:
                    return out

    def wait_terminal(self, job_id: str, timeout: float) -> dict[str, Any]:
        try:
            return wait_until(lambda: (job := self.job(job_id))["status"] in TERMINAL and job, timeout,
                              interval=0.5, what=f"job {job_id} to finish")
        except AssertionError as err:
            raise AssertionError(f"{err}\n{self.logs()}") from None

    def wait_succeeded(self, job_id: str, timeout: float = 300) -> dict[str, Any]:
        job = self.wait_terminal(job_id, timeout)
        assert job["status"] == "succeeded", f"{job}\n{self.logs()}"
        return job
