from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, Literal, TypeVar, cast

from attrs import define as _attrs_define

from ..types import UNSET, Unset

if TYPE_CHECKING:
    from ..models.rm_distill_config import RMDistillConfig


T = TypeVar("T", bound="RMDistillMethod")


@_attrs_define
class RMDistillMethod:
    """Distil a teacher reward model into the (smaller, LoRA) `model` on preference pairs.

    Attributes:
        teacher (str): A Keel model id (`model-...`) or checkpoint id (`ckpt-...`: its Hugging Face export) of this
            project, a hub id (`org/name`), or an absolute directory under one of the deployment's model roots.
        type_ (Literal['rm_distill']):
        hyperparameters (RMDistillConfig | Unset): Distil a teacher reward model's pairwise preferences into a (LoRA)
            student.
        overrides (list[str] | Unset): VERL-style dotted overrides (`actor_rollout_ref.actor.ppo_epochs=4`), applied
            over `hyperparameters` (the `actor_rollout_ref.` prefix is dropped; values are JSON or YAML scalars). Always
            empty in responses: `hyperparameters` shows the result.
    """

    teacher: str
    type_: Literal["rm_distill"]
    hyperparameters: RMDistillConfig | Unset = UNSET
    overrides: list[str] | Unset = UNSET

    def to_dict(self) -> dict[str, Any]:
        teacher = self.teacher

        type_ = self.type_

        hyperparameters: dict[str, Any] | Unset = UNSET
        if not isinstance(self.hyperparameters, Unset):
            hyperparameters = self.hyperparameters.to_dict()

        overrides: list[str] | Unset = UNSET
        if not isinstance(self.overrides, Unset):
            overrides = self.overrides

        field_dict: dict[str, Any] = {}

        field_dict.update(
            {
                "teacher": teacher,
                "type": type_,
            }
        )
        if hyperparameters is not UNSET:
            field_dict["hyperparameters"] = hyperparameters
        if overrides is not UNSET:
            field_dict["overrides"] = overrides

        return field_dict

    @classmethod
    def from_dict(cls: type[T], src_dict: Mapping[str, Any]) -> T:
        from ..models.rm_distill_config import RMDistillConfig  # noqa: PLC0415

        d = dict(src_dict)
        teacher = d.pop("teacher")

        type_ = cast(Literal["rm_distill"], d.pop("type"))
        if type_ != "rm_distill":
            raise ValueError(f"type must match const 'rm_distill', got '{type_}'")

        _hyperparameters = d.pop("hyperparameters", UNSET)
        hyperparameters: RMDistillConfig | Unset
        if isinstance(_hyperparameters, Unset):
            hyperparameters = UNSET
        else:
            hyperparameters = RMDistillConfig.from_dict(_hyperparameters)

        overrides = cast(list[str], d.pop("overrides", UNSET))

        rm_distill_method = cls(
            teacher=teacher,
            type_=type_,
            hyperparameters=hyperparameters,
            overrides=overrides,
        )

        return rm_distill_method
