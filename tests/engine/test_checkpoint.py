"""engine.runtime.checkpoint: atomic directories, exact state round trip, latest complete step."""

from __future__ import annotations

import os
import random

import numpy as np
import pytest
import torch
from torch import nn

from engine.runtime.checkpoint import (
    COMPLETE,
    CheckpointError,
    atomic_dir,
    checkpoint_step,
    latest_checkpoint,
    load_extra,
    load_state,
    save_state,
    step_dir,
)


class Tiny(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.emb = nn.Embedding(7, 4)
        self.body = nn.Linear(4, 4)
        self.head = nn.Linear(4, 7, bias=False)
        self.head.weight = self.emb.weight  # tied, as in many LMs
        self.register_buffer("scale", torch.ones(4))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(torch.tanh(self.body(self.emb(x)) * self.scale))


def _make(seed: int = 0):
    torch.manual_seed(seed)
    model = Tiny()
    opt = torch.optim.AdamW(model.parameters(), lr=1e-2)
    sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda s: 1.0 / (1 + s))
    return model, opt, sched


def _train(model, opt, sched, steps: int) -> None:
    for _ in range(steps):
        x = torch.randint(0, 7, (3, 5))  # consumes the torch RNG: resume must restore it
        loss = nn.functional.cross_entropy(model(x).flatten(0, 1), x.flatten())
        opt.zero_grad()
        loss.backward()
        opt.step()
        sched.step()


def test_round_trip_continues_exactly(tmp_path):
    model, opt, sched = _make()
    _train(model, opt, sched, 3)
    with atomic_dir(step_dir(tmp_path, 3)) as tmp:
        save_state(tmp, modules={"model": model}, optimizers={"model": opt}, schedulers={"model": sched},
                   extra={"step": 3, "epoch": 0, "position": 6})
    random.random(), np.random.rand()
    _train(model, opt, sched, 2)
    expected = {k: v.clone() for k, v in model.state_dict().items()}
    expected_py, expected_np = random.random(), np.random.rand()

    fresh, fresh_opt, fresh_sched = _make(seed=123)
    extra = load_state(latest_checkpoint(tmp_path), modules={"model": fresh},
                       optimizers={"model": fresh_opt}, schedulers={"model": fresh_sched})
    assert extra == {"step": 3, "epoch": 0, "position": 6}
    assert fresh.head.weight is fresh.emb.weight
    random.random(), np.random.rand()
    _train(fresh, fresh_opt, fresh_sched, 2)
    for key, value in fresh.state_dict().items():
        assert torch.equal(value, expected[key]), key
    assert fresh_sched.get_last_lr() == sched.get_last_lr()
    assert (random.random(), np.random.rand()) == (expected_py, expected_np)


def test_frozen_parameters_are_not_saved(tmp_path):
    model, _, _ = _make()
    model.body.weight.requires_grad_(False)
    with atomic_dir(step_dir(tmp_path, 1)) as tmp:
        save_state(tmp, modules={"model": model}, optimizers={}, schedulers={}, extra={})
    from safetensors.torch import load_file

    saved = load_file(os.path.join(step_dir(tmp_path, 1), "model.safetensors"))
    assert "body.weight" not in saved and "body.bias" in saved and "scale" in saved
    other, _, _ = _make(seed=5)
    other.body.weight.requires_grad_(False)
    load_state(step_dir(tmp_path, 1), modules={"model": other})
    assert torch.equal(other.body.bias, model.body.bias)


def test_atomic_dir_removes_temp_on_error(tmp_path):
    with pytest.raises(RuntimeError), atomic_dir(step_dir(tmp_path, 2)) as tmp:
        open(os.path.join(tmp, "half"), "w").close()
        raise RuntimeError("crash mid-save")
    assert os.listdir(tmp_path) == []
    assert latest_checkpoint(tmp_path) is None


def test_latest_ignores_incomplete_and_replaces(tmp_path):
    for step in (2, 10):
        with atomic_dir(step_dir(tmp_path, step)) as tmp:
            save_state(tmp, modules={}, extra={"step": step})
    os.makedirs(step_dir(tmp_path, 30))  # a directory without COMPLETE (e.g. copied by hand, half)
    assert latest_checkpoint(tmp_path) == step_dir(tmp_path, 10)
    assert checkpoint_step(latest_checkpoint(tmp_path)) == 10
    with atomic_dir(step_dir(tmp_path, 10)) as tmp:  # saving the same step again replaces it
        save_state(tmp, modules={}, extra={"step": 10, "again": True})
    assert load_extra(step_dir(tmp_path, 10))["again"] is True
    assert os.path.isfile(os.path.join(step_dir(tmp_path, 10), COMPLETE))
    assert sorted(os.listdir(tmp_path)) == ["step_10", "step_2", "step_30"]
    assert latest_checkpoint(tmp_path / "missing") is None


def test_load_errors_are_clear(tmp_path):
    model, opt, _ = _make()
    with pytest.raises(CheckpointError) as info:
        load_state(tmp_path, modules={"model": model})
    assert info.value.code == "invalid_checkpoint"
    with atomic_dir(step_dir(tmp_path, 1)) as tmp:
        save_state(tmp, modules={"model": model}, extra={})
    with pytest.raises(CheckpointError):
        load_state(step_dir(tmp_path, 1), modules={"model": model}, optimizers={"model": opt})
    with pytest.raises(CheckpointError):
        load_state(step_dir(tmp_path, 1), modules={"model": nn.Linear(2, 2)})
