"""`keel demo`: the whole offline-RLHF pipeline on a running service, small enough for a laptop CPU.

SFT on arithmetic answers -> a Bradley-Terry reward model (from the SFT model) on polite/rude pairs ->
that reward model distilled into a smaller LoRA student -> PPO of the SFT model against the student.
Each step's output model id feeds the next job, each job is watched live, and a summary table ends it.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.table import Table

from keel_cli.client import (
    KEY_METRICS,
    CliError,
    base_url,
    console,
    err_console,
    fail,
    handled,
    make_client,
    submit,
    upload,
    watch_job,
)

_SUPERVISED = {"max_token_len_per_gpu": 1024}
PIPELINE: list[dict[str, Any]] = [
    {"name": "sft", "method": {"type": "sft", "hyperparameters": {
        **_SUPERVISED, "data": {"train_batch_size": 16, "max_prompt_length": 32, "max_response_length": 32},
        "optim": {"lr": 3e-3}, "trainer": {"total_training_steps": 20, "save_freq": 10, "test_freq": 10}}},
     "model": "asset:model", "train": "sft_train", "val": "sft_val"},
    {"name": "reward_model", "method": {"type": "reward_model", "hyperparameters": {
        **_SUPERVISED, "data": {"train_batch_size": 16, "max_length": 96},
        "optim": {"lr": 1e-3, "lr_warmup_steps_ratio": 0.1, "lr_scheduler_type": "cosine"},
        "trainer": {"total_training_steps": 12, "save_freq": 6}}},
     "model": "output:sft", "train": "preference_train", "val": "preference_val"},
    {"name": "rm_distill", "method": {"type": "rm_distill", "teacher": "output:reward_model", "hyperparameters": {
        **_SUPERVISED, "data": {"train_batch_size": 16, "max_length": 96},
        "optim": {"lr": 3e-3, "lr_warmup_steps_ratio": 0.1, "lr_scheduler_type": "cosine"},
        "trainer": {"total_training_steps": 24, "save_freq": 12}}},
     "model": "asset:small_model", "train": "preference_train", "val": "preference_val"},
    {"name": "ppo", "method": {"type": "ppo", "reward": {"model": "output:rm_distill"}, "hyperparameters": {
        "data": {"train_batch_size": 4, "max_prompt_length": 32, "max_response_length": 8},
        "actor": {"ppo_mini_batch_size": 2, "ppo_epochs": 1, "optim": {"lr": 1e-4}},
        "rollout": {"n": 2}, "trainer": {"total_training_steps": 6, "save_freq": 3}}},
     "model": "output:sft", "train": "prompts_train"},
]
"""Tiny hyperparameters (the engine tests' sizes): each job takes seconds of compute on 2 CPU cores.
`asset:NAME` is a demo asset path, `output:STEP` the output model id of an earlier step.

PPO runs without a validation file: its end-of-run check compares greedy validation rewards with
sampled training rewards against a fixed 0.05 margin, and on 6 steps of raw reward-model scores it
warned `overfit` (a gap of about 2) on every demo run, a warning a newcomer cannot act on."""

PURPOSES = {"sft_train": "sft", "sft_val": "sft", "preference_train": "preference", "preference_val": "preference",
            "prompts_train": "prompts", "prompts_val": "prompts"}


def default_assets_dir() -> Path:
    """Under the service's first model root (`keel demo` runs beside `keel up`, with the same settings)."""
    from core.config import settings

    roots = settings.model_roots
    return (Path(roots[0]) if roots else settings.home / "models") / "keel-demo"


def _resolve(value: Any, assets: dict[str, str], outputs: dict[str, str]) -> Any:
    if isinstance(value, dict):
        return {k: _resolve(v, assets, outputs) for k, v in value.items()}
    if isinstance(value, str) and value.startswith("asset:"):
        return assets[value.removeprefix("asset:")]
    if isinstance(value, str) and value.startswith("output:"):
        return outputs[value.removeprefix("output:")]
    return value


def run_demo(assets_dir: Path) -> list[dict[str, Any]]:
    """Build and upload the assets, run the pipeline; returns one summary row per job."""
    from engine.demo import build_demo_assets

    client = make_client()
    err_console.print(f"building demo assets in {assets_dir} ...")
    assets = build_demo_assets(assets_dir)
    files = {name: upload(client, Path(assets[name]), purpose).id for name, purpose in PURPOSES.items()}
    for name, file_id in files.items():
        err_console.print(f"uploaded {name}: {file_id}", highlight=False)
    outputs: dict[str, str] = {}
    rows: list[dict[str, Any]] = []
    for step in PIPELINE:
        body = {"model": _resolve(step["model"], assets, outputs), "training_file": files[step["train"]],
                "validation_file": files[step["val"]] if "val" in step else None,
                "method": _resolve(step["method"], assets, outputs),
                "suffix": f"demo-{step['name'].replace('_', '-')}", "metadata": {"demo": "true"}}
        started = time.monotonic()
        job = submit(client, body)
        err_console.print(f"\n[bold]{step['name']}[/]: job {job.id} on {body['model']}")
        final = watch_job(client, job.id, label=step["name"])
        metrics = final.latest_metrics.to_dict()
        rows.append({"step": step["name"], "job": final.id, "status": final.status.value,
                     "metrics": {k: metrics[k] for k in KEY_METRICS[step["name"]] if k in metrics},
                     "seconds": time.monotonic() - started, "output_model": final.output_model})
        if final.status.value != "succeeded" or not final.output_model:
            break
        outputs[step["name"]] = final.output_model
    return rows


def print_summary(rows: list[dict[str, Any]]) -> None:
    """A table on a terminal; plain lines elsewhere (so ids and metrics are never cut)."""
    if not console.is_terminal:
        for r in rows:
            metrics = "  ".join(f"{k}={v:.4g}" for k, v in r["metrics"].items())
            console.print(f"{r['step']:<13}{r['status']:<10}{r['seconds']:>5.0f} s  {r['job']} -> "
                          f"{r['output_model'] or '-'}\n{'':13}{metrics}", highlight=False, soft_wrap=True)
        return
    table = Table("step", "status", "duration", "key metrics", title="keel demo")
    table.add_column("job / output model", no_wrap=True)
    for r in rows:
        style = "green" if r["status"] == "succeeded" else "red"
        table.add_row(r["step"], f"[{style}]{r['status']}[/]", f"{r['seconds']:.0f} s",
                      "\n".join(f"{k}={v:.4g}" for k, v in r["metrics"].items()),
                      f"{r['job']}\n{r['output_model'] or '-'}")
    console.print(table)


def next_steps(rows: list[dict[str, Any]], url: str) -> str:
    """What to do after the demo: where PPO's model is and how to get it, the console, the docs."""
    lines = []
    ppo = next((r for r in rows if r["step"] == "ppo" and r["status"] == "succeeded"), None)
    if ppo is not None and ppo["output_model"]:
        model = ppo["output_model"]
        lines += [(f"PPO's policy is saved as model {model} (job {ppo['job']}). Download it as a Hugging Face "
                  "directory:"),
                  f"  keel models download {model} ./ppo-model",
                  "  or use it as the `model` of your next job (`keel models list` shows every model)."]
    lines += ["Next steps:",
              f"  console:  {url}/  (paste the API key from .keel/api_key): charts, files, models, new jobs",
              f"  API docs: {url}/docs",
              "  keel jobs list, keel jobs logs JOB, keel models download MODEL DIR"]
    return "\n".join(lines)


def demo(assets_dir: Annotated[Path | None, typer.Option(
        help="Where to build the demo model and data; must be under one of the service's model roots "
             "(default: <first model root, or KEEL_HOME/models>/keel-demo).")] = None) -> None:
    """Run the whole pipeline (SFT -> reward model -> distilled RM -> PPO) on the demo assets."""
    started = time.monotonic()
    with handled():
        rows = run_demo((assets_dir or default_assets_dir()).resolve())
        print_summary(rows)
        console.print(f"total {time.monotonic() - started:.0f} s\n")
        console.print(next_steps(rows, base_url()), highlight=False, soft_wrap=True)
        if len(rows) < len(PIPELINE) or rows[-1]["status"] != "succeeded":
            fail(CliError("Demo failed", f"step {rows[-1]['step']} ended {rows[-1]['status']}"))
