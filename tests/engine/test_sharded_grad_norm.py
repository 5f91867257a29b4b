"""The gradient norm of FSDP2-sharded gradients: `Precision.step` reads `clip_grad_norm_`'s result
with `float()`, which is the norm of the whole model on every worker (the DTensor it returns is
replicated), so no DTensor-to-float helper is needed (issue 28: `sharding.grad_norm` was unused)."""

from __future__ import annotations

import math

import pytest
import torch
import torch.distributed as dist
import torch.multiprocessing as mp

from engine.runtime import sharding
from engine.runtime.distributed import init_process_group, rendezvous
from engine.runtime.precision import Precision


def _model() -> torch.nn.Module:
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Linear(8, 8), torch.nn.Linear(8, 4))


def _norm(rank: int, endpoint: tuple[str, int], out: dict) -> None:
    init_process_group(rank, 2, endpoint, torch.device("cpu"))
    try:
        from torch.distributed.fsdp import fully_shard

        model = _model()
        fully_shard(model)
        torch.manual_seed(1)
        model(torch.randn(4, 8)).pow(2).sum().backward()
        params = list(model.parameters())
        assert sharding.is_sharded(model)
        norm, stepped, _ = Precision("float32", "cpu").step(torch.optim.SGD(params, lr=0.0), params, 0.0)
        out[rank] = (norm, stepped)
    finally:
        dist.destroy_process_group()


def test_precision_step_reports_the_whole_norm_of_sharded_gradients():
    model = _model()
    torch.manual_seed(1)
    model(torch.randn(4, 8)).pow(2).sum().backward()
    full = math.sqrt(sum(float(p.grad.pow(2).sum()) for p in model.parameters()))
    out = mp.Manager().dict()
    mp.spawn(_norm, args=(rendezvous(), out), nprocs=2)
    assert out[0][1] and out[1][1]
    # Each worker's shard alone would give a smaller norm; both report the whole model's.
    assert out[0][0] == out[1][0]
    assert out[0][0] == pytest.approx(full, rel=1e-6)
    assert not hasattr(sharding, "grad_norm")
