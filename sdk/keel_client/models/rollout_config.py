from __future__ import annotations

from collections.abc import Mapping
from typing import Any, TypeVar

from attrs import define as _attrs_define

from ..models.rollout_config_name import RolloutConfigName
from ..types import UNSET, Unset

T = TypeVar("T", bound="RolloutConfig")


@_attrs_define
class RolloutConfig:
    """Sampling (VERL: `actor_rollout_ref.rollout`).

    Attributes:
        do_sample (bool | Unset):  Default: True.
        enforce_eager (bool | Unset): vllm: run without CUDA graphs (graphs capture once at start-up and speed decoding
            up). Default: False.
        free_cache_engine (bool | Unset): vllm: put the engine to sleep after generating (its KV cache freed, its
            weights moved to CPU)
            so training gets the GPU memory back; woken before the next weight sync or generation. Default: True.
        gpu_memory_utilization (float | Unset): vllm: share of the GPU's memory the engine may take for weights and KV
            cache. Default: 0.5.
        n (int | Unset): Samples per prompt; at least 2 with a group estimator (`grpo`, `rloo`,
            `reinforce_plus_plus_baseline`). Default: 5.
        name (RolloutConfigName | Unset):  Default: RolloutConfigName.HF.
        temperature (float | Unset):  Default: 1.0.
        tensor_model_parallel_size (int | Unset): vllm: GPUs one engine splits the model over (tensor parallelism); must
            divide
            `resources.gpus_per_worker`. Needs `name: vllm`. Default: 1.
        top_k (int | Unset): -1 disables top-k. Default: -1.
        top_p (float | Unset):  Default: 1.0.
        val_temperature (float | Unset): Validation decoding temperature (0 = greedy). Default: 0.0.
    """

    do_sample: bool | Unset = True
    enforce_eager: bool | Unset = False
    free_cache_engine: bool | Unset = True
    gpu_memory_utilization: float | Unset = 0.5
    n: int | Unset = 5
    name: RolloutConfigName | Unset = RolloutConfigName.HF
    temperature: float | Unset = 1.0
    tensor_model_parallel_size: int | Unset = 1
    top_k: int | Unset = -1
    top_p: float | Unset = 1.0
    val_temperature: float | Unset = 0.0

    def to_dict(self) -> dict[str, Any]:
        do_sample = self.do_sample

        enforce_eager = self.enforce_eager

        free_cache_engine = self.free_cache_engine

        gpu_memory_utilization = self.gpu_memory_utilization

        n = self.n

        name: str | Unset = UNSET
        if not isinstance(self.name, Unset):
            name = self.name.value

        temperature = self.temperature

        tensor_model_parallel_size = self.tensor_model_parallel_size

        top_k = self.top_k

        top_p = self.top_p

        val_temperature = self.val_temperature

        field_dict: dict[str, Any] = {}

        field_dict.update({})
        if do_sample is not UNSET:
            field_dict["do_sample"] = do_sample
        if enforce_eager is not UNSET:
            field_dict["enforce_eager"] = enforce_eager
        if free_cache_engine is not UNSET:
            field_dict["free_cache_engine"] = free_cache_engine
        if gpu_memory_utilization is not UNSET:
            field_dict["gpu_memory_utilization"] = gpu_memory_utilization
        if n is not UNSET:
            field_dict["n"] = n
        if name is not UNSET:
            field_dict["name"] = name
        if temperature is not UNSET:
            field_dict["temperature"] = temperature
        if tensor_model_parallel_size is not UNSET:
            field_dict["tensor_model_parallel_size"] = tensor_model_parallel_size
        if top_k is not UNSET:
            field_dict["top_k"] = top_k
        if top_p is not UNSET:
            field_dict["top_p"] = top_p
        if val_temperature is not UNSET:
            field_dict["val_temperature"] = val_temperature

        return field_dict

    @classmethod
    def from_dict(cls: type[T], src_dict: Mapping[str, Any]) -> T:
        d = dict(src_dict)
        do_sample = d.pop("do_sample", UNSET)

        enforce_eager = d.pop("enforce_eager", UNSET)

        free_cache_engine = d.pop("free_cache_engine", UNSET)

        gpu_memory_utilization = d.pop("gpu_memory_utilization", UNSET)

        n = d.pop("n", UNSET)

        _name = d.pop("name", UNSET)
        name: RolloutConfigName | Unset
        if isinstance(_name, Unset):
            name = UNSET
        else:
            name = RolloutConfigName(_name)

        temperature = d.pop("temperature", UNSET)

        tensor_model_parallel_size = d.pop("tensor_model_parallel_size", UNSET)

        top_k = d.pop("top_k", UNSET)

        top_p = d.pop("top_p", UNSET)

        val_temperature = d.pop("val_temperature", UNSET)

        rollout_config = cls(
            do_sample=do_sample,
            enforce_eager=enforce_eager,
            free_cache_engine=free_cache_engine,
            gpu_memory_utilization=gpu_memory_utilization,
            n=n,
            name=name,
            temperature=temperature,
            tensor_model_parallel_size=tensor_model_parallel_size,
            top_k=top_k,
            top_p=top_p,
            val_temperature=val_temperature,
        )

        return rollout_config
