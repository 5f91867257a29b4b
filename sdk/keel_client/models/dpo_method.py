from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, Literal, TypeVar, cast

from attrs import define as _attrs_define

from ..types import UNSET, Unset

if TYPE_CHECKING:
    from ..models.dpo_config import DPOConfig


T = TypeVar("T", bound="DPOMethod")


@_attrs_define
class DPOMethod:
    """Offline preference optimisation of the policy `model` on preference pairs (file purpose
    `preference`): DPO, conservative DPO (`label_smoothing`) or IPO (`loss_type: ipo`); the reference is
    `model` itself, frozen. The output is a policy.

        Attributes:
            type_ (Literal['dpo']):
            hyperparameters (DPOConfig | Unset): Offline preference optimisation of a policy on preference pairs (TRL's
                names): DPO, cDPO, IPO.

                The reference is the model at `model` (with LoRA: the same base, adapter off); its log-probs are
                computed once before training and cached beside the checkpoints.
            overrides (list[str] | Unset): VERL-style dotted overrides (`actor_rollout_ref.actor.ppo_epochs=4`), applied
                over `hyperparameters` (the `actor_rollout_ref.` prefix is dropped; values are JSON or YAML scalars). Always
                empty in responses: `hyperparameters` shows the result.
    """

    type_: Literal["dpo"]
    hyperparameters: DPOConfig | Unset = UNSET
    overrides: list[str] | Unset = UNSET

    def to_dict(self) -> dict[str, Any]:
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
        from ..models.dpo_config import DPOConfig  # noqa: PLC0415

        d = dict(src_dict)
        type_ = cast(Literal["dpo"], d.pop("type"))
        if type_ != "dpo":
            raise ValueError(f"type must match const 'dpo', got '{type_}'")

        _hyperparameters = d.pop("hyperparameters", UNSET)
        hyperparameters: DPOConfig | Unset
        if isinstance(_hyperparameters, Unset):
            hyperparameters = UNSET
        else:
            hyperparameters = DPOConfig.from_dict(_hyperparameters)

        overrides = cast(list[str], d.pop("overrides", UNSET))

        dpo_method = cls(
            type_=type_,
            hyperparameters=hyperparameters,
            overrides=overrides,
        )

        return dpo_method
