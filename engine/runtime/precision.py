"""Mixed precision: trained weights and optimizer state stay float32 (the master copy); forwards run
in the compute dtype `model.dtype` under `torch.autocast`.

Why not bf16 parameters: bf16 keeps 8 significant bits, so an AdamW update smaller than about 0.4%
of a weight rounds back to the old value. At the actor's lr 1e-6 that is nearly every update: a job
with bf16 parameters silently does not learn. With float32 masters the update lands in full
precision and autocast still runs the matmuls in bf16.

`float16` has too few exponent bits for small gradients, so it adds dynamic loss scaling
(`torch.amp.GradScaler`): the loss is multiplied before backward, gradients are unscaled before
clipping, and a step whose gradients overflowed is skipped while the scale shrinks. It works on CPU
too (autocast and the scaler support it there), but CPU float16 kernels are slow: use bfloat16 on CPU.

Models that are not trained (reference policy, reward model, teacher) are loaded directly in the
compute dtype: they need no master copy. FSDP2 sharding takes the same choice from
`compute_dtype` for its `MixedPrecisionPolicy(param_dtype=...)`.
"""

from __future__ import annotations

import contextlib
import math
from collections.abc import Callable, Iterable
from typing import Any

import torch

COMPUTE_DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}


def compute_dtype(name: str) -> torch.dtype:
    """The torch dtype of the `model.dtype` value `name` (the dtype forwards compute in)."""
    try:
        return COMPUTE_DTYPES[name]
    except KeyError:
        raise ValueError(f"unknown dtype {name!r}; expected one of {sorted(COMPUTE_DTYPES)}") from None


def autocast(device: torch.device | str, name: str) -> contextlib.AbstractContextManager[Any]:
    """Autocast to `name` on `device`'s type; a no-op for float32."""
    dtype = compute_dtype(name)
    if dtype == torch.float32:
        return contextlib.nullcontext()
    return torch.autocast(device_type=torch.device(device).type, dtype=dtype)


class Precision:
    """The compute dtype of one trained model on one device: autocast, loss scaling (float16 only)
    and the clipped optimizer step.

    Usage per optimizer step: forwards inside `with precision.autocast():`, `precision.backward(loss)`
    per micro-batch, then `precision.step(optimizer, params, grad_clip)` (after any all-reduce).
    """

    def __init__(self, name: str, device: torch.device | str) -> None:
        self.name = name
        self.device = torch.device(device)
        self.dtype = compute_dtype(name)
        self.scaler = torch.amp.GradScaler(self.device.type) if self.dtype == torch.float16 else None
        self._loss_nonfinite = False

    def autocast(self) -> contextlib.AbstractContextManager[Any]:
        return autocast(self.device, self.name)

    def backward(self, loss: torch.Tensor) -> None:
        """`loss.backward()`, scaled when loss scaling is on."""
        if self.scaler is None:
            loss.backward()
            return
        # A gradient overflow is the scaler's business; a non-finite loss is a real failure.
        self._loss_nonfinite |= not bool(torch.isfinite(loss.detach()).all())
        self.scaler.scale(loss).backward()

    def step(self, optimizer: torch.optim.Optimizer, params: Iterable[torch.nn.Parameter],
             grad_clip: float, any_worker: Callable[[bool], bool] | None = None) -> tuple[float, bool, bool]:
        """Unscale, clip to `grad_clip` (0: no clipping) and step.

        Args:
            any_worker: with several data-parallel workers, `flag -> whether it is set on any
                worker` (a collective, called once per step in float16 on every worker). A
                non-finite loss is seen by one worker only; if it alone stopped training, the
                others would wait for it in the next gradient all-reduce until the timeout.

        Returns:
            `(grad_norm, stepped, nonfinite)`: `stepped` is False when the gradient was not finite
            (the weights are untouched); `nonfinite` says that was a failure, not a float16
            overflow the scaler absorbs by shrinking its scale (then the step is just skipped).
            A failure on any worker skips the step on every worker and leaves the scale alone
            (the step is rolled back).
        """
        max_norm = grad_clip if grad_clip > 0 else math.inf
        if self.scaler is None:
            norm = float(torch.nn.utils.clip_grad_norm_(list(params), max_norm))
            stepped = math.isfinite(norm)
            if stepped:
                optimizer.step()
            return norm, stepped, not stepped
        nonfinite, self._loss_nonfinite = self._loss_nonfinite, False
        if any_worker is not None:
            nonfinite = any_worker(nonfinite)
        if nonfinite:
            return math.nan, False, True
        self.scaler.unscale_(optimizer)
        norm = float(torch.nn.utils.clip_grad_norm_(list(params), max_norm))
        self.scaler.step(optimizer)  # skipped by the scaler when unscale_ found inf/NaN
        self.scaler.update()
        return norm, math.isfinite(norm), False

    # The scaler's state is part of a checkpoint (and of a rollback snapshot) for exact resume.
    def state_dict(self) -> dict[str, Any]:
        return self.scaler.state_dict() if self.scaler is not None else {}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        if self.scaler is not None and state:
            self.scaler.load_state_dict(state)
