from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, TypeVar, cast

from attrs import define as _attrs_define

from ..models.rollout_config_mode import RolloutConfigMode
from ..models.rollout_config_name import RolloutConfigName
from ..models.rollout_config_partial import RolloutConfigPartial
from ..models.rollout_config_source import RolloutConfigSource
from ..models.rollout_config_trajectory_filter import RolloutConfigTrajectoryFilter
from ..models.rollout_config_weight_sync_type_0 import RolloutConfigWeightSyncType0
from ..types import UNSET, Unset

if TYPE_CHECKING:
    from ..models.multi_turn_config import MultiTurnConfig


T = TypeVar("T", bound="RolloutConfig")


@_attrs_define
class RolloutConfig:
    """Sampling (VERL: `actor_rollout_ref.rollout`).

    Attributes:
        colocate (bool | Unset): False: generation runs on its own workers (`resources.rollout_workers`, at least 1),
            fed
            the trainer's weights by version. Default: True.
        do_sample (bool | Unset):  Default: True.
        enforce_eager (bool | Unset): vllm: run without CUDA graphs (graphs capture once at start-up and speed decoding
            up). Default: False.
        free_cache_engine (bool | Unset): vllm: put the engine to sleep after generating (its KV cache freed, its
            weights moved to CPU)
            so training gets the GPU memory back; woken before the next weight sync or generation. Default: True.
        gpu_memory_utilization (float | Unset): vllm: share of the GPU's memory the engine may take for weights and KV
            cache. Default: 0.5.
        max_staleness (int | Unset): async: a sample comes from a policy at most this many versions behind the one it
            trains. Default: 1.
        mode (RolloutConfigMode | Unset): `sync`: generate, then train on it. `one_step_off`: batch k+1 is generated
            while the trainer
            updates on batch k (samples one policy version behind). `async`: generation runs up to
            `max_staleness` batches ahead; needs `colocate: false`. Not with `algorithm.filter_groups`, a
            replay buffer or `remax`. Default: RolloutConfigMode.SYNC.
        multi_turn (MultiTurnConfig | Unset): Multi-turn episodes (agentic RL, docs/agentic-rl.md): each prompt runs as
            an episode against its
            environment (the job's `method.environment`, or the row's `environment` column); the policy trains
            on the tokens it sampled only. Needs `rollout.mode: sync` with `colocate: true`, and no replay.
        n (int | Unset): Samples per prompt; at least 2 with a group estimator (`grpo`, `rloo`,
            `reinforce_plus_plus_baseline`). Default: 5.
        name (RolloutConfigName | Unset):  Default: RolloutConfigName.HF.
        partial (RolloutConfigPartial | Unset): A batch whose generation is in flight at a weight update: `finish` on
            the version it started
            with (counted stale), or `continue` its remaining prompt groups on the new version (needs
            `colocate: false` and a mode other than `sync`). Default: RolloutConfigPartial.FINISH.
        source (RolloutConfigSource | Unset): `generate`: sample `n` responses per prompt of the training file.
            `trajectories`: train on the
            project's recorded, scored agent calls instead (docs/trajectories.md): no generation, no reward
            function; a step takes `data.train_batch_size` groups (`group_id`) of trajectories. Default:
            RolloutConfigSource.GENERATE.
        temperature (float | Unset):  Default: 1.0.
        tensor_model_parallel_size (int | Unset): vllm: GPUs one engine splits the model over (tensor parallelism); must
            divide
            `resources.gpus_per_worker`. Needs `name: vllm`. Default: 1.
        top_k (int | Unset): -1 disables top-k. Default: -1.
        top_p (float | Unset):  Default: 1.0.
        trajectory_filter (RolloutConfigTrajectoryFilter | Unset): `source: trajectories`: take the scored trajectories
            no job consumed yet, or `all` scored ones. Default: RolloutConfigTrajectoryFilter.UNCONSUMED.
        val_temperature (float | Unset): Validation decoding temperature (0 = greedy). Default: 0.0.
        weight_sync (None | RolloutConfigWeightSyncType0 | Unset): How rollout workers (`colocate: false`) get each
            policy version: read from the Ray object
            store, or broadcast by the trainer over a process group they join (gloo on CPU, NCCL on GPU).
            Unset: `collective` on GPU workers, `object_store` on CPU.
    """

    colocate: bool | Unset = True
    do_sample: bool | Unset = True
    enforce_eager: bool | Unset = False
    free_cache_engine: bool | Unset = True
    gpu_memory_utilization: float | Unset = 0.5
    max_staleness: int | Unset = 1
    mode: RolloutConfigMode | Unset = RolloutConfigMode.SYNC
    multi_turn: MultiTurnConfig | Unset = UNSET
    n: int | Unset = 5
    name: RolloutConfigName | Unset = RolloutConfigName.HF
    partial: RolloutConfigPartial | Unset = RolloutConfigPartial.FINISH
    source: RolloutConfigSource | Unset = RolloutConfigSource.GENERATE
    temperature: float | Unset = 1.0
    tensor_model_parallel_size: int | Unset = 1
    top_k: int | Unset = -1
    top_p: float | Unset = 1.0
    trajectory_filter: RolloutConfigTrajectoryFilter | Unset = RolloutConfigTrajectoryFilter.UNCONSUMED
    val_temperature: float | Unset = 0.0
    weight_sync: None | RolloutConfigWeightSyncType0 | Unset = UNSET

    def to_dict(self) -> dict[str, Any]:
        colocate = self.colocate

        do_sample = self.do_sample

        enforce_eager = self.enforce_eager

        free_cache_engine = self.free_cache_engine

        gpu_memory_utilization = self.gpu_memory_utilization

        max_staleness = self.max_staleness

        mode: str | Unset = UNSET
        if not isinstance(self.mode, Unset):
            mode = self.mode.value

        multi_turn: dict[str, Any] | Unset = UNSET
        if not isinstance(self.multi_turn, Unset):
            multi_turn = self.multi_turn.to_dict()

        n = self.n

        name: str | Unset = UNSET
        if not isinstance(self.name, Unset):
            name = self.name.value

        partial: str | Unset = UNSET
        if not isinstance(self.partial, Unset):
            partial = self.partial.value

        source: str | Unset = UNSET
        if not isinstance(self.source, Unset):
            source = self.source.value

        temperature = self.temperature

        tensor_model_parallel_size = self.tensor_model_parallel_size

        top_k = self.top_k

        top_p = self.top_p

        trajectory_filter: str | Unset = UNSET
        if not isinstance(self.trajectory_filter, Unset):
            trajectory_filter = self.trajectory_filter.value

        val_temperature = self.val_temperature

        weight_sync: None | str | Unset
        if isinstance(self.weight_sync, Unset):
            weight_sync = UNSET
        elif isinstance(self.weight_sync, RolloutConfigWeightSyncType0):
            weight_sync = self.weight_sync.value
        else:
            weight_sync = self.weight_sync

        field_dict: dict[str, Any] = {}

        field_dict.update({})
        if colocate is not UNSET:
            field_dict["colocate"] = colocate
        if do_sample is not UNSET:
            field_dict["do_sample"] = do_sample
        if enforce_eager is not UNSET:
            field_dict["enforce_eager"] = enforce_eager
        if free_cache_engine is not UNSET:
            field_dict["free_cache_engine"] = free_cache_engine
        if gpu_memory_utilization is not UNSET:
            field_dict["gpu_memory_utilization"] = gpu_memory_utilization
        if max_staleness is not UNSET:
            field_dict["max_staleness"] = max_staleness
        if mode is not UNSET:
            field_dict["mode"] = mode
        if multi_turn is not UNSET:
            field_dict["multi_turn"] = multi_turn
        if n is not UNSET:
            field_dict["n"] = n
        if name is not UNSET:
            field_dict["name"] = name
        if partial is not UNSET:
            field_dict["partial"] = partial
        if source is not UNSET:
            field_dict["source"] = source
        if temperature is not UNSET:
            field_dict["temperature"] = temperature
        if tensor_model_parallel_size is not UNSET:
            field_dict["tensor_model_parallel_size"] = tensor_model_parallel_size
        if top_k is not UNSET:
            field_dict["top_k"] = top_k
        if top_p is not UNSET:
            field_dict["top_p"] = top_p
        if trajectory_filter is not UNSET:
            field_dict["trajectory_filter"] = trajectory_filter
        if val_temperature is not UNSET:
            field_dict["val_temperature"] = val_temperature
        if weight_sync is not UNSET:
            field_dict["weight_sync"] = weight_sync

        return field_dict

    @classmethod
    def from_dict(cls: type[T], src_dict: Mapping[str, Any]) -> T:
        from ..models.multi_turn_config import MultiTurnConfig  # noqa: PLC0415

        d = dict(src_dict)
        colocate = d.pop("colocate", UNSET)

        do_sample = d.pop("do_sample", UNSET)

        enforce_eager = d.pop("enforce_eager", UNSET)

        free_cache_engine = d.pop("free_cache_engine", UNSET)

        gpu_memory_utilization = d.pop("gpu_memory_utilization", UNSET)

        max_staleness = d.pop("max_staleness", UNSET)

        _mode = d.pop("mode", UNSET)
        mode: RolloutConfigMode | Unset
        if isinstance(_mode, Unset):
            mode = UNSET
        else:
            mode = RolloutConfigMode(_mode)

        _multi_turn = d.pop("multi_turn", UNSET)
        multi_turn: MultiTurnConfig | Unset
        if isinstance(_multi_turn, Unset):
            multi_turn = UNSET
        else:
            multi_turn = MultiTurnConfig.from_dict(_multi_turn)

        n = d.pop("n", UNSET)

        _name = d.pop("name", UNSET)
        name: RolloutConfigName | Unset
        if isinstance(_name, Unset):
            name = UNSET
        else:
            name = RolloutConfigName(_name)

        _partial = d.pop("partial", UNSET)
        partial: RolloutConfigPartial | Unset
        if isinstance(_partial, Unset):
            partial = UNSET
        else:
            partial = RolloutConfigPartial(_partial)

        _source = d.pop("source", UNSET)
        source: RolloutConfigSource | Unset
        if isinstance(_source, Unset):
            source = UNSET
        else:
            source = RolloutConfigSource(_source)

        temperature = d.pop("temperature", UNSET)

        tensor_model_parallel_size = d.pop("tensor_model_parallel_size", UNSET)

        top_k = d.pop("top_k", UNSET)

        top_p = d.pop("top_p", UNSET)

        _trajectory_filter = d.pop("trajectory_filter", UNSET)
        trajectory_filter: RolloutConfigTrajectoryFilter | Unset
        if isinstance(_trajectory_filter, Unset):
            trajectory_filter = UNSET
        else:
            trajectory_filter = RolloutConfigTrajectoryFilter(_trajectory_filter)

        val_temperature = d.pop("val_temperature", UNSET)

        def _parse_weight_sync(data: object) -> None | RolloutConfigWeightSyncType0 | Unset:
            if data is None:
                return data
            if isinstance(data, Unset):
                return data
            try:
                if not isinstance(data, str):
                    raise TypeError()
                weight_sync_type_0 = RolloutConfigWeightSyncType0(data)

                return weight_sync_type_0
            except (TypeError, ValueError, AttributeError, KeyError):
                pass
            return cast(None | RolloutConfigWeightSyncType0 | Unset, data)

        weight_sync = _parse_weight_sync(d.pop("weight_sync", UNSET))

        rollout_config = cls(
            colocate=colocate,
            do_sample=do_sample,
            enforce_eager=enforce_eager,
            free_cache_engine=free_cache_engine,
            gpu_memory_utilization=gpu_memory_utilization,
            max_staleness=max_staleness,
            mode=mode,
            multi_turn=multi_turn,
            n=n,
            name=name,
            partial=partial,
            source=source,
            temperature=temperature,
            tensor_model_parallel_size=tensor_model_parallel_size,
            top_k=top_k,
            top_p=top_p,
            trajectory_filter=trajectory_filter,
            val_temperature=val_temperature,
            weight_sync=weight_sync,
        )

        return rollout_config
