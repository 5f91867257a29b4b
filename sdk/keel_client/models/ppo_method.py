from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, Literal, TypeVar, cast

from attrs import define as _attrs_define

from ..types import UNSET, Unset

if TYPE_CHECKING:
    from ..models.environment_spec import EnvironmentSpec
    from ..models.ppo_config import PPOConfig
    from ..models.reward_spec import RewardSpec


T = TypeVar("T", bound="PPOMethod")


@_attrs_define
class PPOMethod:
    """PPO on prompts (file purpose `prompts`) against a reward model or a rule reward, or, with
    `hyperparameters.rollout.source: trajectories`, on the project's recorded and scored agent calls
    (no `reward`: each trajectory's posted reward; docs/trajectories.md).

        Attributes:
            type_ (Literal['ppo']):
            environment (EnvironmentSpec | None | Unset): With `hyperparameters.rollout.multi_turn.enable`: every prompt's
                episode environment (a row's
                `environment` column overrides it; docs/agentic-rl.md).
            hyperparameters (PPOConfig | Unset): PPO with Actor / Critic / Reference / Reward roles (VERL's ppo_trainer
                config, trimmed).
            overrides (list[str] | Unset): VERL-style dotted overrides (`actor_rollout_ref.actor.ppo_epochs=4`), applied
                over `hyperparameters` (the `actor_rollout_ref.` prefix is dropped; values are JSON or YAML scalars). Always
                empty in responses: `hyperparameters` shows the result.
            reward (None | RewardSpec | Unset): Required with `rollout.source: generate`; refused with `trajectories` (the
                posted rewards score them).
    """

    type_: Literal["ppo"]
    environment: EnvironmentSpec | None | Unset = UNSET
    hyperparameters: PPOConfig | Unset = UNSET
    overrides: list[str] | Unset = UNSET
    reward: None | RewardSpec | Unset = UNSET

    def to_dict(self) -> dict[str, Any]:
        from ..models.environment_spec import EnvironmentSpec  # noqa: PLC0415
        from ..models.reward_spec import RewardSpec  # noqa: PLC0415

        type_ = self.type_

        environment: dict[str, Any] | None | Unset
        if isinstance(self.environment, Unset):
            environment = UNSET
        elif isinstance(self.environment, EnvironmentSpec):
            environment = self.environment.to_dict()
        else:
            environment = self.environment

        hyperparameters: dict[str, Any] | Unset = UNSET
        if not isinstance(self.hyperparameters, Unset):
            hyperparameters = self.hyperparameters.to_dict()

        overrides: list[str] | Unset = UNSET
        if not isinstance(self.overrides, Unset):
            overrides = self.overrides

        reward: dict[str, Any] | None | Unset
        if isinstance(self.reward, Unset):
            reward = UNSET
        elif isinstance(self.reward, RewardSpec):
            reward = self.reward.to_dict()
        else:
            reward = self.reward

        field_dict: dict[str, Any] = {}

        field_dict.update(
            {
                "type": type_,
            }
        )
        if environment is not UNSET:
            field_dict["environment"] = environment
        if hyperparameters is not UNSET:
            field_dict["hyperparameters"] = hyperparameters
        if overrides is not UNSET:
            field_dict["overrides"] = overrides
        if reward is not UNSET:
            field_dict["reward"] = reward

        return field_dict

    @classmethod
    def from_dict(cls: type[T], src_dict: Mapping[str, Any]) -> T:
        from ..models.environment_spec import EnvironmentSpec  # noqa: PLC0415
        from ..models.ppo_config import PPOConfig  # noqa: PLC0415
        from ..models.reward_spec import RewardSpec  # noqa: PLC0415

        d = dict(src_dict)
        type_ = cast(Literal["ppo"], d.pop("type"))
        if type_ != "ppo":
            raise ValueError(f"type must match const 'ppo', got '{type_}'")

        def _parse_environment(data: object) -> EnvironmentSpec | None | Unset:
            if data is None:
                return data
            if isinstance(data, Unset):
                return data
            try:
                if not isinstance(data, dict):
                    raise TypeError()
                environment_type_0 = EnvironmentSpec.from_dict(data)

                return environment_type_0
            except (TypeError, ValueError, AttributeError, KeyError):
                pass
            return cast(EnvironmentSpec | None | Unset, data)

        environment = _parse_environment(d.pop("environment", UNSET))

        _hyperparameters = d.pop("hyperparameters", UNSET)
        hyperparameters: PPOConfig | Unset
        if isinstance(_hyperparameters, Unset):
            hyperparameters = UNSET
        else:
            hyperparameters = PPOConfig.from_dict(_hyperparameters)

        overrides = cast(list[str], d.pop("overrides", UNSET))

        def _parse_reward(data: object) -> None | RewardSpec | Unset:
            if data is None:
                return data
            if isinstance(data, Unset):
                return data
            try:
                if not isinstance(data, dict):
                    raise TypeError()
                reward_type_0 = RewardSpec.from_dict(data)

                return reward_type_0
            except (TypeError, ValueError, AttributeError, KeyError):
                pass
            return cast(None | RewardSpec | Unset, data)

        reward = _parse_reward(d.pop("reward", UNSET))

        ppo_method = cls(
            type_=type_,
            environment=environment,
            hyperparameters=hyperparameters,
            overrides=overrides,
            reward=reward,
        )

        return ppo_method
