"""Server-side commands: run the API, a worker, migrations, or everything at once (`keel up`).

The sweeper (`workers.sweeper`: re-sends jobs the broker never got, re-queues jobs whose worker died)
runs in a thread of every worker's main Celery process, started on `worker_ready`, so `keel up` and any
deployment that runs `keel worker` have one; several at once are safe (conditional updates).
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import typer

server_app = typer.Typer(no_args_is_help=True)
keys_app = typer.Typer(help="Manage project API keys.", no_args_is_help=True)


def _settings():
    from core.config import settings

    return settings


@server_app.command()
def migrate() -> None:
    """Apply database migrations (Alembic) up to the latest revision."""
    from core import migrate as m

    m.upgrade()
    typer.echo(f"database migrated: {_redact(_settings().database_url)}")


@server_app.command()
def api(host: str = typer.Option(None, help="Bind address (default KEEL_HOST)."),
        port: int = typer.Option(None, help="Port (default KEEL_PORT).")) -> None:
    """Run the HTTP API."""
    import uvicorn

    from core import logging as logcontext

    s = _settings()
    logcontext.configure()  # uvicorn's own lines (access log included) go through Keel's format too
    uvicorn.run("api.main:app", host=host or s.HOST, port=port or s.PORT, log_level=s.LOG_LEVEL.lower(),
                log_config=None, timeout_graceful_shutdown=5, **uvicorn_options(s))


def uvicorn_options(s) -> dict:
    """The API server's protocol settings from Keel's: h11, whose buffer limit bounds the request line
    and headers (`KEEL_MAX_HEADER_BYTES`; httptools buffers a header of any size), and the proxies
    whose `X-Forwarded-For` is believed (`KEEL_FORWARDED_ALLOW_IPS`)."""
    return {"http": "h11", "h11_max_incomplete_event_size": s.MAX_HEADER_BYTES, "proxy_headers": True,
            "forwarded_allow_ips": s.FORWARDED_ALLOW_IPS}


@server_app.command()
def worker(concurrency: int = typer.Option(1, help="Jobs this worker runs at once."),
           loglevel: str = "INFO") -> None:
    """Run a Celery worker that executes jobs on Ray (and the job sweeper)."""
    _require_one_cluster(concurrency)
    os.execvp(sys.executable, _worker_argv(concurrency, loglevel))


def _require_one_cluster(concurrency: int, address: str | None = None) -> None:
    """A job must never run twice at once: every worker process shares one Ray cluster
    (`workers.capacity.single_cluster_problem`; `address`: the worker's, default KEEL_RAY_ADDRESS),
    else the worker does not start."""
    from workers.capacity import single_cluster_problem

    problem = single_cluster_problem(concurrency, ray_address=address)
    if problem:
        typer.echo(f"keel worker: {problem}", err=True)
        raise typer.Exit(2)


def _worker_argv(concurrency: int, loglevel: str) -> list[str]:
    from workers.celery_app import CONTROL_QUEUE, JOB_QUEUE

    return [sys.executable, "-m", "celery", "-A", "workers.celery_app", "worker", "-Q",
            f"{JOB_QUEUE},{CONTROL_QUEUE}", f"--concurrency={concurrency}", "--pool=prefork",
            f"--loglevel={loglevel}", "--without-gossip", "--without-mingle", "--hostname", f"keel@{os.uname()[1]}"]


def serve_options(s) -> dict:
    """The serving engine's options from the deployment settings (`KEEL_SERVE_*`, storage)."""
    return {"max_replicas": s.SERVE_MAX_REPLICAS, "max_adapters": s.SERVE_MAX_ADAPTERS, "max_batch": s.SERVE_MAX_BATCH,
            "replica_cpus": s.SERVE_REPLICA_CPUS, "replica_gpus": s.SERVE_REPLICA_GPUS, "idle_s": s.SERVE_IDLE_S,
            "storage_options": s.STORAGE_OPTIONS, "cache_dir": s.ARTIFACT_CACHE_DIR or None}


@server_app.command()
def serve(host: str = typer.Option("", help="Listen address (default: KEEL_SERVE_URL's host)."),
          port: int = typer.Option(0, help="Listen port (default: KEEL_SERVE_URL's port).")) -> None:
    """Run inference: Ray Serve's HTTP ingress (KEEL_SERVE_URL) on the Ray cluster (KEEL_RAY_ADDRESS, or a
    local loopback Ray), until stopped."""
    from urllib.parse import urlsplit

    from engine.runtime.cluster import connect
    from engine.serving.deployment import start

    s = _settings()
    url = urlsplit(s.SERVE_URL)
    connect(s.RAY_ADDRESS or None, num_cpus=s.RAY_NUM_CPUS)
    signal.signal(signal.SIGTERM, _raise_system_exit)
    ingress = start(host or url.hostname or "127.0.0.1", port or url.port or 8100, serve_options(s))
    typer.echo(f"keel serve: ingress on {ingress}")
    try:
        while True:
            time.sleep(3600)
    except (KeyboardInterrupt, SystemExit):
        pass


@server_app.command()
def up(concurrency: int = typer.Option(1, help="Jobs run at once by the embedded worker.")) -> None:
    """Run the whole service on this machine: migrations, a Ray head on loopback (unless
    KEEL_RAY_ADDRESS names a cluster), a worker (and the sweeper) and inference on it, and the API."""
    from keel_cli import ray_head

    s = _settings()
    s.home.mkdir(parents=True, exist_ok=True)
    migrate()
    key = _ensure_default_project(s.home)
    # One Ray for jobs and Serve, so admission sees serving replicas (docs/inference.md).
    port = None if s.RAY_ADDRESS else ray_head.free_ports(1)[0]
    address = s.RAY_ADDRESS or f"127.0.0.1:{port}"
    _require_one_cluster(concurrency, address)
    env = ray_head.environment(address)
    # uvicorn restores the previous SIGTERM handler after its graceful shutdown and re-raises the
    # signal: this handler turns it into an exception, so everything started below is stopped on TERM too.
    signal.signal(signal.SIGTERM, _raise_system_exit)
    procs: list[subprocess.Popen] = []
    head = None
    try:
        if port is not None:
            try:
                head = ray_head.start(port, s.RAY_NUM_CPUS, s.home / "ray-head.log", env)
            except RuntimeError as exc:
                typer.echo(f"keel up: {exc}", err=True)
                raise typer.Exit(1) from None
        procs.append(subprocess.Popen(_worker_argv(concurrency, "INFO"), env=env, start_new_session=True))
        procs.append(subprocess.Popen([sys.executable, "-m", "keel_cli.main", "serve"], env=env,
                                      start_new_session=True))
        url = f"http://{s.HOST}:{s.PORT}"
        typer.echo(f"\nKeel is starting on {url}\n  console: {url}/\n  docs:    {url}/docs\n  project: default")
        if key:
            typer.echo(f"  API key: {key}   (shown once; also saved to {s.home / 'api_key'})")
        else:
            typer.echo(f"  API key: see {s.home / 'api_key'} (or `keel keys create --project default`)")
        typer.echo(f"  Ray:     {address}" + (f" (log: {head.log})" if head else ""))
        typer.echo("Press Ctrl-C to stop.\n")
        api(host=None, port=None)
    except KeyboardInterrupt:  # uvicorn re-raises the Ctrl-C it shut down on: not an error here
        pass
    finally:
        signal.signal(signal.SIGINT, signal.SIG_IGN)  # a second Ctrl-C must not leave anything running
        if procs:
            typer.echo("stopping Keel (the worker finishes its shutdown) ...")
        for proc in procs:
            _stop(proc)
        if head is not None:  # last: the worker and inference run on it
            _stop(head.proc)
    typer.echo("Keel stopped.")


def _raise_system_exit(signum, _frame) -> None:
    raise SystemExit(128 + signum)


def _stop(proc: subprocess.Popen, grace: float = 15.0) -> None:
    """TERM a child's main process (the worker: Celery's warm shutdown stops its pool; `ray start`: it
    stops its GCS, raylet and Ray workers), then KILL whatever is left of its process group after a
    grace period. Not TERM to the whole group: Ray's signal handler in the pool process printed a stack
    dump for it."""
    try:
        if proc.poll() is None:
            proc.terminate()
            deadline = time.monotonic() + grace
            while proc.poll() is None and time.monotonic() < deadline:
                time.sleep(0.2)
        os.killpg(proc.pid, signal.SIGKILL)  # stragglers (Ray's processes) of the worker's session
    except ProcessLookupError:
        pass
    proc.wait()


def _ensure_default_project(home: Path) -> str | None:
    """Create the `default` project and its first key on first start; return the key then, else None."""
    from core.db import session_scope
    from core.security import create_api_key, get_or_create_project

    with session_scope() as db:
        project, created = get_or_create_project(db, "default")
        if not created:
            return None
        key = create_api_key(db, project)
    key_file = home / "api_key"
    key_file.write_text(key + "\n")
    key_file.chmod(0o600)
    return key


def _require_migrated() -> None:
    """Exit with a sentence, not a traceback, when the database is missing Keel's tables or is behind
    this version's migrations (or cannot be reached)."""
    from alembic.runtime.migration import MigrationContext
    from alembic.script import ScriptDirectory
    from sqlalchemy.exc import DBAPIError

    from core.db import get_engine
    from core.migrate import alembic_config

    url = _redact(_settings().database_url)
    try:
        with get_engine(_settings().database_url).connect() as conn:
            current = MigrationContext.configure(conn).get_current_revision()
    except DBAPIError as exc:
        typer.echo(f"cannot reach the database {url}: {exc.__class__.__name__}", err=True)
        raise typer.Exit(1) from None
    head = ScriptDirectory.from_config(alembic_config()).get_current_head()
    if current is None:
        typer.echo(f"the database {url} has no Keel tables yet: run `keel migrate` first", err=True)
        raise typer.Exit(1)
    if current != head:
        typer.echo(f"the database {url} is at migration {current}, this Keel needs {head}: "
                   "run `keel migrate` first", err=True)
        raise typer.Exit(1)


@keys_app.command("create")
def create_key(project: str = typer.Option(..., "--project", help="Project name (created if missing)."),
               admin: bool = typer.Option(False, "--admin", help="The key may manage the project's keys "
                                          "(`/v1/keys`, `keel keys` over HTTP)."),
               name: str = typer.Option(None, "--name", help="A label to recognise the key by.")) -> None:
    """Create an API key for a project and print it once (only its hash is stored)."""
    from core.db import session_scope
    from core.security import create_api_key, get_or_create_project

    _require_migrated()
    with session_scope(_settings().database_url) as db:
        proj, created = get_or_create_project(db, project)
        key = create_api_key(db, proj, admin=admin, name=name)
    if created:
        typer.echo(f"created project {project} ({proj.id})", err=True)
    typer.echo(key)


@keys_app.command("list")
def list_keys(project: str = typer.Option(None, "--project", help="Only this project's keys."),
              revoked: bool = typer.Option(False, "--revoked", help="Include revoked keys.")) -> None:
    """List API keys (never their secrets): id, project, prefix, scope, name, created, revoked."""
    from sqlalchemy import select

    from core.db import session_scope
    from core.models import ApiKey, Project

    _require_migrated()
    with session_scope(_settings().database_url) as db:
        stmt = select(ApiKey, Project.name).join(Project, Project.id == ApiKey.project_id).order_by(ApiKey.id)
        if project is not None:
            stmt = stmt.where(Project.name == project)
        if not revoked:
            stmt = stmt.where(ApiKey.revoked_at.is_(None))
        rows = db.execute(stmt).all()
    typer.echo("id\tproject\tprefix\tscope\tname\tcreated\trevoked")
    for key, project_name in rows:
        typer.echo("\t".join([key.id, project_name, key.prefix + "...", "admin" if key.admin else "project",
                              key.name or "-", key.created_at.strftime("%Y-%m-%d %H:%M"),
                              key.revoked_at.strftime("%Y-%m-%d %H:%M") if key.revoked_at else "-"]))


@keys_app.command("revoke")
def revoke_key(key_id: str = typer.Argument(..., help="The key's id (`keel keys list`).")) -> None:
    """Revoke an API key: every request with it is a 401 from now on."""
    from core.db import session_scope
    from core.models import ApiKey
    from core.security import revoke_api_key

    _require_migrated()
    with session_scope(_settings().database_url) as db:
        row = db.get(ApiKey, key_id)
        if row is None:
            typer.echo(f"no API key with id {key_id!r}", err=True)
            raise typer.Exit(1)
        revoke_api_key(db, row.project_id, key_id)
    typer.echo(f"revoked {key_id}")


def _redact(url: str) -> str:
    if "@" in url and "://" in url:
        scheme, rest = url.split("://", 1)
        creds, host = rest.rsplit("@", 1)
        return f"{scheme}://{creds.split(':')[0]}:***@{host}" if ":" in creds else url
    return url
