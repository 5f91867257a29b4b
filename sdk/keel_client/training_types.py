"""The data types of `keel_client.training`, named and shaped as Tinker's (`tinker.types`), so a training
loop written for Tinker keeps its `types.Datum(...)`, `types.ModelInput.from_ints(...)`,
`types.AdamParams(...)` and `types.SamplingParams(...)`.

Hand-written: sdk/extra/training_types.py is the source, copied into the generated package by `make sdk`.
Arrays may be lists, `TensorData`, numpy arrays or torch tensors (converted with `.tolist()`); results
hold `TensorData`, which gives them back as lists, numpy arrays or torch tensors.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any


def as_list(value: Any) -> list:
    """A list from a list, a tuple, `TensorData`, `ModelInput`, a numpy array or a torch tensor."""
    if isinstance(value, TensorData):
        return list(value.data)
    if isinstance(value, ModelInput):
        return value.to_ints()
    if hasattr(value, "tolist"):  # numpy, torch (no import of either here)
        out = value.tolist()
        return out if isinstance(out, list) else [out]
    return list(value)


@dataclass
class TensorData:
    """A flat array: `data` with its `dtype` (`int64` or `float32`) and `shape`."""

    data: list
    dtype: str = "float32"
    shape: list[int] | None = None

    @classmethod
    def from_numpy(cls, array: Any) -> TensorData:
        return cls(array.reshape(-1).tolist(), "int64" if array.dtype.kind in "iu" else "float32", list(array.shape))

    @classmethod
    def from_torch(cls, tensor: Any) -> TensorData:
        integer = not (tensor.is_floating_point() or tensor.is_complex())
        return cls(tensor.detach().cpu().reshape(-1).tolist(), "int64" if integer else "float32", list(tensor.shape))

    def tolist(self) -> list:
        return list(self.data)

    def to_numpy(self) -> Any:
        import numpy as np

        out = np.asarray(self.data, dtype=np.int64 if self.dtype == "int64" else np.float32)
        return out.reshape(self.shape) if self.shape else out

    def to_torch(self) -> Any:
        import torch

        out = torch.tensor(self.data, dtype=torch.int64 if self.dtype == "int64" else torch.float32)
        return out.reshape(self.shape) if self.shape else out


@dataclass
class ModelInput:
    """A token sequence (Tinker keeps it as chunks; Keel's are plain token ids)."""

    tokens: list[int] = field(default_factory=list)

    @classmethod
    def from_ints(cls, tokens: Any) -> ModelInput:
        return cls([int(t) for t in as_list(tokens)])

    @classmethod
    def empty(cls) -> ModelInput:
        return cls([])

    def to_ints(self) -> list[int]:
        return list(self.tokens)

    def append_int(self, token: int) -> ModelInput:
        return ModelInput([*self.tokens, int(token)])

    @property
    def length(self) -> int:
        return len(self.tokens)


@dataclass
class Datum:
    """One sequence and the per-position inputs its loss needs (`target_tokens`, `weights`,
    `advantages`, `logprobs`, `ref_logprobs`), each as long as `model_input`."""

    model_input: ModelInput | list[int]
    loss_fn_inputs: dict[str, Any] = field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        inputs = {}
        for name, value in self.loss_fn_inputs.items():
            values = as_list(value)
            inputs[name] = [int(v) for v in values] if name == "target_tokens" else [float(v) for v in values]
        return {"model_input": [int(t) for t in as_list(self.model_input)], "loss_fn_inputs": inputs}


@dataclass
class AdamParams:
    learning_rate: float = 1e-4
    beta1: float = 0.9
    beta2: float = 0.95
    eps: float = 1e-8
    weight_decay: float = 0.0
    grad_clip_norm: float = 0.0
    """0: no clipping."""

    def to_json(self) -> dict[str, float]:
        return {k: float(v) for k, v in self.__dict__.items()}


@dataclass
class SamplingParams:
    max_tokens: int = 16
    temperature: float = 1.0
    top_p: float = 1.0
    top_k: int = 0
    """0 (or -1, Tinker's): no top-k."""
    stop: list[str | int] | str | int | None = None
    seed: int | None = None

    def to_json(self) -> dict[str, Any]:
        stop = [] if self.stop is None else [self.stop] if isinstance(self.stop, str | int) else list(self.stop)
        return {"max_tokens": int(self.max_tokens), "temperature": float(self.temperature),
                "top_p": float(self.top_p), "top_k": max(0, int(self.top_k)), "stop": stop, "seed": self.seed}


# -- results ---------------------------------------------------------------------------------------

@dataclass
class ForwardBackwardOutput:
    """`loss_fn_outputs[i]["logprobs"]`: datum i's log-probabilities of its `target_tokens`."""

    loss_fn_outputs: list[dict[str, TensorData]]
    metrics: dict[str, float]
    tokens: int = 0

    @property
    def loss(self) -> float | None:
        return self.metrics.get("loss:sum")

    @classmethod
    def from_json(cls, result: dict[str, Any], tokens: int) -> ForwardBackwardOutput:
        outputs = [{k: TensorData(v, "float32", [len(v)]) for k, v in out.items()}
                   for out in result.get("loss_fn_outputs") or []]
        return cls(outputs, dict(result.get("metrics") or {}), tokens)


@dataclass
class OptimStepResponse:
    step: int
    metrics: dict[str, Any]

    @classmethod
    def from_json(cls, result: dict[str, Any], tokens: int) -> OptimStepResponse:
        return cls(int(result["step"]), dict(result.get("metrics") or {}))


@dataclass
class SampledSequence:
    tokens: list[int]
    logprobs: list[float]
    stop_reason: str
    text: str = ""
    prompt_index: int = 0


@dataclass
class SampleResponse:
    """The sequences of prompt 0 first (`num_samples` of them), then prompt 1's, ..."""

    sequences: list[SampledSequence]
    tokens: int = 0

    @classmethod
    def from_json(cls, result: dict[str, Any], tokens: int) -> SampleResponse:
        return cls([SampledSequence(list(s["tokens"]), list(s.get("logprobs") or []), s.get("stop_reason", ""),
                                    s.get("text", ""), int(s.get("prompt_index", 0)))
                    for s in result.get("sequences") or []], tokens)


@dataclass
class SaveWeightsResponse:
    """`path`: the saved model's id (use it with `load_state`, as a job's `model`, or download it)."""

    path: str
    step: int | None = None
    format: str | None = None

    @classmethod
    def from_json(cls, result: dict[str, Any], tokens: int) -> SaveWeightsResponse:
        return cls(result["path"], result.get("step"), result.get("format"))


@dataclass
class SaveWeightsForSamplerResponse:
    path: str

    @classmethod
    def from_json(cls, result: dict[str, Any], tokens: int) -> SaveWeightsForSamplerResponse:
        return cls(result["path"])


@dataclass
class LoadWeightsResponse:
    step: int

    @classmethod
    def from_json(cls, result: dict[str, Any], tokens: int) -> LoadWeightsResponse:
        return cls(int(result["step"]))
