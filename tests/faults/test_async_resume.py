"""A PPO driver with a pipelined rollout (issue 33: `one_step_off`, `async`), and an on-policy
distillation driver (`distill_policy`, PPO's loop with a teacher role), SIGKILLed mid-run, then
resumed from its last checkpoint in a fresh process: it trains exactly as the uninterrupted run.

Each run is a real Ray driver process on the session's Ray cluster (one trainer worker; one rollout
worker for the pipelined modes). The killed driver dies after its step-2 checkpoint, in the pipelined
modes while the rollout worker is generating ahead; the checkpoint recorded the batches in flight,
so the resumed run trains on the very samples the uninterrupted run trained on (same metrics, same
weights to the bit). The distillation run's teacher is the demo policy with its weights perturbed.
"""

from __future__ import annotations

import json
import os
import pickle
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file

pytestmark = [pytest.mark.faults, pytest.mark.slow]

ROOT = Path(__file__).resolve().parents[2]
_DRIVER = """
import json, pickle, sys
from engine.methods.distill_policy import run_distill_policy
from engine.methods.ppo import run_ppo
from engine.rewards.rules import register_reward
from engine.runtime.cluster import connect
from engine.runtime.reporting import RecordingReporter

class Log(RecordingReporter):
    def metrics(self, step, values, **kw):
        super().metrics(step, values, **kw)
        with open(sys.argv[2], "a") as f:
            f.write(json.dumps({"step": step, **values}) + "\\n")

register_reward("fault_lower_half")(
    lambda response, ground_truth, *, response_ids, **_: sum(t < 512 for t in response_ids) / max(1, len(response_ids)))
with open(sys.argv[1], "rb") as f:
    request = pickle.load(f)
connect(request.ray_address)
(run_distill_policy if request.method == "distill_policy" else run_ppo)(request, Log())
"""
"""Runs the pickled request to the end, appending each step's metrics to a JSON-lines file."""

MODES = {"one_step_off": {"mode": "one_step_off", "colocate": False},
         "async": {"mode": "async", "max_staleness": 2, "partial": "continue", "colocate": False},
         "distill_policy": {}}
COMPARED = {"one_step_off": ("critic/score/mean", "actor/pg_loss", "rollout/staleness/mean", "rollout/staleness/max"),
            "distill_policy": ("critic/score/mean", "actor/pg_loss", "distill/reverse_kl/mean")}


def _request(assets: dict, out: Path, mode: str, ray_address: str, resume_from: str | None = None):
    from engine.config import DistillPolicyConfig, JobRequest, PPOConfig, Resources, build_config

    distill = mode == "distill_policy"
    cfg = build_config(DistillPolicyConfig if distill else PPOConfig, {
        "data": {"train_batch_size": 4, "max_prompt_length": 32, "max_response_length": 8},
        "actor": {"ppo_mini_batch_size": 2, "ppo_epochs": 1, "optim": {"lr": 1e-3}},
        "rollout": {"n": 2, **MODES[mode]},
        "algorithm": {"adv_estimator": "grpo"},
        "guardrails": {"rollback_kl": 100.0, "warn_kl": 100.0},
        "trainer": {"total_training_steps": 5, "save_freq": 2, "test_freq": -1},
    })
    return JobRequest(job_id=f"async-fault-{out.name}", method="distill_policy" if distill else "ppo", config=cfg,
                      model_path=assets["model"], training_file=assets["prompts_train"],
                      output_dir=str(out / "output"), checkpoint_dir=str(out / "checkpoints"), seed=11,
                      reward={} if distill else {"function": "fault_lower_half"},
                      teacher_path=assets["teacher"] if distill else None,
                      resources=Resources(rollout_workers=0 if distill else 1), ray_address=ray_address,
                      resume_from=resume_from)


def _start(request, out: Path) -> subprocess.Popen:
    out.mkdir(parents=True, exist_ok=True)
    (out / "request.pkl").write_bytes(pickle.dumps(request))
    env = {**os.environ, "RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER": "0", "RAY_USAGE_STATS_ENABLED": "0",
           "PYTHONPATH": os.pathsep.join(p for p in (str(ROOT), os.environ.get("PYTHONPATH")) if p)}
    log = open(out / "driver.log", "wb")  # noqa: SIM115 - the child holds it
    return subprocess.Popen([sys.executable, "-c", _DRIVER, str(out / "request.pkl"), str(out / "metrics.jsonl")],
                            cwd=ROOT, env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)


def _finish(proc: subprocess.Popen, out: Path, timeout: float = 400) -> None:
    rc = proc.wait(timeout=timeout)
    assert rc == 0, (out / "driver.log").read_text(errors="replace")[-4000:]


def _metrics(out: Path) -> dict[int, dict]:
    lines = (out / "metrics.jsonl").read_text().splitlines()
    return {row["step"]: row for row in map(json.loads, lines)}


@pytest.fixture(scope="module")
def assets(tmp_path_factory):
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from engine.demo import build_demo_assets

    out = build_demo_assets(tmp_path_factory.mktemp("async-fault-assets"))
    teacher = tmp_path_factory.mktemp("async-fault-teacher")
    model = AutoModelForCausalLM.from_pretrained(out["model"], dtype=torch.float32)
    generator = torch.Generator().manual_seed(0)
    with torch.no_grad():
        for p in model.parameters():
            p.add_(torch.randn(p.shape, generator=generator) * 0.05)
    model.save_pretrained(teacher)
    AutoTokenizer.from_pretrained(out["model"]).save_pretrained(teacher)
    return {**out, "teacher": str(teacher)}


@pytest.mark.parametrize("mode", sorted(MODES))
def test_sigkilled_run_resumes_exactly(assets, ray_cluster, tmp_path, mode):
    reference = tmp_path / "reference"
    _finish(_start(_request(assets, reference, mode, ray_cluster), reference), reference)

    killed = tmp_path / "killed"
    proc = _start(_request(assets, killed, mode, ray_cluster), killed)
    marker = killed / "checkpoints" / "step_2" / "COMPLETE"
    deadline = time.monotonic() + 400
    while not marker.exists():
        assert proc.poll() is None, (killed / "driver.log").read_text(errors="replace")[-4000:]
        assert time.monotonic() < deadline, "no step-2 checkpoint"
        time.sleep(0.05)
    os.killpg(proc.pid, signal.SIGKILL)  # a crash: nothing gets to clean up
    proc.wait(timeout=30)
    assert not (killed / "output" / "model.safetensors").exists()

    resumed = tmp_path / "resumed"
    _finish(_start(_request(assets, resumed, mode, ray_cluster, resume_from=str(marker.parent)), resumed), resumed)
    want, got = _metrics(reference), _metrics(resumed)
    assert sorted(got) == [3, 4, 5]
    for step in got:
        for name in COMPARED.get(mode, COMPARED["one_step_off"]):
            assert got[step][name] == want[step][name], (step, name)
    a, b = load_file(str(resumed / "output" / "model.safetensors")), load_file(str(reference / "output" / "model.safetensors"))
    assert a.keys() == b.keys()
    for key, value in b.items():
        assert torch.equal(a[key], value), f"{key} differs from the uninterrupted run"
