from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, Literal, TypeVar, cast

from attrs import define as _attrs_define

from ..types import UNSET, Unset

if TYPE_CHECKING:
    from ..models.distill_policy_config import DistillPolicyConfig
    from ..models.reward_spec import RewardSpec


T = TypeVar("T", bound="DistillPolicyMethod")


@_attrs_define
class DistillPolicyMethod:
    """On-policy distillation on prompts (file purpose `prompts`): the student (`model`) samples, the
    `teacher` scores each sampled token, and the student trains on the reverse KL to the teacher as a
    per-token reward (optionally plus `reward`, weighted by `distill.task_reward_weight`) with PPO's
    machinery. The teacher must use the student's tokenizer.

        Attributes:
            teacher (str): A Keel model id (`model-...`) or checkpoint id (`ckpt-...`: its Hugging Face export) of this
                project, a hub id (`org/name`), or an absolute directory under one of the deployment's model roots.
            type_ (Literal['distill_policy']):
            hyperparameters (DistillPolicyConfig | Unset): PPO's hyperparameters with a `distill` section; by default each
                token's advantage is its own
                reward whitened over the batch (REINFORCE++, gamma 0) and no KL to the reference in the reward.
            overrides (list[str] | Unset): VERL-style dotted overrides (`actor_rollout_ref.actor.ppo_epochs=4`), applied
                over `hyperparameters` (the `actor_rollout_ref.` prefix is dropped; values are JSON or YAML scalars). Always
                empty in responses: `hyperparameters` shows the result.
            reward (None | RewardSpec | Unset): A task reward mixed in when `distill.task_reward_weight` > 0.
    """

    teacher: str
    type_: Literal["distill_policy"]
    hyperparameters: DistillPolicyConfig | Unset = UNSET
    overrides: list[str] | Unset = UNSET
    reward: None | RewardSpec | Unset = UNSET

    def to_dict(self) -> dict[str, Any]:
        from ..models.reward_spec import RewardSpec  # noqa: PLC0415

        teacher = self.teacher

        type_ = self.type_

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
                "teacher": teacher,
                "type": type_,
            }
        )
        if hyperparameters is not UNSET:
            field_dict["hyperparameters"] = hyperparameters
        if overrides is not UNSET:
            field_dict["overrides"] = overrides
        if reward is not UNSET:
            field_dict["reward"] = reward

        return field_dict

    @classmethod
    def from_dict(cls: type[T], src_dict: Mapping[str, Any]) -> T:
        from ..models.distill_policy_config import DistillPolicyConfig  # noqa: PLC0415
        from ..models.reward_spec import RewardSpec  # noqa: PLC0415

        d = dict(src_dict)
        teacher = d.pop("teacher")

        type_ = cast(Literal["distill_policy"], d.pop("type"))
        if type_ != "distill_policy":
            raise ValueError(f"type must match const 'distill_policy', got '{type_}'")

        _hyperparameters = d.pop("hyperparameters", UNSET)
        hyperparameters: DistillPolicyConfig | Unset
        if isinstance(_hyperparameters, Unset):
            hyperparameters = UNSET
        else:
            hyperparameters = DistillPolicyConfig.from_dict(_hyperparameters)

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

        distill_policy_method = cls(
            teacher=teacher,
            type_=type_,
            hyperparameters=hyperparameters,
            overrides=overrides,
            reward=reward,
        )

        return distill_policy_method
