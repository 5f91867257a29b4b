"""The GPU check (`bench.gpu_check`) in its CPU tiny mode, in a Python environment without Ray.

The check is made for a bare GPU machine that has torch, transformers, peft, safetensors and numpy
and none of the service's packages. The subprocess here sees a copy of this environment's
site-packages without Ray, Celery, FastAPI, SQLAlchemy and pyarrow (so `import ray` fails exactly
as it does where Ray is not installed), runs SFT, reward-model and PPO steps through the engine's
in-process executor, and prints the JSON line whose fields are checked.
"""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
import sysconfig
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
ABSENT = ("ray", "celery", "fastapi", "sqlalchemy", "pyarrow")
"""Distributions the GPU machine does not have (by top-level name, case-insensitive)."""


def site_without(absent: tuple[str, ...], out: Path) -> Path:
    """A directory of links to every entry of this interpreter's site-packages except the packages
    (and their metadata) named in `absent`."""
    site = Path(sysconfig.get_paths()["purelib"])
    out.mkdir()
    for entry in site.iterdir():
        top = entry.name.split("-")[0].split(".")[0].lower()
        if top in absent or any(top.startswith(name + "_") for name in absent):
            continue
        (out / entry.name).symlink_to(entry)
    return out


PROBE = f"""
import importlib.util, sys
missing = {ABSENT!r}
assert not [m for m in missing if importlib.util.find_spec(m)], "a missing package is importable"
try:
    import ray
except ImportError:
    pass
else:
    raise SystemExit("ray is importable")
from bench.gpu_check import main
main(["--device", "cpu", "--tiny"])
"""


@pytest.mark.slow
def test_gpu_check_tiny_on_cpu_without_ray(tmp_path):
    site = site_without(ABSENT, tmp_path / "site")
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PYTHONHOME")}
    env.update(PYTHONPATH=os.pathsep.join([str(ROOT), str(site)]), OMP_NUM_THREADS="1",
               HF_HUB_OFFLINE="1", TRANSFORMERS_OFFLINE="1")
    # -S: no site module, so the real site-packages (which has Ray) is not on the path; -I would
    # drop PYTHONPATH too.
    proc = subprocess.run([sys.executable, "-S", "-c", PROBE], cwd=tmp_path, env=env, capture_output=True,
                          text=True, timeout=600, check=False)
    assert proc.returncode == 0, proc.stderr[-4000:]
    lines = [line for line in proc.stdout.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith("{"), proc.stdout[-2000:]  # one JSON line, nothing else
    out = json.loads(lines[0])

    assert out["bench"] == "gpu_check" and out["device"] == "cpu" and out["tiny"] is True
    assert out["executor"] == "local" and out["ray_imported"] is False
    assert out["model"]["architecture"] == "Qwen2ForCausalLM" and out["model"]["num_key_value_heads"] == 2
    assert out["knobs"]["model.dtype"] == "bfloat16" and out["knobs"]["model.use_remove_padding"] is True
    assert out["gemm_peak_tflops"] > 0
    for name in ("sft", "rm", "ppo"):
        phase = out["phases"][name]
        assert phase["steps"] == 2 and phase["timed_steps"] == 1, (name, phase)
        assert phase["tokens_per_s"] > 0 and phase["peak_memory_gib"] > 0, (name, phase)
        # A fraction of the GEMM peak measured a moment earlier; on a shared CPU the two moments see
        # different loads (3.3 seen for the tiny PPO against a 256² bf16 peak), so only an
        # order-of-magnitude slip (FLOPs or time miscounted) is an error.
        assert 0 < phase["mfu"] < 10, (name, phase)
    assert out["phases"]["ppo"]["gen_tokens_per_s"] > 0
    for name in ("sft", "ppo_actor"):
        change = out["weight_change"][name]
        assert change["elements"] == out["model"]["params"], change  # every weight is trained
        assert 0 <= change["bf16_changed_fraction"] <= change["changed_fraction"] <= 1, change
        # float32 masters take every lr-1e-6 update; bf16 weights would keep ~97% of them unchanged.
        assert change["master_dtype"] == "float32" and change["changed_fraction"] > 0.9, change
    packing = out["packing"]
    assert packing["tokens"] > 0 and math.isfinite(packing["max_abs_logprob_diff"])
    assert packing["max_abs_logprob_diff"] < 0.5, packing  # bf16 rounding, not different attention
