from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, TypeVar

from attrs import define as _attrs_define

from ..types import UNSET, Unset

if TYPE_CHECKING:
    from ..models.actor_config import ActorConfig
    from ..models.algorithm_config import AlgorithmConfig
    from ..models.critic_config import CriticConfig
    from ..models.data_config import DataConfig
    from ..models.distill_config import DistillConfig
    from ..models.guardrail_config import GuardrailConfig
    from ..models.model_config import ModelConfig
    from ..models.ppo_trainer_config import PPOTrainerConfig
    from ..models.ref_config import RefConfig
    from ..models.reward_shaping_config import RewardShapingConfig
    from ..models.rollout_config import RolloutConfig


T = TypeVar("T", bound="DistillPolicyConfig")


@_attrs_define
class DistillPolicyConfig:
    """PPO's hyperparameters with a `distill` section; by default each token's advantage is its own
    reward whitened over the batch (REINFORCE++, gamma 0) and no KL to the reference in the reward.

        Attributes:
            actor (ActorConfig | Unset): PPO actor update (VERL: `actor_rollout_ref.actor`).
            algorithm (AlgorithmConfig | Unset): Advantage estimation and KL-in-reward (VERL: `algorithm`).
            critic (CriticConfig | Unset): PPO value model (VERL: `critic`).
            data (DataConfig | Unset): Batching and lengths (VERL: `data`).
            distill (DistillConfig | Unset): The reward: per token `-reverse_kl_coef * (log p_student - log p_teacher)`,
                plus
                `task_reward_weight` times the task reward (`method.reward`) on the last token.
            guardrails (GuardrailConfig | Unset): The recipe's monitoring points, enforced.
            model (ModelConfig | Unset): How the trained model is loaded (VERL: `actor_rollout_ref.model`).
            ref (RefConfig | Unset): The reference policy's workers (VERL: `actor_rollout_ref.ref`).
            reward (RewardShapingConfig | Unset): What is done to every sequence score before advantages (VERL:
                `reward_model`).
            rollout (RolloutConfig | Unset): Sampling (VERL: `actor_rollout_ref.rollout`).
            trainer (PPOTrainerConfig | Unset): `TrainerConfig` for PPO (3 epochs by default, as in the recipe).
    """

    actor: ActorConfig | Unset = UNSET
    algorithm: AlgorithmConfig | Unset = UNSET
    critic: CriticConfig | Unset = UNSET
    data: DataConfig | Unset = UNSET
    distill: DistillConfig | Unset = UNSET
    guardrails: GuardrailConfig | Unset = UNSET
    model: ModelConfig | Unset = UNSET
    ref: RefConfig | Unset = UNSET
    reward: RewardShapingConfig | Unset = UNSET
    rollout: RolloutConfig | Unset = UNSET
    trainer: PPOTrainerConfig | Unset = UNSET

    def to_dict(self) -> dict[str, Any]:
        actor: dict[str, Any] | Unset = UNSET
        if not isinstance(self.actor, Unset):
            actor = self.actor.to_dict()

        algorithm: dict[str, Any] | Unset = UNSET
        if not isinstance(self.algorithm, Unset):
            algorithm = self.algorithm.to_dict()

        critic: dict[str, Any] | Unset = UNSET
        if not isinstance(self.critic, Unset):
            critic = self.critic.to_dict()

        data: dict[str, Any] | Unset = UNSET
        if not isinstance(self.data, Unset):
            data = self.data.to_dict()

        distill: dict[str, Any] | Unset = UNSET
        if not isinstance(self.distill, Unset):
            distill = self.distill.to_dict()

        guardrails: dict[str, Any] | Unset = UNSET
        if not isinstance(self.guardrails, Unset):
            guardrails = self.guardrails.to_dict()

        model: dict[str, Any] | Unset = UNSET
        if not isinstance(self.model, Unset):
            model = self.model.to_dict()

        ref: dict[str, Any] | Unset = UNSET
        if not isinstance(self.ref, Unset):
            ref = self.ref.to_dict()

        reward: dict[str, Any] | Unset = UNSET
        if not isinstance(self.reward, Unset):
            reward = self.reward.to_dict()

        rollout: dict[str, Any] | Unset = UNSET
        if not isinstance(self.rollout, Unset):
            rollout = self.rollout.to_dict()

        trainer: dict[str, Any] | Unset = UNSET
        if not isinstance(self.trainer, Unset):
            trainer = self.trainer.to_dict()

        field_dict: dict[str, Any] = {}

        field_dict.update({})
        if actor is not UNSET:
            field_dict["actor"] = actor
        if algorithm is not UNSET:
            field_dict["algorithm"] = algorithm
        if critic is not UNSET:
            field_dict["critic"] = critic
        if data is not UNSET:
            field_dict["data"] = data
        if distill is not UNSET:
            field_dict["distill"] = distill
        if guardrails is not UNSET:
            field_dict["guardrails"] = guardrails
        if model is not UNSET:
            field_dict["model"] = model
        if ref is not UNSET:
            field_dict["ref"] = ref
        if reward is not UNSET:
            field_dict["reward"] = reward
        if rollout is not UNSET:
            field_dict["rollout"] = rollout
        if trainer is not UNSET:
            field_dict["trainer"] = trainer

        return field_dict

    @classmethod
    def from_dict(cls: type[T], src_dict: Mapping[str, Any]) -> T:
        from ..models.actor_config import ActorConfig  # noqa: PLC0415
        from ..models.algorithm_config import AlgorithmConfig  # noqa: PLC0415
        from ..models.critic_config import CriticConfig  # noqa: PLC0415
        from ..models.data_config import DataConfig  # noqa: PLC0415
        from ..models.distill_config import DistillConfig  # noqa: PLC0415
        from ..models.guardrail_config import GuardrailConfig  # noqa: PLC0415
        from ..models.model_config import ModelConfig  # noqa: PLC0415
        from ..models.ppo_trainer_config import PPOTrainerConfig  # noqa: PLC0415
        from ..models.ref_config import RefConfig  # noqa: PLC0415
        from ..models.reward_shaping_config import RewardShapingConfig  # noqa: PLC0415
        from ..models.rollout_config import RolloutConfig  # noqa: PLC0415

        d = dict(src_dict)
        _actor = d.pop("actor", UNSET)
        actor: ActorConfig | Unset
        if isinstance(_actor, Unset):
            actor = UNSET
        else:
            actor = ActorConfig.from_dict(_actor)

        _algorithm = d.pop("algorithm", UNSET)
        algorithm: AlgorithmConfig | Unset
        if isinstance(_algorithm, Unset):
            algorithm = UNSET
        else:
            algorithm = AlgorithmConfig.from_dict(_algorithm)

        _critic = d.pop("critic", UNSET)
        critic: CriticConfig | Unset
        if isinstance(_critic, Unset):
            critic = UNSET
        else:
            critic = CriticConfig.from_dict(_critic)

        _data = d.pop("data", UNSET)
        data: DataConfig | Unset
        if isinstance(_data, Unset):
            data = UNSET
        else:
            data = DataConfig.from_dict(_data)

        _distill = d.pop("distill", UNSET)
        distill: DistillConfig | Unset
        if isinstance(_distill, Unset):
            distill = UNSET
        else:
            distill = DistillConfig.from_dict(_distill)

        _guardrails = d.pop("guardrails", UNSET)
        guardrails: GuardrailConfig | Unset
        if isinstance(_guardrails, Unset):
            guardrails = UNSET
        else:
            guardrails = GuardrailConfig.from_dict(_guardrails)

        _model = d.pop("model", UNSET)
        model: ModelConfig | Unset
        if isinstance(_model, Unset):
            model = UNSET
        else:
            model = ModelConfig.from_dict(_model)

        _ref = d.pop("ref", UNSET)
        ref: RefConfig | Unset
        if isinstance(_ref, Unset):
            ref = UNSET
        else:
            ref = RefConfig.from_dict(_ref)

        _reward = d.pop("reward", UNSET)
        reward: RewardShapingConfig | Unset
        if isinstance(_reward, Unset):
            reward = UNSET
        else:
            reward = RewardShapingConfig.from_dict(_reward)

        _rollout = d.pop("rollout", UNSET)
        rollout: RolloutConfig | Unset
        if isinstance(_rollout, Unset):
            rollout = UNSET
        else:
            rollout = RolloutConfig.from_dict(_rollout)

        _trainer = d.pop("trainer", UNSET)
        trainer: PPOTrainerConfig | Unset
        if isinstance(_trainer, Unset):
            trainer = UNSET
        else:
            trainer = PPOTrainerConfig.from_dict(_trainer)

        distill_policy_config = cls(
            actor=actor,
            algorithm=algorithm,
            critic=critic,
            data=data,
            distill=distill,
            guardrails=guardrails,
            model=model,
            ref=ref,
            reward=reward,
            rollout=rollout,
            trainer=trainer,
        )

        return distill_policy_config
