from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Literal, TypeVar, cast

from attrs import define as _attrs_define

from ..types import UNSET, Unset

T = TypeVar("T", bound="FilterGroupsConfig")


@_attrs_define
class FilterGroupsConfig:
    """DAPO dynamic sampling (Yu et al. 2025, arXiv:2503.14476): drop prompt groups whose samples all
    scored the same (they carry no group-relative signal) and keep generating to fill the batch.

        Attributes:
            enable (bool | Unset): Needs a group estimator: `grpo`, `rloo` or `reinforce_plus_plus_baseline`. Default:
                False.
            max_num_gen_batches (int | Unset): At most this many prompt batches generated per step (0 = no limit); short of
                a full batch,
                the step trains on the groups it has and warns. Default: 10.
            metric (Literal['score'] | Unset): What must differ within a group: the sequence score (after reward shaping).
                Default: 'score'.
    """

    enable: bool | Unset = False
    max_num_gen_batches: int | Unset = 10
    metric: Literal["score"] | Unset = "score"

    def to_dict(self) -> dict[str, Any]:
        enable = self.enable

        max_num_gen_batches = self.max_num_gen_batches

        metric = self.metric

        field_dict: dict[str, Any] = {}

        field_dict.update({})
        if enable is not UNSET:
            field_dict["enable"] = enable
        if max_num_gen_batches is not UNSET:
            field_dict["max_num_gen_batches"] = max_num_gen_batches
        if metric is not UNSET:
            field_dict["metric"] = metric

        return field_dict

    @classmethod
    def from_dict(cls: type[T], src_dict: Mapping[str, Any]) -> T:
        d = dict(src_dict)
        enable = d.pop("enable", UNSET)

        max_num_gen_batches = d.pop("max_num_gen_batches", UNSET)

        metric = cast(Literal["score"] | Unset, d.pop("metric", UNSET))
        if metric != "score" and not isinstance(metric, Unset):
            raise ValueError(f"metric must match const 'score', got '{metric}'")

        filter_groups_config = cls(
            enable=enable,
            max_num_gen_batches=max_num_gen_batches,
            metric=metric,
        )

        return filter_groups_config
