"""Operation payloads: checked and normalised before anything changes. Pure Python (no torch, no Ray),
so any process may check a payload without loading either.

Every check raises `ConfigError` (`code` `invalid_config`: the operation, the loss function and its
config, Adam and sampling parameters, names and paths) or `DataError` (`code` `invalid_data`: the
datums and prompts), each with `param` the dotted path of the offending value, e.g.
`data[2].loss_fn_inputs.weights` or `sampling_params.top_p`.

Datum convention (Tinker's): `model_input` is the token sequence fed to the model; position `t`
predicts `loss_fn_inputs.target_tokens[t]`, and every per-token input has `len(model_input)` entries.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from typing import Any

from engine.errors import ConfigError, DataError

OPERATIONS = ("forward_backward", "forward", "optim_step", "sample", "save_state", "load_state",
              "save_weights_for_sampler")
LOSS_FNS = ("cross_entropy", "importance_sampling", "ppo", "cispo", "dro", "dpo")
TOKEN_INPUTS = ("target_tokens",)
FLOAT_INPUTS = ("weights", "advantages", "logprobs", "ref_logprobs")
LOSS_INPUTS: dict[str, tuple[tuple[str, ...], tuple[str, ...]]] = {
    "cross_entropy": (("target_tokens", "weights"), ()),
    "importance_sampling": (("target_tokens", "logprobs", "advantages"), ()),
    "ppo": (("target_tokens", "logprobs", "advantages"), ()),
    "cispo": (("target_tokens", "logprobs", "advantages"), ()),
    "dro": (("target_tokens", "logprobs", "advantages"), ()),
    "dpo": (("target_tokens", "weights"), ("ref_logprobs",)),
}
"""loss_fn -> (required inputs, optional inputs); any other input is refused (it would be ignored)."""
LOSS_CONFIG: dict[str, dict[str, float]] = {
    "cross_entropy": {},
    "importance_sampling": {},
    "ppo": {"clip_low_threshold": 0.8, "clip_high_threshold": 1.2},
    "cispo": {"clip_low_threshold": 0.0, "clip_high_threshold": 4.0},
    "dro": {"beta": 0.05},
    "dpo": {"beta": 0.1},
}
"""loss_fn -> its `loss_fn_config` keys and their defaults (Tinker's names and defaults; `dro`'s
beta has no documented default there: 0.05 is its documentation's example)."""
ADAM_DEFAULTS = {"learning_rate": 1e-4, "beta1": 0.9, "beta2": 0.95, "eps": 1e-12, "weight_decay": 0.0,
                 "grad_clip_norm": 0.0}
SAMPLING_DEFAULTS: dict[str, Any] = {"max_tokens": 16, "temperature": 1.0, "top_p": 1.0, "top_k": 0,
                                     "stop": [], "seed": None}
MAX_NEW_TOKENS = 8192
MAX_NUM_SAMPLES = 128
MAX_SAMPLE_ROWS = 4096
"""prompts x num_samples in one `sample` call."""
_NAME = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9_.-]{0,127}$")


def _config(message: str, param: str) -> ConfigError:
    return ConfigError(message, param=param)


def data_error(message: str, param: str, **data: Any) -> DataError:
    """A bad datum or prompt (`code` `invalid_data`)."""
    return DataError(message, param=param, code="invalid_data", data=data or None)


_data = data_error


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _is_number(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value)


def _dict(value: Any, param: str, *, data: bool = False) -> dict[str, Any]:
    if value is None:
        return {}
    if not isinstance(value, dict):
        raise (_data if data else _config)(f"{param} must be an object, got {type(value).__name__}", param)
    return value


def _known(values: dict[str, Any], allowed: Any, prefix: str, *, data: bool = False) -> None:
    for key in values:
        if key not in allowed:
            names = ", ".join(sorted(allowed)) or "none"
            raise (_data if data else _config)(f"unknown key {key!r} (allowed: {names})", f"{prefix}{key}")


def _tokens(value: Any, param: str, vocab_size: int | None) -> list[int]:
    if not isinstance(value, list) or not value:
        raise _data(f"{param} must be a non-empty list of token ids", param)
    for j, tok in enumerate(value):
        if not _is_int(tok):
            raise _data(f"{param}[{j}] is not an integer token id: {tok!r}", param, index=j)
        if tok < 0 or (vocab_size is not None and tok >= vocab_size):
            bound = f"[0, {vocab_size})" if vocab_size is not None else "[0, vocab)"
            raise _data(f"{param}[{j}] = {tok} is outside the vocabulary {bound}", param, index=j)
    return value


def _floats(value: Any, param: str, length: int) -> list[float]:
    if not isinstance(value, list):
        raise _data(f"{param} must be a list of numbers", param)
    if len(value) != length:
        raise _data(f"{param} has {len(value)} entries, model_input has {length}", param,
                    length=len(value), expected=length)
    for j, x in enumerate(value):
        if not _is_number(x):
            raise _data(f"{param}[{j}] is not a finite number: {x!r}", param, index=j)
    return [float(x) for x in value]


def _number(values: dict[str, Any], key: str, default: float, param: str, *, low: float | None = None,
            high: float | None = None, low_open: bool = False, high_open: bool = False) -> float:
    value = values.get(key, default)
    if not _is_number(value):
        raise _config(f"{param} must be a finite number, got {value!r}", param)
    if low is not None and (value < low or (low_open and value == low)):
        raise _config(f"{param} must be {'>' if low_open else '>='} {low:g}, got {value!r}", param)
    if high is not None and (value > high or (high_open and value == high)):
        raise _config(f"{param} must be {'<' if high_open else '<='} {high:g}, got {value!r}", param)
    return float(value)


def _integer(values: dict[str, Any], key: str, default: int, param: str, low: int, high: int) -> int:
    value = values.get(key, default)
    if not _is_int(value) or not low <= value <= high:
        raise _config(f"{param} must be an integer in [{low}, {high}], got {value!r}", param)
    return value


# --- forward / forward_backward ------------------------------------------------------------------

@dataclass(frozen=True)
class Datum:
    """One checked datum: `model_input` and its per-token inputs (all of its length)."""

    model_input: list[int]
    inputs: dict[str, list]


@dataclass(frozen=True)
class ForwardRequest:
    data: list[Datum]
    loss_fn: str
    config: dict[str, float]

    @property
    def tokens(self) -> int:
        return sum(len(d.model_input) for d in self.data)


def parse_forward(payload: dict[str, Any], vocab_size: int | None = None,
                  max_length: int | None = None) -> ForwardRequest:
    _known(payload, ("data", "loss_fn", "loss_fn_config"), "")
    loss_fn = payload.get("loss_fn")
    if loss_fn not in LOSS_FNS:
        raise _config(f"loss_fn must be one of {', '.join(LOSS_FNS)}, got {loss_fn!r}", "loss_fn")
    required, optional = LOSS_INPUTS[loss_fn]
    raw = payload.get("data")
    if not isinstance(raw, list) or not raw:
        raise _data("data must be a non-empty list of datums", "data")
    data = []
    for i, item in enumerate(raw):
        where = f"data[{i}]"
        if not isinstance(item, dict):
            raise _data(f"{where} must be an object with model_input and loss_fn_inputs", where)
        _known(item, ("model_input", "loss_fn_inputs"), f"{where}.", data=True)
        ids = _tokens(item.get("model_input"), f"{where}.model_input", vocab_size)
        if max_length is not None and len(ids) > max_length:
            raise _data(f"{where}.model_input has {len(ids)} tokens, more than the model's {max_length}",
                        f"{where}.model_input", length=len(ids), max=max_length)
        given = _dict(item.get("loss_fn_inputs"), f"{where}.loss_fn_inputs", data=True)
        _known(given, (*required, *optional), f"{where}.loss_fn_inputs.", data=True)
        inputs: dict[str, list] = {}
        for key in (*required, *optional):
            param = f"{where}.loss_fn_inputs.{key}"
            if key not in given:
                if key in required:
                    raise _data(f"loss_fn {loss_fn} needs {key} in every datum", param)
                continue
            if key in TOKEN_INPUTS:
                tokens = _tokens(given[key], param, vocab_size)
                if len(tokens) != len(ids):
                    raise _data(f"{param} has {len(tokens)} entries, model_input has {len(ids)}", param,
                                length=len(tokens), expected=len(ids))
                inputs[key] = tokens
            else:
                inputs[key] = _floats(given[key], param, len(ids))
        data.append(Datum(ids, inputs))
    if loss_fn == "dpo":
        if len(data) % 2:
            raise _data(f"dpo takes (chosen, rejected) pairs of datums: got an odd number ({len(data)})", "data")
        with_ref = ["ref_logprobs" in d.inputs for d in data]
        if any(with_ref) and not all(with_ref):
            i = with_ref.index(False)
            raise _data("give ref_logprobs for every datum or for none", f"data[{i}].loss_fn_inputs.ref_logprobs")
    config = parse_loss_config(loss_fn, payload.get("loss_fn_config"))
    return ForwardRequest(data, loss_fn, config)


def parse_loss_config(loss_fn: str, raw: Any) -> dict[str, float]:
    values = _dict(raw, "loss_fn_config")
    defaults = LOSS_CONFIG[loss_fn]
    _known(values, defaults, "loss_fn_config.")
    out = {}
    for key, default in defaults.items():
        param = f"loss_fn_config.{key}"
        if key == "clip_low_threshold":
            out[key] = _number(values, key, default, param, low=0.0)
        elif key == "clip_high_threshold":
            out[key] = _number(values, key, default, param, low=out["clip_low_threshold"])
        else:  # beta
            out[key] = _number(values, key, default, param, low=0.0, low_open=True)
    return out


# --- optim_step ----------------------------------------------------------------------------------

def parse_adam(payload: dict[str, Any]) -> dict[str, float]:
    _known(payload, ("adam_params",), "")
    values = _dict(payload.get("adam_params"), "adam_params")
    _known(values, ADAM_DEFAULTS, "adam_params.")
    p = "adam_params."
    d = ADAM_DEFAULTS
    return {
        "learning_rate": _number(values, "learning_rate", d["learning_rate"], p + "learning_rate", low=0.0),
        "beta1": _number(values, "beta1", d["beta1"], p + "beta1", low=0.0, high=1.0, high_open=True),
        "beta2": _number(values, "beta2", d["beta2"], p + "beta2", low=0.0, high=1.0, high_open=True),
        "eps": _number(values, "eps", d["eps"], p + "eps", low=0.0, low_open=True),
        "weight_decay": _number(values, "weight_decay", d["weight_decay"], p + "weight_decay", low=0.0),
        "grad_clip_norm": _number(values, "grad_clip_norm", d["grad_clip_norm"], p + "grad_clip_norm", low=0.0),
    }


# --- sample ----------------------------------------------------------------------------------------

@dataclass(frozen=True)
class SampleRequest:
    prompts: list[list[int] | str]
    max_tokens: int
    temperature: float
    top_p: float
    top_k: int
    """0: no top-k."""
    stop_strings: list[str]
    stop_tokens: list[int]
    seed: int | None
    num_samples: int
    sampler_path: str | None
    prompt_logprobs: bool = False
    """Also return each prompt token's log-prob under the sampled weights (None for the first)."""


def parse_sample(payload: dict[str, Any], vocab_size: int | None = None,
                 max_length: int | None = None) -> SampleRequest:
    _known(payload, ("prompts", "sampling_params", "num_samples", "sampler_path", "prompt_logprobs"), "")
    raw = payload.get("prompts")
    if not isinstance(raw, list) or not raw:
        raise _data("prompts must be a non-empty list of token id lists or strings", "prompts")
    prompts: list[list[int] | str] = []
    for i, prompt in enumerate(raw):
        if isinstance(prompt, str):
            if not prompt:
                raise _data(f"prompts[{i}] is an empty string", f"prompts[{i}]")
            prompts.append(prompt)
        else:
            prompts.append(_tokens(prompt, f"prompts[{i}]", vocab_size))
    values = _dict(payload.get("sampling_params"), "sampling_params")
    _known(values, SAMPLING_DEFAULTS, "sampling_params.")
    p = "sampling_params."
    d = SAMPLING_DEFAULTS
    max_tokens = _integer(values, "max_tokens", d["max_tokens"], p + "max_tokens", 1, MAX_NEW_TOKENS)
    temperature = _number(values, "temperature", d["temperature"], p + "temperature", low=0.0)
    top_p = _number(values, "top_p", d["top_p"], p + "top_p", low=0.0, high=1.0, low_open=True)
    top_k = values.get("top_k", d["top_k"])
    if not _is_int(top_k) or top_k < -1:
        raise _config(f"{p}top_k must be an integer >= 0 (0 or -1: no top-k), got {top_k!r}", p + "top_k")
    stop = values.get("stop", d["stop"])
    stop = [stop] if isinstance(stop, str | int) and not isinstance(stop, bool) else stop
    if not isinstance(stop, list):
        raise _config(f"{p}stop must be a string, a token id or a list of them", p + "stop")
    stop_strings, stop_tokens = [], []
    for j, s in enumerate(stop):
        if isinstance(s, str) and s:
            stop_strings.append(s)
        elif _is_int(s) and s >= 0 and (vocab_size is None or s < vocab_size):
            stop_tokens.append(s)
        else:
            raise _config(f"{p}stop[{j}] must be a non-empty string or a token id in the vocabulary, got {s!r}",
                          p + "stop")
    seed = values.get("seed", d["seed"])
    if seed is not None and not _is_int(seed):
        raise _config(f"{p}seed must be an integer or null, got {seed!r}", p + "seed")
    num_samples = _integer(payload, "num_samples", 1, "num_samples", 1, MAX_NUM_SAMPLES)
    if len(prompts) * num_samples > MAX_SAMPLE_ROWS:
        raise _config(f"{len(prompts)} prompts x {num_samples} samples is more than {MAX_SAMPLE_ROWS} sequences "
                      "in one call", "num_samples")
    if max_length is not None:
        check_prompt_lengths([len(x) if isinstance(x, list) else 0 for x in prompts], max_tokens, max_length)
    sampler_path = payload.get("sampler_path")
    if sampler_path is not None and (not isinstance(sampler_path, str) or not sampler_path):
        raise _config("sampler_path must be a non-empty string or null", "sampler_path")
    prompt_logprobs = payload.get("prompt_logprobs", False)
    if not isinstance(prompt_logprobs, bool):
        raise _config(f"prompt_logprobs must be true or false, got {prompt_logprobs!r}", "prompt_logprobs")
    return SampleRequest(prompts, max_tokens, temperature, top_p, max(top_k, 0), stop_strings, stop_tokens,
                         seed, num_samples, sampler_path, prompt_logprobs)


def check_prompt_lengths(lengths: list[int], max_tokens: int, max_length: int) -> None:
    """A prompt and its continuation must fit the model's positions."""
    for i, n in enumerate(lengths):
        if n + max_tokens > max_length:
            param = f"prompts[{i}]" if n >= max_length else "sampling_params.max_tokens"
            raise (_data if n >= max_length else _config)(
                f"prompts[{i}] has {n} tokens; with max_tokens {max_tokens} that is more than the model's "
                f"{max_length} positions", param)


# --- state ---------------------------------------------------------------------------------------

def parse_name(payload: dict[str, Any]) -> str:
    _known(payload, ("name",), "")
    name = payload.get("name")
    if not isinstance(name, str) or not _NAME.match(name) or ".." in name:
        raise _config(f"name must be 1-128 letters, digits, '_', '-' or '.', not starting with '.', "
                      f"got {name!r}", "name")
    return name


def parse_load(payload: dict[str, Any]) -> tuple[str, bool]:
    _known(payload, ("path", "optimizer"), "")
    path = payload.get("path")
    if not isinstance(path, str) or not path or "\x00" in path:
        raise _config("path must be a non-empty string", "path")
    optimizer = payload.get("optimizer", True)
    if not isinstance(optimizer, bool):
        raise _config(f"optimizer must be true or false, got {optimizer!r}", "optimizer")
    return path, optimizer


# --- all of it -----------------------------------------------------------------------------------

def parse(op: str, payload: Any, *, vocab_size: int | None = None, max_length: int | None = None) -> Any:
    """The checked, normalised payload of `op` (see the parse_* functions); raises on any bad input."""
    if op not in OPERATIONS:
        raise _config(f"unknown operation {op!r} (one of {', '.join(OPERATIONS)})", "op")
    if not isinstance(payload, dict):
        raise _config(f"the payload must be an object, got {type(payload).__name__}", "payload")
    if op in ("forward_backward", "forward"):
        return parse_forward(payload, vocab_size, max_length)
    if op == "optim_step":
        return parse_adam(payload)
    if op == "sample":
        return parse_sample(payload, vocab_size, max_length)
    if op in ("save_state", "save_weights_for_sampler"):
        return parse_name(payload)
    return parse_load(payload)


def validate_payload(op: str, payload: dict, *, vocab_size: int | None = None,
                     max_length: int | None = None) -> None:
    """Check `payload` for `op` without torch or a model (token ids against `vocab_size` and lengths
    against `max_length` when given): the same checks `run_operation` runs before any state changes."""
    parse(op, payload, vocab_size=vocab_size, max_length=max_length)
