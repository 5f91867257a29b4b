from __future__ import annotations

from collections.abc import Mapping
from typing import Any, TypeVar, cast

from attrs import define as _attrs_define

from ..models.dpo_optim_config_lr_scheduler_type import DPOOptimConfigLrSchedulerType
from ..types import UNSET, Unset

T = TypeVar("T", bound="DPOOptimConfig")


@_attrs_define
class DPOOptimConfig:
    """`OptimConfig` for DPO (a policy learning rate, as TRL's default).

    Attributes:
        betas (list[float] | Unset):
        grad_clip (float | Unset): Max global gradient norm (0 disables clipping). Default: 1.0.
        lr (float | Unset): Peak learning rate. Default: 1e-06.
        lr_scheduler_type (DPOOptimConfigLrSchedulerType | Unset):  Default: DPOOptimConfigLrSchedulerType.CONSTANT.
        lr_warmup_steps_ratio (float | Unset): Share of total steps spent warming up linearly from 0. Default: 0.0.
        min_lr_ratio (float | Unset): Floor of the cosine/linear decay as a share of `lr`. Default: 0.0.
        weight_decay (float | Unset):  Default: 0.0.
    """

    betas: list[float] | Unset = UNSET
    grad_clip: float | Unset = 1.0
    lr: float | Unset = 1e-06
    lr_scheduler_type: DPOOptimConfigLrSchedulerType | Unset = DPOOptimConfigLrSchedulerType.CONSTANT
    lr_warmup_steps_ratio: float | Unset = 0.0
    min_lr_ratio: float | Unset = 0.0
    weight_decay: float | Unset = 0.0

    def to_dict(self) -> dict[str, Any]:
        betas: list[float] | Unset = UNSET
        if not isinstance(self.betas, Unset):
            betas = []
            for betas_item_data in self.betas:
                betas_item: float
                betas_item = betas_item_data
                betas.append(betas_item)

        grad_clip = self.grad_clip

        lr = self.lr

        lr_scheduler_type: str | Unset = UNSET
        if not isinstance(self.lr_scheduler_type, Unset):
            lr_scheduler_type = self.lr_scheduler_type.value

        lr_warmup_steps_ratio = self.lr_warmup_steps_ratio

        min_lr_ratio = self.min_lr_ratio

        weight_decay = self.weight_decay

        field_dict: dict[str, Any] = {}

        field_dict.update({})
        if betas is not UNSET:
            field_dict["betas"] = betas
        if grad_clip is not UNSET:
            field_dict["grad_clip"] = grad_clip
        if lr is not UNSET:
            field_dict["lr"] = lr
        if lr_scheduler_type is not UNSET:
            field_dict["lr_scheduler_type"] = lr_scheduler_type
        if lr_warmup_steps_ratio is not UNSET:
            field_dict["lr_warmup_steps_ratio"] = lr_warmup_steps_ratio
        if min_lr_ratio is not UNSET:
            field_dict["min_lr_ratio"] = min_lr_ratio
        if weight_decay is not UNSET:
            field_dict["weight_decay"] = weight_decay

        return field_dict

    @classmethod
    def from_dict(cls: type[T], src_dict: Mapping[str, Any]) -> T:
        d = dict(src_dict)
        _betas = d.pop("betas", UNSET)
        betas: list[float] | Unset = UNSET
        if _betas is not UNSET:
            betas = []
            for betas_item_data in _betas:

                def _parse_betas_item(data: object) -> float:
                    return cast(float, data)

                betas_item = _parse_betas_item(betas_item_data)

                betas.append(betas_item)

        grad_clip = d.pop("grad_clip", UNSET)

        lr = d.pop("lr", UNSET)

        _lr_scheduler_type = d.pop("lr_scheduler_type", UNSET)
        lr_scheduler_type: DPOOptimConfigLrSchedulerType | Unset
        if isinstance(_lr_scheduler_type, Unset):
            lr_scheduler_type = UNSET
        else:
            lr_scheduler_type = DPOOptimConfigLrSchedulerType(_lr_scheduler_type)

        lr_warmup_steps_ratio = d.pop("lr_warmup_steps_ratio", UNSET)

        min_lr_ratio = d.pop("min_lr_ratio", UNSET)

        weight_decay = d.pop("weight_decay", UNSET)

        dpo_optim_config = cls(
            betas=betas,
            grad_clip=grad_clip,
            lr=lr,
            lr_scheduler_type=lr_scheduler_type,
            lr_warmup_steps_ratio=lr_warmup_steps_ratio,
            min_lr_ratio=min_lr_ratio,
            weight_decay=weight_decay,
        )

        return dpo_optim_config
