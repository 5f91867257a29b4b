"""Client commands (`keel files|jobs|checkpoints|models ...`), built on the generated SDK (`keel_client`).

They talk to `KEEL_URL` (default: the address `keel up` serves on, `KEEL_HOST`:`KEEL_PORT`, i.e.
http://127.0.0.1:8000) with `KEEL_API_KEY` (default: the key `keel up`
saved in `$KEEL_HOME/api_key`, i.e. `.keel/api_key`). A refused request prints the problem's title,
detail and param and exits 1. Nothing here imports the engine, torch or the server's modules."""

from __future__ import annotations

import contextlib
import json
import os
import time
import uuid
from collections.abc import Iterator
from http import HTTPStatus
from pathlib import Path
from typing import Annotated, Any, NoReturn

import httpx
import typer
import yaml
from keel_client import (
    AuthenticatedClient,
    DownloadError,
    StreamError,
    UnsafeArchive,
    download_checkpoint,
    download_model,
    stream_events,
)
from keel_client.api.files import list_files, upload_file
from keel_client.api.jobs import cancel_job, create_job, list_jobs, pause_job, resume_job, retrieve_job
from keel_client.models import JobCreate, JobPublic, Problem, UploadFileFileUpload
from keel_client.models import UploadFileFileUploadPurpose as Purpose
from keel_client.types import File, Response
from rich.console import Console
from rich.progress import (
    BarColumn,
    MofNCompleteColumn,
    Progress,
    TextColumn,
    TimeElapsedColumn,
    TimeRemainingColumn,
)
from rich.table import Table

METHODS = ("sft", "reward_model", "rm_distill", "dpo", "ppo", "eval")
KEY_METRICS = {
    "sft": ("train/loss", "val/loss"),
    "reward_model": ("rm/loss", "rm/accuracy", "val/rm/accuracy"),
    "rm_distill": ("distill/loss", "distill/kl", "distill/val_kl", "distill/agreement"),
    "dpo": ("train/loss", "rewards/accuracies", "rewards/margins", "val/rewards/accuracies"),
    "ppo": ("critic/score/mean", "actor/pg_loss", "actor/ppo_kl", "response_length/mean"),
    "eval": ("eval/reward/mean", "eval/pass@1", "eval/win_rate"),
}
"""The few metrics `keel jobs watch` and the demo summary show per method (VERL-style names)."""

console = Console()
err_console = Console(stderr=True)

files_app = typer.Typer(help="Upload and list datasets.", no_args_is_help=True)
jobs_app = typer.Typer(help="Create, list, watch, show the logs of, pause, resume, cancel and delete training jobs.", no_args_is_help=True)
checkpoints_app = typer.Typer(help="List and download checkpoints.", no_args_is_help=True)
models_app = typer.Typer(help="List and download trained models.", no_args_is_help=True)


# --- connection and errors ------------------------------------------------------------------------

class CliError(Exception):
    """A refused request or a usage problem: printed as `error: title: detail (param: p)`, exit 1."""

    def __init__(self, title: str, detail: str = "", param: str | None = None) -> None:
        super().__init__(f"{title}: {detail}")
        self.title, self.detail, self.param = title, detail, param


def base_url() -> str:
    """`KEEL_URL`, else where `keel up` listens with the same environment (`KEEL_HOST`, `KEEL_PORT`)."""
    url = os.environ.get("KEEL_URL", "").strip()
    if url:
        return url.rstrip("/")
    host = os.environ.get("KEEL_HOST", "").strip() or "127.0.0.1"
    port = os.environ.get("KEEL_PORT", "").strip() or "8000"
    if host in ("0.0.0.0", "::", "[::]"):  # a wildcard bind is reached on loopback
        host = "127.0.0.1"
    elif ":" in host and not host.startswith("["):
        host = f"[{host}]"
    return f"http://{host}:{port}"


def api_key() -> str:
    key = os.environ.get("KEEL_API_KEY", "").strip()
    if key:
        return key
    key_file = Path(os.environ.get("KEEL_HOME", "").strip() or ".keel").expanduser() / "api_key"
    if key_file.is_file():
        return key_file.read_text().strip()
    raise CliError("No API key", f"set KEEL_API_KEY, or run `keel up` here (it writes {key_file})")


def make_client(timeout: float = 60.0) -> AuthenticatedClient:
    return AuthenticatedClient(base_url=base_url(), token=api_key(), timeout=httpx.Timeout(timeout),
                               raise_on_unexpected_status=False)


def fail(error: CliError) -> NoReturn:
    err_console.print(f"[bold red]error:[/] {error.title}" + (f": {error.detail}" if error.detail else "")
                      + (f" [dim](param: {error.param})[/]" if error.param else ""), highlight=False)
    raise typer.Exit(1)


@contextlib.contextmanager
def handled() -> Iterator[None]:
    """Turn CliErrors and connection failures into a one-line message and exit code 1."""
    try:
        yield
    except CliError as e:
        fail(e)
    except StreamError as e:
        fail(CliError(e.problem.get("title") or "Event stream failed", str(e), e.problem.get("param")))
    except httpx.TransportError as e:
        fail(CliError("Cannot reach Keel", f"{base_url()}: {e} (is `keel up` running? set KEEL_URL)"))


def ok(response: Response) -> Any:
    """The parsed body of a 2xx response; a problem (or any other answer) raises CliError."""
    if response.status_code < 400 and response.parsed is not None and not isinstance(response.parsed, Problem):
        return response.parsed
    problem = response.parsed if isinstance(response.parsed, Problem) else None
    if problem is None:
        with contextlib.suppress(ValueError, KeyError, TypeError):
            problem = Problem.from_dict(json.loads(response.content))
    if problem is not None:
        raise CliError(problem.title, problem.detail, problem.param if isinstance(problem.param, str) else None)
    raise CliError(f"HTTP {int(response.status_code)}", response.content.decode(errors="replace")[:500])


# --- files ----------------------------------------------------------------------------------------

def upload(client: AuthenticatedClient, path: Path, purpose: str):
    with path.open("rb") as f:
        body = UploadFileFileUpload(file=File(payload=f, file_name=path.name), purpose=Purpose(purpose))
        return ok(upload_file.sync_detailed(client=client, body=body))


@files_app.command("upload")
def files_upload(path: Annotated[Path, typer.Argument(exists=True, dir_okay=False, readable=True,
                                                     help="A parquet or JSON Lines dataset.")],
                 purpose: Annotated[Purpose, typer.Option(help="What the rows are for: preference, prompts or sft.")]
                 ) -> None:
    """Upload a dataset; prints its file id (the same bytes uploaded twice give the same file)."""
    with handled():
        f = upload(make_client(timeout=600.0), path, purpose.value)
        err_console.print(f"uploaded {f.filename}: {f.rows} rows, {f.bytes_} bytes, purpose {f.purpose.value}")
        typer.echo(f.id)


@files_app.command("list")
def files_list(limit: Annotated[int, typer.Option(min=1, max=100)] = 20) -> None:
    """List the project's files, newest first."""
    with handled():
        page = ok(list_files.sync_detailed(client=make_client(), limit=limit))
    show_table(("id", "purpose", "rows", "bytes", "filename", "created"),
               [(f.id, f.purpose.value, str(f.rows), str(f.bytes_), f.filename, _when(f.created_at))
                for f in page.data])


# --- jobs -----------------------------------------------------------------------------------------

def job_body(config: Path | None, method: str | None, model: str | None, training_file: str | None,
             validation_file: str | None = None, overrides: list[str] | None = None) -> dict[str, Any]:
    """A JobCreate body: the YAML file's fields, then the flags on top."""
    body: dict[str, Any] = {}
    if config is not None:
        try:
            loaded = yaml.safe_load(config.read_text()) or {}
        except (OSError, yaml.YAMLError) as e:
            raise CliError("Invalid config", f"{config}: {e}") from e
        if not isinstance(loaded, dict):
            raise CliError("Invalid config", f"{config}: expected a mapping of JobCreate fields")
        body = loaded
    method_spec = body.get("method") or {}
    if not isinstance(method_spec, dict):
        raise CliError("Invalid config", "`method` must be a mapping (type, hyperparameters, ...)", "method")
    if method:
        method_spec["type"] = method
    if overrides:
        method_spec["overrides"] = [*method_spec.get("overrides", []), *overrides]
    body["method"] = method_spec
    for name, value in (("model", model), ("training_file", training_file), ("validation_file", validation_file)):
        if value:
            body[name] = value
    for name in ("model", "training_file"):
        if not body.get(name):
            raise CliError("Missing field", f"set --{name.replace('_', '-')} or `{name}:` in the config", name)
    if not method_spec.get("type"):
        raise CliError("Missing field", "set --method or `method.type` in the config", "method.type")
    return body


def submit(client: AuthenticatedClient, body: dict[str, Any]) -> JobPublic:
    """POST the job (with an idempotency key, so a retry never creates a second one)."""
    try:
        parsed = JobCreate.from_dict(body)
    except (KeyError, ValueError, TypeError, AttributeError) as e:
        raise CliError("Invalid job", f"{type(e).__name__}: {e}") from e
    return ok(create_job.sync_detailed(client=client, body=parsed, idempotency_key=str(uuid.uuid4())))


@jobs_app.command("create")
def jobs_create(
        method: Annotated[str | None, typer.Option(help=f"One of {', '.join(METHODS)} (or `method.type` in "
                                                        "--config).")] = None,
        config: Annotated[Path | None, typer.Option(exists=True, dir_okay=False, help=(
            "YAML with JobCreate fields: model, training_file, method (type, hyperparameters, reward, teacher), "
            "seed, ..."))] = None,
        model: Annotated[str | None, typer.Option(help="Base model: a model id, hub id or directory.")] = None,
        training_file: Annotated[str | None, typer.Option(help="A file id (see `keel files upload`).")] = None,
        validation_file: Annotated[str | None, typer.Option(help="A held-out file id.")] = None,
        override: Annotated[list[str] | None, typer.Option("--set", help=(
            "A VERL-style override, e.g. actor.ppo_epochs=2 (repeatable)."))] = None,
        watch: Annotated[bool, typer.Option("--watch", help="Follow the job until it finishes.")] = False) -> None:
    """Create a training job; prints its id."""
    with handled():
        client = make_client()
        job = submit(client, job_body(config, method, model, training_file, validation_file, override))
        err_console.print(f"created {job.method.type_} job {job.id} ({job.status.value})")
        typer.echo(job.id)
        if watch:
            final = watch_job(client, job.id)
            raise typer.Exit(0 if final.status.value == "succeeded" else 1)


def plan_job(client: AuthenticatedClient, body: dict[str, Any]) -> dict[str, Any]:
    """The memory plan of a job spec (`POST /v1/jobs?dry_run=true`): nothing is created."""
    response = client.get_httpx_client().post("/v1/jobs", params={"dry_run": "true"}, json=body)
    if response.status_code == 200:
        return response.json()
    return ok(Response(status_code=HTTPStatus(response.status_code), content=response.content,
                       headers=response.headers, parsed=None))


def _mib(n: Any) -> str:
    return f"{n / 2**20:,.0f} MiB" if isinstance(n, int | float) else "-"


@jobs_app.command("plan")
def jobs_plan(
        method: Annotated[str | None, typer.Option(help=f"One of {', '.join(METHODS)} (or `method.type` in "
                                                        "--config).")] = None,
        config: Annotated[Path | None, typer.Option(exists=True, dir_okay=False, help=(
            "YAML with JobCreate fields, as for `keel jobs create`."))] = None,
        model: Annotated[str | None, typer.Option(help="Base model: a model id, hub id or directory.")] = None,
        training_file: Annotated[str | None, typer.Option(help="A file id (see `keel files upload`).")] = None,
        override: Annotated[list[str] | None, typer.Option("--set", help=(
            "A VERL-style override, e.g. actor.ppo_epochs=2 (repeatable)."))] = None,
        as_json: Annotated[bool, typer.Option("--json", help="Print the plan as JSON.")] = False) -> None:
    """Estimate a job's memory per worker without creating it; exit 1 when it will not fit."""
    with handled():
        plan = plan_job(make_client(), job_body(config, method, model, training_file, None, override))
    if as_json:
        console.print_json(json.dumps(plan))
    else:
        keys = ("weights_bytes", "gradients_bytes", "optimizer_bytes", "activations_bytes", "total_bytes",
                "host_bytes")
        rows = [(name, *(_mib(mem.get(k)) for k in keys)) for name, mem in plan.get("roles", {}).items()]
        if plan.get("per_worker"):
            rows.append(("per worker", *(_mib(plan["per_worker"].get(k)) for k in keys)))
        show_table(("role", "weights", "gradients", "optimizer", "activations", "total", "host"), rows)
        verdict = {True: "fits", False: "will not fit", None: "fit not checked"}[plan.get("fits")]
        console.print(f"{plan.get('device')} x {plan.get('num_workers')} worker(s): {verdict}. {plan.get('detail')}"
                      + (f" (param: {plan['param']})" if plan.get("param") else ""), highlight=False)
    if plan.get("fits") is False:
        raise typer.Exit(1)


@jobs_app.command("list")
def jobs_list(limit: Annotated[int, typer.Option(min=1, max=100)] = 20,
              status: Annotated[str | None, typer.Option(help="Only jobs in this status.")] = None) -> None:
    """List the project's jobs, newest first."""
    from keel_client.models import ListJobsStatusType0

    with handled():
        kwargs = {"status": ListJobsStatusType0(status)} if status else {}
        page = ok(list_jobs.sync_detailed(client=make_client(), limit=limit, **kwargs))
    rows = []
    for j in page.data:
        p = j.progress
        progress = f"{p.step or 0}/{p.total_steps}" if isinstance(p.total_steps, int) else "-"
        rows.append((j.id, j.method.type_, j.status.value, progress, _short(j.model), j.output_model or "",
                     _when(j.created_at)))
    show_table(("id", "method", "status", "progress", "model", "output model", "created"), rows)


@jobs_app.command("get")
def jobs_get(job_id: str) -> None:
    """Show one job as JSON."""
    with handled():
        job = ok(retrieve_job.sync_detailed(job_id, client=make_client()))
    console.print_json(json.dumps(job.to_dict()))


@jobs_app.command("cancel")
def jobs_cancel(job_id: str) -> None:
    """Cancel a job (queued: at once; running: it stops at the next step)."""
    with handled():
        job = ok(cancel_job.sync_detailed(job_id, client=make_client(), idempotency_key=str(uuid.uuid4())))
    typer.echo(f"{job.id} {job.status.value}")


@jobs_app.command("pause")
def jobs_pause(job_id: str) -> None:
    """Pause a job: it checkpoints its last finished step and gives its resources back (queued: at once)."""
    with handled():
        job = ok(pause_job.sync_detailed(job_id, client=make_client(), idempotency_key=str(uuid.uuid4())))
    typer.echo(f"{job.id} {job.status.value}")


@jobs_app.command("resume")
def jobs_resume(job_id: str) -> None:
    """Resume a paused job from the checkpoint it paused at."""
    with handled():
        job = ok(resume_job.sync_detailed(job_id, client=make_client(), idempotency_key=str(uuid.uuid4())))
    typer.echo(f"{job.id} {job.status.value}")


@jobs_app.command("watch")
def jobs_watch(job_id: str) -> None:
    """Follow a job live: progress bar (step/total, ETA), key metrics, logs; exit 1 unless it succeeds."""
    with handled():
        job = watch_job(make_client(), job_id)
    raise typer.Exit(0 if job.status.value == "succeeded" else 1)


def _metrics_text(values: dict[str, Any], method: str) -> str:
    keys = [k for k in KEY_METRICS.get(method, ()) if k in values] or sorted(values)[:3]
    return "  ".join(f"{k}={_num(values[k])}" for k in keys)


class _PlainProgress:
    """`watch` output where the console is not a terminal (logs, CI): a line per ~5% of the run."""

    def __init__(self, out: Console, label: str) -> None:
        self.out, self.label = out, label
        self.first: tuple[float, int] | None = None  # (time, step) of the first metrics: the pace excludes loading
        self.last_line, self.last_step = 0.0, 0

    def metrics(self, step: int, total: int | None, text: str) -> None:
        now = time.monotonic()
        self.first = self.first or (now, step)
        every = max(1, (total or 20) // 20)
        if not (step == total or step - self.last_step >= every or now - self.last_line >= 30):
            return
        eta = ""
        if total and step > self.first[1]:
            eta = f" eta {(now - self.first[0]) / (step - self.first[1]) * (total - step):.0f}s"
        self.out.print(f"{self.label} step {step}/{total or '?'}{eta}  {text}", highlight=False, soft_wrap=True)
        self.last_line, self.last_step = now, step


def watch_job(client: AuthenticatedClient, job_id: str, *, label: str | None = None,
              out: Console | None = None) -> JobPublic:
    """Draw a job's progress from its event stream until it finishes; returns the final job.

    On a terminal: a live bar with step/total, ETA, elapsed time and the method's key metrics; elsewhere
    plain lines. Logs, warnings, errors and checkpoints are printed as they come."""
    out = out or err_console
    job = ok(retrieve_job.sync_detailed(job_id, client=client))
    method = job.method.type_
    label = label or method
    columns = (TextColumn("[bold]{task.description}"), BarColumn(), MofNCompleteColumn(),
               TextColumn("eta"), TimeRemainingColumn(), TimeElapsedColumn(), TextColumn("{task.fields[metrics]}"))
    plain = None if out.is_terminal else _PlainProgress(out, label)
    with Progress(*columns, console=out, disable=plain is not None) as progress:
        task = progress.add_task(f"{label} {job.status.value}", total=job.progress.total_steps,
                                 completed=job.progress.step or 0, metrics="")
        for event in stream_events(client, job_id):
            data, kind = event.data.to_dict(), event.type_.value
            if kind == "job.metrics":
                step, total = data.get("step") or 0, data.get("total_steps")
                text = _metrics_text(data.get("values") or {}, method)
                progress.update(task, completed=step, total=total, metrics=text)
                if plain is not None:
                    plain.metrics(step, total, text)
            elif kind in ("job.status", "job.done"):
                progress.update(task, description=f"{label} {data.get('status', '')}")
                if plain is not None and kind == "job.status":
                    out.print(f"{label} {data.get('status', '')}", highlight=False)
            elif kind == "job.log":
                progress.console.print(f"[dim]{data.get('message', '')}[/]", highlight=False)
            elif kind == "job.warning":
                progress.console.print(f"[yellow]warning {data.get('code')}: {data.get('message')}[/]")
            elif kind == "job.error":
                progress.console.print(f"[red]error {data.get('code')}: {data.get('message')}[/]")
            elif kind == "job.checkpoint":
                progress.console.print(f"[dim]checkpoint {data.get('checkpoint_id')} at step {data.get('step')}[/]")
    final = ok(retrieve_job.sync_detailed(job_id, client=client))
    if final.status.value == "succeeded":
        out.print(f"[green]{job_id} succeeded[/]" + (f": output model {final.output_model}" if final.output_model
                                                      else ""))
    else:
        error = f": {final.error.code}: {final.error.message}" if final.error else ""
        out.print(f"[red]{job_id} {final.status.value}{error}[/]", highlight=False)
    return final


# --- downloads ------------------------------------------------------------------------------------

def _downloaded(fetch, what: str, out_dir: Path) -> None:
    """Run an SDK download (`keel_client.download_*`) into `out_dir`; a refusal or an unsafe archive
    becomes a CliError."""
    try:
        files = fetch()
    except UnsafeArchive as e:
        raise CliError("Unsafe archive", str(e)) from None
    except DownloadError as e:
        problem = e.problem
        raise CliError(problem.get("title") or f"HTTP {e.status}", problem.get("detail") or str(e),
                       problem.get("param") if isinstance(problem.get("param"), str) else None) from None
    err_console.print(f"{what}: {len(files)} files in {out_dir}", highlight=False)


@checkpoints_app.command("download")
def checkpoints_download(
        checkpoint_id: str,
        out_dir: Annotated[Path, typer.Argument(file_okay=False, help="Directory to unpack into.")],
        role: Annotated[str, typer.Option(help="actor (the policy / the model) or critic (PPO's value model).")]
        = "actor",
        merged: Annotated[bool, typer.Option(help="LoRA: the merged full weights, not the adapter.")] = False,
        training_state: Annotated[bool, typer.Option(help="Also the optimizer, RNG and loop state, under "
                                                          "training_state/.")] = False) -> None:
    """Download a checkpoint as a Hugging Face directory into DIR."""
    with handled():
        _downloaded(lambda: download_checkpoint(make_client(), checkpoint_id, out_dir, role=role, merged=merged,
                                                include_training_state=training_state), checkpoint_id, out_dir)


@models_app.command("download")
def models_download(
        model_id: str,
        out_dir: Annotated[Path, typer.Argument(file_okay=False, help="Directory to unpack into.")],
        merged: Annotated[bool, typer.Option(help="LoRA: the merged full weights, not the adapter.")] = False) -> None:
    """Download a model as a Hugging Face directory into DIR (a LoRA model: its adapter)."""
    with handled():
        _downloaded(lambda: download_model(make_client(), model_id, out_dir, merged=merged), model_id, out_dir)


# --- formatting -----------------------------------------------------------------------------------

def show_table(headers: tuple[str, ...], rows: list[tuple[str, ...]]) -> None:
    """A table on a terminal; tab-separated lines (header first) when piped, so ids are never cut."""
    if not console.is_terminal:
        for row in (headers, *rows):
            typer.echo("\t".join(row))
        return
    table = Table(*headers)
    for row in rows:
        table.add_row(*row)
    console.print(table)


def _num(value: Any) -> str:
    return f"{value:.4g}" if isinstance(value, float) else str(value)


def _when(unix: int | None) -> str:
    return time.strftime("%Y-%m-%d %H:%M", time.localtime(unix)) if unix else ""


def _short(model: str, width: int = 40) -> str:
    return model if len(model) <= width else "..." + model[-(width - 3):]
