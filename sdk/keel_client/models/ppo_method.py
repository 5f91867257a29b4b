from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, Literal, TypeVar, cast

from attrs import define as _attrs_define

from ..types import UNSET, Unset

if TYPE_CHECKING:
    from ..models.ppo_config import PPOConfig
    from ..models.reward_spec import RewardSpec


T = TypeVar("T", bound="PPOMethod")


@_attrs_define
class PPOMethod:
    """PPO on prompts (file purpose `prompts`) against a reward model or a rule reward.

    Attributes:
        reward (RewardSpec): PPO's reward: a reward model, or a rule function for verifiable tasks. Exactly one of the
            two.
        type_ (Literal['ppo']):
        hyperparameters (PPOConfig | Unset): PPO with Actor / Critic / Reference / Reward roles (VERL's ppo_trainer
            config, trimmed).
        overrides (list[str] | Unset): VERL-style dotted overrides (`actor_rollout_ref.actor.ppo_epochs=4`), applied
            over `hyperparameters` (the `actor_rollout_ref.` prefix is dropped; values are JSON or YAML scalars). Always
            empty in responses: `hyperparameters` shows the result.
    """

    reward: RewardSpec
    type_: Literal["ppo"]
    hyperparameters: PPOConfig | Unset = UNSET
    overrides: list[str] | Unset = UNSET

    def to_dict(self) -> dict[str, Any]:
        reward = self.reward.to_dict()

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
                "reward": reward,
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
        from ..models.ppo_config import PPOConfig  # noqa: PLC0415
        from ..models.reward_spec import RewardSpec  # noqa: PLC0415

        d = dict(src_dict)
        reward = RewardSpec.from_dict(d.pop("reward"))

        type_ = cast(Literal["ppo"], d.pop("type"))
        if type_ != "ppo":
            raise ValueError(f"type must match const 'ppo', got '{type_}'")

        _hyperparameters = d.pop("hyperparameters", UNSET)
        hyperparameters: PPOConfig | Unset
        if isinstance(_hyperparameters, Unset):
            hyperparameters = UNSET
        else:
            hyperparameters = PPOConfig.from_dict(_hyperparameters)

        overrides = cast(list[str], d.pop("overrides", UNSET))

        ppo_method = cls(
            reward=reward,
            type_=type_,
            hyperparameters=hyperparameters,
            overrides=overrides,
        )

        return ppo_method
