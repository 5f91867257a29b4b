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

    s = _settings()
    uvicorn.run("api.main:app", host=host or s.HOST, port=port or s.PORT, log_level=s.LOG_LEVEL.lower(),
                timeout_graceful_shutdown=5)


@server_app.command()
def worker(concurrency: int = typer.Option(1, help="Jobs this worker runs at once."),
           loglevel: str = "INFO") -> None:
    """Run a Celery worker that executes jobs on Ray (and the job sweeper)."""
    os.execvp(sys.executable, _worker_argv(concurrency, loglevel))


def _worker_argv(concurrency: int, loglevel: str) -> list[str]:
    from workers.celery_app import CONTROL_QUEUE, JOB_QUEUE

    return [sys.executable, "-m", "celery", "-A", "workers.celery_app", "worker", "-Q",
            f"{JOB_QUEUE},{CONTROL_QUEUE}", f"--concurrency={concurrency}", "--pool=prefork",
            f"--loglevel={loglevel}", "--without-gossip", "--without-mingle", "--hostname", f"keel@{os.uname()[1]}"]


@server_app.command()
def up(concurrency: int = typer.Option(1, help="Jobs run at once by the embedded worker.")) -> None:
    """Run the whole service on this machine: migrations, a worker (with a local Ray and the sweeper)
    and the API."""
    s = _settings()
    s.home.mkdir(parents=True, exist_ok=True)
    migrate()
    key = _ensure_default_project(s.home)
    worker_proc = subprocess.Popen(_worker_argv(concurrency, "INFO"), start_new_session=True)
    url = f"http://{s.HOST}:{s.PORT}"
    typer.echo(f"\nKeel is starting on {url}\n  docs:    {url}/docs\n  project: default")
    if key:
        typer.echo(f"  API key: {key}   (shown once; also saved to {s.home / 'api_key'})")
    else:
        typer.echo(f"  API key: see {s.home / 'api_key'} (or `keel keys create --project default`)")
    typer.echo("Press Ctrl-C to stop.\n")
    # uvicorn restores the previous SIGTERM handler after its graceful shutdown and re-raises the
    # signal: this handler turns it into an exception, so the worker below is stopped on TERM too.
    signal.signal(signal.SIGTERM, _raise_system_exit)
    try:
        api(host=None, port=None)
    finally:
        _stop(worker_proc)


def _raise_system_exit(signum, _frame) -> None:
    raise SystemExit(128 + signum)


def _stop(proc: subprocess.Popen, grace: float = 15.0) -> None:
    """TERM the worker's process group (Celery warm shutdown, Ray with it), KILL after a grace period."""
    if proc.poll() is not None:
        return
    try:
        os.killpg(proc.pid, signal.SIGTERM)
        deadline = time.monotonic() + grace
        while proc.poll() is None and time.monotonic() < deadline:
            time.sleep(0.2)
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass


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


@keys_app.command("create")
def create_key(project: str = typer.Option(..., "--project", help="Project name (created if missing).")) -> None:
    """Create an API key for a project and print it once (only its hash is stored)."""
    from core.db import session_scope
    from core.security import create_api_key, get_or_create_project

    with session_scope() as db:
        proj, created = get_or_create_project(db, project)
        key = create_api_key(db, proj)
    if created:
        typer.echo(f"created project {project} ({proj.id})", err=True)
    typer.echo(key)


def _redact(url: str) -> str:
    if "@" in url and "://" in url:
        scheme, rest = url.split("://", 1)
        creds, host = rest.rsplit("@", 1)
        return f"{scheme}://{creds.split(':')[0]}:***@{host}" if ":" in creds else url
    return url
