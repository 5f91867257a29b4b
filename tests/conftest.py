"""Test setup: real PostgreSQL and Redis on loopback, a private database and queue namespace per
test session (so parallel runs never collide), local storage in a temporary KEEL_HOME.

Environment is set before anything imports `core.config`."""

from __future__ import annotations

import json
import os
import secrets
import tempfile
from pathlib import Path

import pytest

from bench.common import free_ports

# Once per process: a second import of this file (as a plain `conftest` module) must not pick a new
# database and namespace under the tests' feet (a worker started afterwards would use them).
_RUN = os.environ.get("KEEL_TEST_RUN", "")
_AGAIN = _RUN.startswith(f"{os.getpid()}_")
if not _AGAIN:
    _RUN = os.environ["KEEL_TEST_RUN"] = f"{os.getpid()}_{secrets.token_hex(3)}"
_PG_ADMIN = os.environ.get("KEEL_TEST_PG_ADMIN_URL", "postgresql+psycopg://postgres@127.0.0.1:5432/postgres")
TEST_DB = f"keel_test_{_RUN}"
_HOME = Path(os.environ["KEEL_HOME"]) if _AGAIN else Path(tempfile.mkdtemp(prefix=f"keel-test-{_RUN}-"))

os.environ.update({
    "KEEL_ENV": "test",
    "KEEL_HOME": str(_HOME),
    "KEEL_DATABASE_URL": _PG_ADMIN.rsplit("/", 1)[0] + "/" + TEST_DB,
    "KEEL_REDIS_URL": os.environ.get("KEEL_TEST_REDIS_URL", "redis://127.0.0.1:6379/0"),
    "KEEL_BROKER_URL": os.environ.get("KEEL_TEST_BROKER_URL", "redis://127.0.0.1:6379/1"),
    "KEEL_QUEUE_NAMESPACE": f"test{_RUN}.",
    "KEEL_STORAGE_URL": str(_HOME / "artifacts"),
    "KEEL_MODEL_ROOTS": str(_HOME / "models"),
    "KEEL_RATE_LIMIT_PER_MINUTE": "0",
    "KEEL_AUTH_FAILURES_PER_MINUTE": "0",  # route sweeps send many bad keys; tests/security/test_auth_limits.py limits
    "KEEL_MAX_STREAMS_PER_KEY": "0",  # storm tests hold 100+ streams on one key; tests/api/test_limits.py caps
    "KEEL_WEBHOOK_ALLOW_PRIVATE": "1",  # webhook tests receive on loopback; tests/workers/test_webhooks.py refuses
    # The same in the session's Celery worker, whose sender may take part in any webhook test.
    "KEEL_WEBHOOK_RETRY_SCHEDULE_S": "[0.5, 1.0, 1.0]",
    "KEEL_WEBHOOK_TIMEOUT_S": "1",
    # Integrations stay offline and on disk (tests/workers/test_integrations.py), in the Celery worker too.
    "KEEL_MLFLOW_TRACKING_URI_PREFIXES": json.dumps([f"file://{_HOME}"]),
    # Python graders run (sandboxed) in the API and the session's Celery worker; tests of the refusal turn
    # it off in the API's process (tests/openai/test_openai_python_graders.py).
    "KEEL_ALLOW_PYTHON_GRADERS": "1",
    # OpenEnv test servers listen on loopback (tests/workers/test_openenv_e2e.py), in the Celery worker too;
    # tests/core/test_environment_urls.py empties the list.
    "KEEL_ENV_ALLOWED_HOSTS": '["127.0.0.1"]',
    # `cpus_per_worker: auto` resolves to 1, as before it existed: concurrent test jobs share the session's
    # 2-CPU Ray instead of waiting for each other, with 1 torch thread each on the 2-core CI machine.
    # tests/api/test_auto_cpus.py raises it.
    "KEEL_AUTO_CPUS_PER_WORKER_MAX": "1",
    "MLFLOW_ALLOW_FILE_STORE": "true",
    "WANDB_MODE": "offline",
    "WANDB_SILENT": "true",
    "RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER": "0",
    "RAY_USAGE_STATS_ENABLED": "0",
})
(_HOME / "models").mkdir(parents=True, exist_ok=True)


@pytest.fixture(scope="session")
def keel_home() -> Path:
    return _HOME


@pytest.fixture(scope="session")
def database():
    """A freshly migrated PostgreSQL database for this test session; dropped afterwards."""
    from sqlalchemy import create_engine, text

    from core import migrate
    from core.config import settings

    admin = create_engine(_PG_ADMIN, isolation_level="AUTOCOMMIT")
    with admin.connect() as conn:
        conn.execute(text(f'CREATE DATABASE "{TEST_DB}"'))
    migrate.upgrade()
    yield settings.database_url
    from core.db import get_engine

    get_engine().dispose()
    with admin.connect() as conn:
        conn.execute(text("SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
                          "WHERE datname = :d AND pid <> pg_backend_pid()"), {"d": TEST_DB})
        conn.execute(text(f'DROP DATABASE IF EXISTS "{TEST_DB}"'))
    admin.dispose()


@pytest.fixture(scope="session")
def live_server(app):
    """The API on a real uvicorn on loopback, over the test database; yields its base URL."""
    from serving import serve

    with serve(app) as url:
        yield url


@pytest.fixture
def db(database):
    from core.db import session_factory

    with session_factory()() as session:
        yield session


@pytest.fixture(scope="session")
def app(database):
    from api.main import create_app

    return create_app()


@pytest.fixture
def client(app):
    from fastapi.testclient import TestClient

    with TestClient(app) as c:
        yield c


def _new_project_key(name: str) -> tuple[str, str]:
    from core.db import session_scope
    from core.security import create_api_key, get_or_create_project

    with session_scope() as db:
        project, _ = get_or_create_project(db, name)
        return project.id, create_api_key(db, project)


@pytest.fixture
def project_key(database) -> tuple[str, str]:
    """(project_id, api_key) of a fresh project."""
    return _new_project_key(f"proj-{secrets.token_hex(4)}")


@pytest.fixture
def auth(project_key) -> dict[str, str]:
    return {"Authorization": f"Bearer {project_key[1]}"}


@pytest.fixture
def other_project_key(database) -> tuple[str, str]:
    """(project_id, api_key) of a second, unrelated project (tenancy tests)."""
    return _new_project_key(f"other-{secrets.token_hex(4)}")


@pytest.fixture
def other_auth(other_project_key) -> dict[str, str]:
    """Headers of a second, unrelated project (tenancy tests)."""
    return {"Authorization": f"Bearer {other_project_key[1]}"}


@pytest.fixture
def awaiting_dispatch(database):
    """Whether a job is what a create leaves for the workers' sweepers (`workers.dispatch`): queued,
    never sent, and not waiting for resources (sent as soon as a sweeper is woken)."""
    from core.db import session_factory
    from core.models import Job

    def check(job_id: str) -> bool:
        with session_factory()() as db:
            row = db.get(Job, job_id)
            return (row.status, row.dispatched_at, row.queue_reason) == ("queued", None, None)
    return check


@pytest.fixture
def dispatched(monkeypatch) -> list[str]:
    """No broker for the API's enqueues in this process: the job ids it sent (tests that need the other
    `workers.dispatch` calls define their own)."""
    from workers import dispatch

    calls: list[str] = []
    monkeypatch.setattr(dispatch, "enqueue_job", lambda job_id: calls.append(job_id) or True)
    return calls


# --- a real local Ray and a real Celery worker (the workers' end-to-end tests) ---------------------

_ROOT = Path(__file__).resolve().parent.parent


def _wait_for_line(log: Path, text: str, proc, timeout: float) -> None:
    import time

    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if log.exists() and text in log.read_text(errors="replace"):
            return
        if proc.poll() is not None:
            break
        time.sleep(0.2)
    raise RuntimeError(f"{text!r} not seen in {log} (exit code {proc.poll()}):\n"
                       f"{log.read_text(errors='replace')[-4000:] if log.exists() else ''}")


def _stop_group(proc, grace: float) -> None:
    """TERM the process group this fixture started (and only it), KILL after `grace` seconds."""
    import signal
    import subprocess

    if proc.poll() is None:
        try:
            os.killpg(proc.pid, signal.SIGTERM)
            proc.wait(timeout=grace)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(timeout=10)
        except ProcessLookupError:
            pass


@pytest.fixture(scope="session")
def ray_cluster():
    """A real local Ray on loopback (`ray start --head --block`, 2 CPUs, no dashboard) for the
    session; yields its address. Stopped by signalling only the processes it started.

    Token authentication is off for this loopback-only cluster (`RAY_AUTH_MODE=disabled`, also set in
    this process's environment for the workers and drivers the tests start): otherwise Ray turns it
    on whenever `~/.ray/auth_token` exists and clients must opt in."""
    import subprocess
    import sys

    auth_mode = os.environ.get("RAY_AUTH_MODE")
    os.environ["RAY_AUTH_MODE"] = "disabled"

    flags = ("dashboard-agent-listen-port", "dashboard-agent-grpc-port", "runtime-env-agent-port",
             "metrics-export-port", "node-manager-port", "object-manager-port")
    port, *chosen = free_ports(1 + len(flags))
    ports = dict(zip(flags, chosen, strict=True))
    log = _HOME / "ray-start.log"
    argv = [str(Path(sys.executable).with_name("ray")), "start", "--head", "--block", "--node-ip-address=127.0.0.1",
            f"--port={port}", "--num-cpus=2", "--include-dashboard=false", "--disable-usage-stats",
            *(f"--{flag}={p}" for flag, p in ports.items())]
    env = {**os.environ, "RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER": "0", "RAY_USAGE_STATS_ENABLED": "0",
           "RAY_GRACEFUL_SHUTDOWN_DRAIN_TIMEOUT_S": "0", "HF_HUB_OFFLINE": "1",
           "PYTHONPATH": os.pathsep.join(p for p in (str(_ROOT), os.environ.get("PYTHONPATH")) if p)}
    with open(log, "wb") as out:
        proc = subprocess.Popen(argv, cwd=_ROOT, env=env, stdout=out, stderr=subprocess.STDOUT,
                                start_new_session=True)
    try:
        _wait_for_line(log, "Ray runtime started", proc, timeout=120)
        yield f"127.0.0.1:{port}"
    finally:
        _stop_group(proc, grace=30)
        if auth_mode is None:
            os.environ.pop("RAY_AUTH_MODE", None)
        else:
            os.environ["RAY_AUTH_MODE"] = auth_mode


@pytest.fixture(scope="session")
def celery_worker(database, ray_cluster):
    """A real `celery -A workers.celery_app worker` (prefork, concurrency 1) on this session's queues,
    running jobs on `ray_cluster`, with its sweeper thread; yields the `Popen`. Heartbeats every second."""
    import subprocess
    import sys

    from workers.celery_app import CONTROL_QUEUE, JOB_QUEUE

    _cancel_leftover_jobs()
    log = _HOME / "celery-worker.log"
    argv = [sys.executable, "-m", "celery", "-A", "workers.celery_app", "worker", "-Q", f"{JOB_QUEUE},{CONTROL_QUEUE}",
            "--pool=prefork", "--concurrency=1", "--loglevel=INFO", "--without-gossip", "--without-mingle",
            "--without-heartbeat", "-n", f"keel-test-{_RUN}@%h"]
    env = {**os.environ, "KEEL_RAY_ADDRESS": ray_cluster, "KEEL_WORKER_HEARTBEAT_S": "1"}
    with open(log, "wb") as out:
        proc = subprocess.Popen(argv, cwd=_ROOT, env=env, stdout=out, stderr=subprocess.STDOUT,
                                start_new_session=True)
    try:
        _wait_for_line(log, " ready.", proc, timeout=120)
        yield proc
    finally:
        _stop_group(proc, grace=30)


def _cancel_leftover_jobs() -> None:
    """Jobs that tests before the worker started left queued (created over the API and never meant to
    run) would be sent by its sweeper, which sends every queued job nobody sent: they are cancelled."""
    from sqlalchemy import update

    from core.db import session_scope
    from core.models import Job, utcnow

    with session_scope() as db:
        db.execute(update(Job).where(Job.status == "queued").values(status="cancelled", finished_at=utcnow()))


def pytest_collection_modifyitems(config, items):
    """Tests that use the session's live Celery worker (`celery_worker`) run last, in their order:
    once started, its sweeper and capacity publisher act on every job and the whole database of the
    session, which tests that drive jobs and tables by hand must not see."""
    items.sort(key=lambda item: "celery_worker" in getattr(item, "fixturenames", ()))
