"""A deployment whose artifact store is S3 (moto's server): the API (uvicorn) and a Celery worker as
subprocesses with their own KEEL_HOME, database, queue namespace and `KEEL_STORAGE_URL=s3://...`,
running jobs on the session's Ray cluster. The Ray nodes get no storage settings of their own: the
endpoint and credentials travel with each job (`KEEL_STORAGE_OPTIONS`)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import httpx

from bench.common import free_port

ROOT = Path(__file__).resolve().parents[2]


class Process:
    """A subprocess in its own process group, logging to a file."""

    def __init__(self, argv: list[str], env: dict[str, str], log: Path) -> None:
        self.log = log
        with open(log, "ab") as out:
            self.proc = subprocess.Popen(argv, cwd=ROOT, env=env, stdout=out, stderr=subprocess.STDOUT,
                                         stdin=subprocess.DEVNULL, start_new_session=True)

    def wait_for(self, ready, what: str, timeout: float = 120) -> None:
        deadline = time.monotonic() + timeout
        while not ready():
            if self.proc.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"{what} did not start:\n{self.log.read_text(errors='replace')[-4000:]}")
            time.sleep(0.25)

    def stop(self) -> None:
        if self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGTERM)
            try:
                self.proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait(timeout=10)


class S3Stack:
    def __init__(self, *, home: Path, db_url: str, storage_url: str, endpoint: str, ray_address: str) -> None:
        self.home, self.db_url, self.storage_url = home, db_url, storage_url
        home.mkdir(parents=True, exist_ok=True)
        self.cache_dir = home / "node-cache"
        self.storage_options = {"endpoint_url": endpoint, "key": os.environ["AWS_ACCESS_KEY_ID"],
                                "secret": os.environ["AWS_SECRET_ACCESS_KEY"]}
        self.env = {**os.environ, "KEEL_HOME": str(home), "KEEL_DATABASE_URL": db_url,
                    "KEEL_QUEUE_NAMESPACE": f"s3stack{os.getpid()}.", "KEEL_STORAGE_URL": storage_url,
                    "KEEL_STORAGE_OPTIONS": json.dumps(self.storage_options),
                    "KEEL_ARTIFACT_CACHE_DIR": str(self.cache_dir), "KEEL_RAY_ADDRESS": ray_address,
                    "KEEL_WORKER_HEARTBEAT_S": "1", "HF_HUB_OFFLINE": "1"}
        self.port = free_port()
        self.base_url = f"http://127.0.0.1:{self.port}"
        self.api: Process | None = None
        self.worker: Process | None = None
        self.headers: dict[str, str] = {}

    def start(self) -> None:
        from core.db import session_scope
        from core.security import create_api_key, get_or_create_project

        self.api = Process([sys.executable, "-m", "uvicorn", "api.main:app", "--host", "127.0.0.1", "--port",
                            str(self.port), "--log-level", "warning"], self.env, self.home / "api.log")
        ns = self.env["KEEL_QUEUE_NAMESPACE"]
        self.worker = Process([sys.executable, "-m", "celery", "-A", "workers.celery_app", "worker", "-Q",
                               f"{ns}keel.jobs,{ns}keel.control", "--pool=prefork", "--concurrency=1",
                               "--loglevel=INFO", "--without-gossip", "--without-mingle", "--without-heartbeat",
                               "-n", f"keel-s3-{os.getpid()}@%h"], self.env, self.home / "worker.log")
        self.api.wait_for(self._healthy, "the API")
        self.worker.wait_for(lambda: " ready." in (self.home / "worker.log").read_text(errors="replace"),
                             "the Celery worker")
        with session_scope(self.db_url) as db:
            project, _ = get_or_create_project(db, "s3")
            self.headers = {"Authorization": f"Bearer {create_api_key(db, project)}"}

    def _healthy(self) -> bool:
        try:
            return httpx.get(f"{self.base_url}/healthz", timeout=1.0).status_code == 200
        except httpx.HTTPError:
            return False

    def close(self) -> None:
        for proc in (self.worker, self.api):
            if proc is not None:
                proc.stop()

    # --- the API ----------------------------------------------------------------------------------

    def request(self, method: str, path: str, **kw: Any) -> httpx.Response:
        return httpx.request(method, f"{self.base_url}{path}", headers=self.headers, timeout=60, **kw)

    def upload(self, path: str, purpose: str) -> str:
        with open(path, "rb") as f:
            r = self.request("POST", "/v1/files", data={"purpose": purpose}, files={"file": (Path(path).name, f)})
        assert r.status_code in (200, 201), r.text
        return r.json()["id"]

    def run(self, body: dict[str, Any], timeout: float = 420) -> dict[str, Any]:
        r = self.request("POST", "/v1/jobs", json=body)
        assert r.status_code == 201, r.text
        job_id = r.json()["id"]
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            job = self.request("GET", f"/v1/jobs/{job_id}").json()
            if job["status"] in ("succeeded", "failed", "cancelled"):
                return job
            time.sleep(0.5)
        raise AssertionError(f"{job_id} still {job['status']} after {timeout} s")

    def events(self, job_id: str) -> list[dict[str, Any]]:
        return self.request("GET", f"/v1/jobs/{job_id}/events", params={"limit": 1000}).json()["data"]
