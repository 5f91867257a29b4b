"""pyproject's floors for torch and transformers are at least the first release of every API the
engine imports from them (issue 28: `torch>=2.4` predated the public FSDP2 and DTensor modules)."""

from __future__ import annotations

import importlib
import re
import tomllib
from pathlib import Path

import pytest
from packaging.version import Version

# API the engine uses -> (module, attribute, the first release that has it there).
TORCH_APIS = {
    "fully_shard and its policies, public (engine/runtime/sharding.py)": ("torch.distributed.fsdp", "fully_shard", "2.6"),
    "FSDPModule (engine/runtime/sharding.py)": ("torch.distributed.fsdp", "FSDPModule", "2.6"),
    "CPUOffloadPolicy (engine/runtime/sharding.py)": ("torch.distributed.fsdp", "CPUOffloadPolicy", "2.6"),
    "DTensor, public (engine/runtime/sharding.py, engine/schedule.py)": ("torch.distributed.tensor", "DTensor", "2.5"),
    "torch.amp.GradScaler(device) (engine/runtime/precision.py)": ("torch.amp", "GradScaler", "2.3"),
    # varlen_attn arrived in 2.9 (is_causal only); window_size in 2.10; enable_gqa is in 2.12's docs.
    "varlen_attn(window_size=, enable_gqa=) (engine/packing.py)": ("torch.nn.attention.varlen", "varlen_attn", "2.12"),
}
TRANSFORMERS_APIS = {
    "from_pretrained(dtype=) (engine/models/loading.py)": ("transformers", "PreTrainedModel", "4.56"),
    "masking_utils.AttentionMaskInterface (engine/packing.py, engine/runtime/ulysses.py)":
        ("transformers.masking_utils", "AttentionMaskInterface", "4.53"),
    "AttentionInterface (engine/packing.py)": ("transformers", "AttentionInterface", "4.48"),
}


def _floor(package: str) -> Version:
    deps = tomllib.loads(Path(__file__).parents[1].joinpath("pyproject.toml").read_text())["project"]["dependencies"]
    for dep in deps:
        found = re.fullmatch(rf"{package}>=([0-9.]+)", dep.strip())
        if found:
            return Version(found.group(1))
    raise AssertionError(f"pyproject.toml has no {package}>= floor")


@pytest.mark.parametrize(("package", "apis"), [("torch", TORCH_APIS), ("transformers", TRANSFORMERS_APIS)])
def test_floor_is_at_least_the_newest_api_used(package, apis):
    floor = _floor(package)
    for what, (module, attribute, first) in apis.items():
        assert hasattr(importlib.import_module(module), attribute), what  # the table names real APIs
        assert floor >= Version(first), f"{package}>={floor} predates {what} ({first})"


def test_the_varlen_kernel_takes_the_arguments_packing_passes():
    import inspect

    from torch.nn.attention.varlen import varlen_attn

    assert {"window_size", "enable_gqa", "scale"} <= set(inspect.signature(varlen_attn).parameters)
