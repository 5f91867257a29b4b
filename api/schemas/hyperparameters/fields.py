"""What every hyperparameter section is built from: size limits, constrained field types, the `Strict`
base model and `errors_at`, which reports a cross-field problem at the field that must change."""

from __future__ import annotations

from typing import Annotated, Any, Literal

import pydantic.types
from pydantic import AfterValidator, ConfigDict, Field, ValidationError, WrapValidator
from pydantic_core import InitErrorDetails, PydanticCustomError

from api.schemas.text import NulFree

MAX_SIZE = 10**6
"""Upper bound for batch sizes, sequence lengths and token budgets: anything larger is a typo."""
MAX_STEPS = 10**8
MAX_SECONDS = 365 * 86400.0
"""Upper bound for durations: a year."""

Dtype = Literal["float32", "bfloat16", "float16"]
Truncation = Literal["error", "left", "right", "middle"]
LossAggMode = Literal["token-mean", "seq-mean-token-sum", "seq-mean-token-mean", "seq-mean-token-sum-norm"]
KLType = Literal["kl", "abs", "mse", "low_var_kl"]

Size = Annotated[int, Field(gt=0, le=MAX_SIZE)]
"""A batch size, sequence length or token budget."""
Epochs = Annotated[int, Field(gt=0, le=10_000)]
Ratio = Annotated[float, Field(gt=0.0, lt=1.0)]
Share = Annotated[float, Field(ge=0.0, le=1.0)]
Coef = Annotated[float, Field(ge=0.0, le=1e6)]
LAX = pydantic.types.Strict(False)
"""JSON has no tuples: a list is fine where the engine keeps a tuple."""


def _one_error(message: str) -> WrapValidator:
    """Collapse a union's per-arm errors into one error at the field itself (a clean `param`)."""
    def wrap(value: Any, handler: Any) -> Any:
        try:
            return handler(value)
        except ValidationError:
            raise PydanticCustomError("invalid_value", message) from None
    return WrapValidator(wrap)


def _freq(value: int) -> int:
    if value != -1 and not 1 <= value <= MAX_STEPS:
        raise PydanticCustomError("invalid_value", "must be -1 (only at the end) or a positive number of steps")
    return value


def _lora_rank(value: int | str) -> int | str:
    if value != "auto" and not 0 <= value <= 1024:
        raise PydanticCustomError("invalid_value", "must be an integer in [0, 1024] or 'auto'")
    return value


LoraRank = Annotated[int | Literal["auto"], _one_error("must be an integer in [0, 1024] or 'auto'"),
                     AfterValidator(_lora_rank)]
CpusPerWorker = Annotated[Annotated[float, Field(gt=0.0, le=1024.0)] | Literal["auto"],
                          _one_error("must be a number in (0, 1024] or 'auto'")]
ModuleName = Annotated[str, Field(min_length=1, max_length=200)]
TargetModules = Annotated[ModuleName | Annotated[tuple[ModuleName, ...], LAX, Field(max_length=1024)],
                          _one_error("must be a module name, 'all-linear' or a list of up to 1024 names")]
Freq = Annotated[int, AfterValidator(_freq)]


class Strict(NulFree):
    """Base of every request schema: unknown keys, type coercion, non-finite floats and NUL are refused."""

    model_config = ConfigDict(extra="forbid", strict=True, allow_inf_nan=False, use_attribute_docstrings=True)


def errors_at(title: str, *problems: tuple[tuple[str | int, ...], Any, str]) -> ValidationError:
    """A ValidationError located at `loc` (relative to the model that raises it)."""
    return ValidationError.from_exception_data(title, [
        InitErrorDetails(type=PydanticCustomError("value_error", message), loc=loc, input=value)
        for loc, value, message in problems])


Strategy = Literal["ddp", "fsdp2"]
SequenceParallel = Annotated[int, Field(ge=1, le=64)]
