"""Client commands that look things up and clean up: `keel models list`, `keel checkpoints list JOB`,
`keel jobs logs JOB [--follow]`, `keel jobs delete JOB`, `keel trainers list|delete` (on the generated SDK,
like keel_cli/client.py, whose apps they join)."""

from __future__ import annotations

from typing import Annotated, Any

import typer
from keel_client import stream_events
from keel_client.api.checkpoints import list_job_checkpoints
from keel_client.api.events import list_job_events
from keel_client.api.jobs import delete_job, retrieve_job
from keel_client.api.models import list_models
from keel_client.api.trainers import delete_trainer, list_trainers

from keel_cli.client import (
    _metrics_text,
    _short,
    _when,
    checkpoints_app,
    handled,
    jobs_app,
    make_client,
    models_app,
    ok,
    show_table,
)

trainers_app = typer.Typer(help="List and delete interactive trainers.", no_args_is_help=True)


@models_app.command("list")
def models_list(limit: Annotated[int, typer.Option(min=1, max=100)] = 20,
                kind: Annotated[str | None, typer.Option(help="Only policy, reward_model or value models.")]
                = None) -> None:
    """List the project's models, newest first: each is a job's `model`, teacher or reward model."""
    from keel_client.models import ListModelsKindType0

    with handled():
        kwargs = {"kind": ListModelsKindType0(kind)} if kind else {}
        page = ok(list_models.sync_detailed(client=make_client(), limit=limit, **kwargs))
    show_table(("id", "kind", "format", "name", "base model", "job", "created"),
               [(m.id, m.kind.value, m.format_.value, m.name, _short(m.base_model),
                 m.job_id or (m.trainer_id if isinstance(m.trainer_id, str) else "") or "", _when(m.created_at))
                for m in page.data])


@checkpoints_app.command("list")
def checkpoints_list(job_id: str, limit: Annotated[int, typer.Option(min=1, max=100)] = 20) -> None:
    """List a job's checkpoints, newest first (download one with `keel checkpoints download ID DIR`)."""
    with handled():
        client = make_client()
        page = ok(list_job_checkpoints.sync_detailed(job_id, client=client, limit=limit))
        method = ok(retrieve_job.sync_detailed(job_id, client=client)).method.type_ if page.data else ""
    show_table(("id", "step", "bytes", "created", "metrics"),
               [(c.id, str(c.step), str(c.bytes_), _when(c.created_at), _metrics_text(c.metrics.to_dict(), method))
                for c in page.data])


def event_line(event_type: str, data: dict[str, Any], method: str, created_at: int | None = None) -> str:
    """One event as a line of `keel jobs logs`."""
    when = _when(created_at)[-5:] + "  " if created_at else ""
    if event_type == "job.log":
        text = str(data.get("message", ""))
    elif event_type in ("job.warning", "job.error"):
        text = f"{event_type.removeprefix('job.')} {data.get('code')}: {data.get('message')}"
    elif event_type == "job.metrics":
        text = f"step {data.get('step')}/{data.get('total_steps') or '?'}  " \
               + _metrics_text(data.get("values") or {}, method)
    elif event_type == "job.checkpoint":
        text = f"checkpoint {data.get('checkpoint_id')} at step {data.get('step')}"
    elif event_type in ("job.status", "job.done"):
        text = f"{event_type.removeprefix('job.')}: {data.get('status')}"
    elif event_type == "job.placement":
        # One entry per role and rank: colocated roles share a process, so count processes.
        workers = [w for w in data.get("workers") or [] if isinstance(w, dict)]
        roles = ", ".join(dict.fromkeys(str(w.get("role")) for w in workers))
        processes = len({(w.get("node_id"), w.get("pid")) for w in workers})
        text = f"placed {roles}: {processes} process(es) on {len({w.get('node_id') for w in workers})} node(s)"
    else:
        text = str(data)
    return when + text


@jobs_app.command("logs")
def jobs_logs(job_id: str,
              follow: Annotated[bool, typer.Option("--follow", "-f", help="Keep printing new events until the "
                                                   "job finishes.")] = False) -> None:
    """Print a job's event log (logs, metrics, warnings, checkpoints, status), oldest first."""
    with handled():
        client = make_client()
        method = ok(retrieve_job.sync_detailed(job_id, client=client)).method.type_
        if follow:
            for event in stream_events(client, job_id):
                typer.echo(event_line(event.type_.value, event.data.to_dict(), method, event.created_at))
            return
        after = 0
        while True:
            page = ok(list_job_events.sync_detailed(job_id, client=client, after=after, limit=100))
            for event in page.data:
                typer.echo(event_line(event.type_.value, event.data.to_dict(), method, event.created_at))
            if not page.has_more or not page.data:
                return
            after = page.data[-1].seq


@jobs_app.command("delete")
def jobs_delete(job_id: str) -> None:
    """Delete a finished job with its event log and checkpoints (its output model stays)."""
    with handled():
        ok(delete_job.sync_detailed(job_id, client=make_client()))
    typer.echo(f"{job_id} deleted")


@trainers_app.command("list")
def trainers_list(limit: Annotated[int, typer.Option(min=1, max=100)] = 20,
                  status: Annotated[str | None, typer.Option(help="Only trainers in this status.")] = None) -> None:
    """List the project's interactive trainers, newest first."""
    from keel_client.models import ListTrainersStatusType0

    with handled():
        kwargs = {"status": ListTrainersStatusType0(status)} if status else {}
        page = ok(list_trainers.sync_detailed(client=make_client(), limit=limit, **kwargs))
    show_table(("id", "status", "model", "step", "tokens", "last used", "created"),
               [(t.id, t.status.value, _short(t.model), str(t.step), str(t.tokens), _when(t.last_used_at),
                 _when(t.created_at)) for t in page.data])


@trainers_app.command("delete")
def trainers_delete(trainer_id: str) -> None:
    """End a trainer: its actor is released without a save; the models it saved stay."""
    with handled():
        trainer = ok(delete_trainer.sync_detailed(trainer_id, client=make_client()))
    typer.echo(f"{trainer.id} {trainer.status.value}")


__all__ = ["event_line", "trainers_app"]
