from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, Literal, TypeVar, cast

from attrs import define as _attrs_define

from ..types import UNSET, Unset

if TYPE_CHECKING:
    from ..models.reward_model_config import RewardModelConfig


T = TypeVar("T", bound="RewardModelMethod")


@_attrs_define
class RewardModelMethod:
    """A Bradley-Terry reward model trained on preference pairs (file purpose `preference`).

    Attributes:
        type_ (Literal['reward_model']):
        hyperparameters (RewardModelConfig | Unset): Bradley-Terry reward model: -log sigmoid(r_chosen - r_rejected -
            margin).
        overrides (list[str] | Unset): VERL-style dotted overrides (`actor_rollout_ref.actor.ppo_epochs=4`), applied
            over `hyperparameters` (the `actor_rollout_ref.` prefix is dropped; values are JSON or YAML scalars). Always
            empty in responses: `hyperparameters` shows the result.
    """

    type_: Literal["reward_model"]
    hyperparameters: RewardModelConfig | Unset = UNSET
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
        from ..models.reward_model_config import RewardModelConfig  # noqa: PLC0415

        d = dict(src_dict)
        type_ = cast(Literal["reward_model"], d.pop("type"))
        if type_ != "reward_model":
            raise ValueError(f"type must match const 'reward_model', got '{type_}'")

        _hyperparameters = d.pop("hyperparameters", UNSET)
        hyperparameters: RewardModelConfig | Unset
        if isinstance(_hyperparameters, Unset):
            hyperparameters = UNSET
        else:
            hyperparameters = RewardModelConfig.from_dict(_hyperparameters)

        overrides = cast(list[str], d.pop("overrides", UNSET))

        reward_model_method = cls(
            type_=type_,
            hyperparameters=hyperparameters,
            overrides=overrides,
        )

        return reward_model_method
