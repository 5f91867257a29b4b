"""The trainer itself: a model, its optimizer and the operations on them. A plain class: tests drive
it directly; `engine.interactive.host` wraps it with `ray.remote` once, as a named detached actor.

Every operation checks its whole payload first (`engine.interactive.datums`, against this model's
vocabulary and length), so bad input changes nothing. Gradients of `forward_backward` calls add up
until `optim_step`, which applies them with AdamW (created at the first step, over the trainable
parameters in `engine.schedule.build_optimizer`'s order; its hyperparameters may change every step)
and clears them.

Reproducing a Keel job: the model is loaded as a job loads it (`engine.models.load_policy`: the
global RNG seeded with `seed` first, so a LoRA adapter starts from the same weights; float32
masters, `dtype` for compute, dropout off, sequence packing on), and the optimizer step is the
job's (`engine.runtime.precision.Precision.step`: clip to `grad_clip_norm`, 0 = none, then AdamW).
"""

from __future__ import annotations

import math
import os
from typing import Any

import torch
from torch import nn

from engine import data as data_lib
from engine import models
from engine.config import ModelConfig, OptimConfig
from engine.errors import ConfigError
from engine.interactive import datums, state
from engine.interactive.forward import run_forward, token_log_probs
from engine.interactive.sampling import sample
from engine.interactive.spec import SessionSpec
from engine.rollout.sampling import row_seed
from engine.runtime.artifacts import Artifacts, join
from engine.runtime.precision import COMPUTE_DTYPES, Precision
from engine.schedule import build_optimizer

WEIGHTS_DIR = "weights"
"""`save_state` writes `<state_root>/weights/<name>`."""
SAMPLER_DIR = "sampler_weights"
"""`save_weights_for_sampler` writes `<state_root>/sampler_weights/<name>`."""


class TrainingSession:
    """One trainer. `start()` loads the model (the constructor only records the spec, so that a
    failure to load reaches the caller as the error it is, not as a dead actor); every other method
    starts it first if needed.

    Args:
        spec: what to load and where states go.
        num_threads: torch intra-op threads (None: torch's default).
        base: a LoRA trainer's frozen base model, shared with other trainers
            (`engine.interactive.lora_host`): the adapter goes on a view of it instead of a model of
            its own (`engine.models.lora_view`). None: the trainer loads its model itself.
    """

    def __init__(self, spec: SessionSpec, num_threads: int | None = None, base: nn.Module | None = None) -> None:
        self.spec = spec
        self.num_threads = num_threads
        self.base = base
        self.artifacts = Artifacts(dict(spec.storage_options or {}), spec.artifact_cache_dir)
        self.model: nn.Module | None = None
        self.optimizer: torch.optim.Optimizer | None = None
        self.step = 0
        self.sample_calls = 0
        self._reference: nn.Module | None = None
        self._sampler: tuple[str, nn.Module] | None = None

    # --- start-up ------------------------------------------------------------------------------

    def _model_config(self, lora: bool) -> ModelConfig:
        spec = self.spec
        if spec.dtype not in COMPUTE_DTYPES:
            raise ConfigError(f"dtype must be one of {', '.join(COMPUTE_DTYPES)}, got {spec.dtype!r}", param="dtype")
        if isinstance(spec.lora_rank, bool) or not isinstance(spec.lora_rank, int) or spec.lora_rank < 0:
            raise ConfigError(f"lora rank must be a non-negative integer, got {spec.lora_rank!r}", param="lora.rank")
        targets = spec.target_modules if isinstance(spec.target_modules, str) else tuple(spec.target_modules)
        return ModelConfig(dtype=spec.dtype, lora_rank=spec.lora_rank if lora else 0, lora_alpha=spec.lora_alpha,
                           target_modules=targets)

    def _load(self, path: str, lora: bool, trainable: bool) -> nn.Module:
        roots = tuple(self.spec.allowed_roots) or None
        local = self.artifacts.stage(path)
        return models.load_policy(local, self._model_config(lora), trainable=trainable,
                                  allowed_roots=roots if local == path else None).to(self.device)

    def start(self, restore_from: str | None = None) -> dict[str, Any]:
        """Load the model (once), then, given `restore_from`, the state saved there (weights,
        optimizer, step). Returns `{"vocab_size", "max_length", "step"}`."""
        if self.model is None:
            if self.num_threads:
                torch.set_num_threads(self.num_threads)
            self.device = (torch.device("cuda", 0) if self.spec.num_gpus > 0 and torch.cuda.is_available()
                           else torch.device("cpu"))
            self.precision = Precision(self._model_config(True).dtype, self.device)
            torch.manual_seed(self.spec.seed)  # the LoRA adapter's initial weights, as a job seeds them
            local = self.artifacts.stage(self.spec.model_path)
            self.tokenizer = models.load_tokenizer(local)
            if self.base is None:
                self.model = self._load(self.spec.model_path, lora=True, trainable=True)
            else:
                adapter = local if os.path.isfile(os.path.join(local, "adapter_config.json")) else None
                self.model = models.lora_view(self.base, self._model_config(True), adapter).to(self.device)
            self.model.train()
            self.params = [p for p in self.model.parameters() if p.requires_grad]
            head = (self.model.get_base_model() if models.is_lora(self.model) else self.model).get_output_embeddings()
            self.vocab_size = int(head.weight.shape[0]) if head is not None else int(self.model.config.vocab_size)
            self.max_length = getattr(self.model.config, "max_position_embeddings", None)
            # An adapter the trainer did not create is part of the reference: only a fresh one can be
            # switched off to get the starting policy back.
            self._fresh_lora = models.is_lora(self.model) and not os.path.isfile(
                os.path.join(local, "adapter_config.json"))
        if restore_from is not None:
            self._load_state(restore_from, optimizer=True, param="restore_from")
        return {"vocab_size": self.vocab_size, "max_length": self.max_length, "step": self.step}

    # --- dispatch ------------------------------------------------------------------------------

    def run(self, op: str, payload: dict[str, Any]) -> dict[str, Any]:
        """Check `payload`, then run `op` on it (see `engine.interactive.datums.OPERATIONS`)."""
        datums.parse(op, payload)  # shape errors before the model is even loaded
        self.start()
        parsed = datums.parse(op, payload, vocab_size=self.vocab_size, max_length=self.max_length)
        return getattr(self, f"_{op}")(parsed)

    # --- operations ----------------------------------------------------------------------------

    def _forward_backward(self, request: datums.ForwardRequest) -> dict[str, Any]:
        return run_forward(self.model, request, device=self.device, precision=self.precision, backward=True,
                           reference=self._reference_log_probs)

    def _forward(self, request: datums.ForwardRequest) -> dict[str, Any]:
        return run_forward(self.model, request, device=self.device, precision=self.precision, backward=False,
                           reference=self._reference_log_probs)

    def _optim_step(self, adam: dict[str, float]) -> dict[str, Any]:
        betas = (adam["beta1"], adam["beta2"])
        if self.optimizer is None:
            self.optimizer = build_optimizer(self.model, OptimConfig(lr=adam["learning_rate"], betas=betas,
                                                                     weight_decay=adam["weight_decay"]))
        for group in self.optimizer.param_groups:
            group.update(lr=adam["learning_rate"], betas=betas, eps=adam["eps"], weight_decay=adam["weight_decay"])
        norm, stepped, _ = self.precision.step(self.optimizer, self.params, adam["grad_clip_norm"])
        self.optimizer.zero_grad(set_to_none=True)
        self.step += 1
        metrics: dict[str, float | None] = {"grad_norm": norm if math.isfinite(norm) else None,
                                            "learning_rate": adam["learning_rate"]}
        if not stepped:
            metrics["skipped"] = 1.0  # a non-finite gradient: the weights were left as they were
        return {"step": self.step, "metrics": metrics, "tokens": 0}

    def _sample(self, request: datums.SampleRequest) -> dict[str, Any]:
        model = self.model if request.sampler_path is None else self._sampler_model(request.sampler_path)
        prompts = [p if isinstance(p, list) else data_lib.prompt_token_ids(self.tokenizer, p)
                   for p in request.prompts]
        for i, p in enumerate(prompts):  # text prompts: known only now
            if any(t >= self.vocab_size for t in p):
                raise datums.data_error(f"prompts[{i}] tokenizes to ids outside the model's vocabulary",
                                        f"prompts[{i}]")
        if self.max_length is not None:
            datums.check_prompt_lengths([len(p) for p in prompts], request.max_tokens, self.max_length)
        if request.seed is not None:
            base = request.seed
        else:
            base = row_seed(self.spec.seed, self.sample_calls)
            self.sample_calls += 1
        return sample(model, self.tokenizer, request, prompts, base_seed=base, device=self.device,
                      precision=self.precision)

    def _save_state(self, name: str) -> dict[str, Any]:
        path = join(self._state_root(), WEIGHTS_DIR, name)
        kind = self.save_to(path)
        return {"path": path, "step": self.step, "format": kind, "tokens": 0}

    def _save_weights_for_sampler(self, name: str) -> dict[str, Any]:
        path = join(self._state_root(), SAMPLER_DIR, name)
        state.save_weights(path, self.model, self.tokenizer, self.precision, self.artifacts)
        return {"path": path, "tokens": 0}

    def _load_state(self, parsed: tuple[str, bool] | str, optimizer: bool = True, param: str = "path") -> dict:
        path, optimizer = parsed if isinstance(parsed, tuple) else (parsed, optimizer)
        state.check_location(path, self._readable_roots(), param)
        local = self._stage(path, param)
        extra = state.read_extra(local, param)
        mine = self._identity()
        theirs = {k: extra.get(k) for k in mine}
        if theirs != mine:
            raise ConfigError(f"{param}: that state belongs to a trainer of another model or adapter "
                              f"({theirs} here: {mine})", param=param)
        if optimizer and state.has_optimizer(local):
            if self.optimizer is None:  # hyperparameters come back with the state
                self.optimizer = build_optimizer(self.model, OptimConfig())
            target = self.optimizer
        else:
            self.optimizer, target = None, None  # a fresh AdamW at the next step
        state.load_trainer_state(local, self.model, self.precision, target, param)
        self.model.zero_grad(set_to_none=True)  # gradients pending before the load are dropped
        self.step = int(extra["step"])
        self.sample_calls = int(extra.get("sample_calls", 0))
        return {"step": self.step, "tokens": 0}

    # --- release -------------------------------------------------------------------------------

    def save_to(self, path: str) -> str:
        """Write the state to `path` (a `save_state` directory); returns `hf` or `lora`."""
        self.start()
        extra = {"step": self.step, "sample_calls": self.sample_calls, **self._identity()}
        return state.save_trainer_state(path, self.model, self.tokenizer, self.precision, self.optimizer, extra,
                                        self.artifacts)

    # --- helpers -------------------------------------------------------------------------------

    def _identity(self) -> dict[str, Any]:
        """What a state must match to be loaded here."""
        spec = self.spec
        targets = spec.target_modules if isinstance(spec.target_modules, str) else list(spec.target_modules)
        return {"lora_rank": spec.lora_rank, "lora_alpha": spec.lora_alpha, "target_modules": targets}

    def _state_root(self) -> str:
        if not self.spec.state_root:
            raise ConfigError("this trainer has no state root to save into", param="state_root")
        return self.spec.state_root

    def _readable_roots(self) -> tuple[str, ...]:
        return tuple(r for r in (self.spec.state_root, *self.spec.allowed_roots) if r)

    def _stage(self, ref: str, param: str) -> str:
        try:
            local = self.artifacts.stage(ref)
        except (FileNotFoundError, OSError) as err:
            raise ConfigError(f"{param}: nothing readable at {ref!r} ({type(err).__name__})", param=param) from None
        if not os.path.isdir(local):
            raise ConfigError(f"{param}: {ref!r} is not a directory", param=param)
        return local

    def _sampler_model(self, path: str) -> nn.Module:
        if self._sampler is None or self._sampler[0] != path:
            state.check_location(path, self._readable_roots(), "sampler_path")
            local = self._stage(path, "sampler_path")
            if not os.path.isfile(os.path.join(local, "config.json")):
                raise ConfigError("sampler_path: not a model directory (no config.json)", param="sampler_path")
            self._sampler = None  # free the previous snapshot first
            model = models.load_policy(local, self._model_config(False), trainable=False).to(self.device)
            if model.get_output_embeddings().weight.shape[0] != self.vocab_size:
                raise ConfigError("sampler_path: that model has another vocabulary", param="sampler_path")
            self._sampler = (path, model)
        return self._sampler[1]

    @torch.no_grad()
    def _reference_log_probs(self, seqs: list[list[int]], targets: list[list[int]]) -> torch.Tensor:
        """DPO's reference: the policy before training (a fresh adapter switched off, or a frozen copy
        of the starting weights, loaded once when first needed)."""
        if self._fresh_lora:
            with models.reference_mode(self.model):
                return token_log_probs(self.model, seqs, targets, self.device)[0]
        if self._reference is None:
            self._reference = self._load(self.spec.model_path, lora=False, trainable=False)
        return token_log_probs(self._reference, seqs, targets, self.device)[0]
