from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, TypeVar

from attrs import define as _attrs_define

from ..models.algorithm_config_adv_estimator import AlgorithmConfigAdvEstimator
from ..models.algorithm_config_kl_penalty import AlgorithmConfigKlPenalty
from ..types import UNSET, Unset

if TYPE_CHECKING:
    from ..models.filter_groups_config import FilterGroupsConfig
    from ..models.kl_control_config import KLControlConfig
    from ..models.rollout_correction_config import RolloutCorrectionConfig


T = TypeVar("T", bound="AlgorithmConfig")


@_attrs_define
class AlgorithmConfig:
    """Advantage estimation and KL-in-reward (VERL: `algorithm`).

    Attributes:
        adv_estimator (AlgorithmConfigAdvEstimator | Unset): `gae` trains a critic; the others are critic-free: `grpo`
            (and Dr. GRPO with
            `norm_adv_by_std_in_grpo: false`), `rloo`, `reinforce_plus_plus`, `reinforce_plus_plus_baseline`
            and `remax` (one extra greedy rollout per prompt as the baseline). Default: AlgorithmConfigAdvEstimator.GAE.
        filter_groups (FilterGroupsConfig | Unset): DAPO dynamic sampling (Yu et al. 2025, arXiv:2503.14476): drop
            prompt groups whose samples all
            scored the same (they carry no group-relative signal) and keep generating to fill the batch.
        gamma (float | Unset):  Default: 1.0.
        kl_ctrl (KLControlConfig | Unset): KL coefficient control (VERL: `algorithm.kl_ctrl`).
        kl_penalty (AlgorithmConfigKlPenalty | Unset):  Default: AlgorithmConfigKlPenalty.KL.
        lam (float | Unset):  Default: 0.95.
        norm_adv_by_std_in_grpo (bool | Unset):  Default: True.
        rollout_correction (RolloutCorrectionConfig | Unset): Correct for the gap between the rollout engine's log-probs
            and the trainer's on the same
            tokens (VERL: `algorithm.rollout_correction`; Liu, Li et al. 2025, "When Speed Kills
            Stability"): importance weights pi_old / pi_rollout in the policy loss.
        use_kl_in_reward (bool | Unset):  Default: True.
    """

    adv_estimator: AlgorithmConfigAdvEstimator | Unset = AlgorithmConfigAdvEstimator.GAE
    filter_groups: FilterGroupsConfig | Unset = UNSET
    gamma: float | Unset = 1.0
    kl_ctrl: KLControlConfig | Unset = UNSET
    kl_penalty: AlgorithmConfigKlPenalty | Unset = AlgorithmConfigKlPenalty.KL
    lam: float | Unset = 0.95
    norm_adv_by_std_in_grpo: bool | Unset = True
    rollout_correction: RolloutCorrectionConfig | Unset = UNSET
    use_kl_in_reward: bool | Unset = True

    def to_dict(self) -> dict[str, Any]:
        adv_estimator: str | Unset = UNSET
        if not isinstance(self.adv_estimator, Unset):
            adv_estimator = self.adv_estimator.value

        filter_groups: dict[str, Any] | Unset = UNSET
        if not isinstance(self.filter_groups, Unset):
            filter_groups = self.filter_groups.to_dict()

        gamma = self.gamma

        kl_ctrl: dict[str, Any] | Unset = UNSET
        if not isinstance(self.kl_ctrl, Unset):
            kl_ctrl = self.kl_ctrl.to_dict()

        kl_penalty: str | Unset = UNSET
        if not isinstance(self.kl_penalty, Unset):
            kl_penalty = self.kl_penalty.value

        lam = self.lam

        norm_adv_by_std_in_grpo = self.norm_adv_by_std_in_grpo

        rollout_correction: dict[str, Any] | Unset = UNSET
        if not isinstance(self.rollout_correction, Unset):
            rollout_correction = self.rollout_correction.to_dict()

        use_kl_in_reward = self.use_kl_in_reward

        field_dict: dict[str, Any] = {}

        field_dict.update({})
        if adv_estimator is not UNSET:
            field_dict["adv_estimator"] = adv_estimator
        if filter_groups is not UNSET:
            field_dict["filter_groups"] = filter_groups
        if gamma is not UNSET:
            field_dict["gamma"] = gamma
        if kl_ctrl is not UNSET:
            field_dict["kl_ctrl"] = kl_ctrl
        if kl_penalty is not UNSET:
            field_dict["kl_penalty"] = kl_penalty
        if lam is not UNSET:
            field_dict["lam"] = lam
        if norm_adv_by_std_in_grpo is not UNSET:
            field_dict["norm_adv_by_std_in_grpo"] = norm_adv_by_std_in_grpo
        if rollout_correction is not UNSET:
            field_dict["rollout_correction"] = rollout_correction
        if use_kl_in_reward is not UNSET:
            field_dict["use_kl_in_reward"] = use_kl_in_reward

        return field_dict

    @classmethod
    def from_dict(cls: type[T], src_dict: Mapping[str, Any]) -> T:
        from ..models.filter_groups_config import FilterGroupsConfig  # noqa: PLC0415
        from ..models.kl_control_config import KLControlConfig  # noqa: PLC0415
        from ..models.rollout_correction_config import RolloutCorrectionConfig  # noqa: PLC0415

        d = dict(src_dict)
        _adv_estimator = d.pop("adv_estimator", UNSET)
        adv_estimator: AlgorithmConfigAdvEstimator | Unset
        if isinstance(_adv_estimator, Unset):
            adv_estimator = UNSET
        else:
            adv_estimator = AlgorithmConfigAdvEstimator(_adv_estimator)

        _filter_groups = d.pop("filter_groups", UNSET)
        filter_groups: FilterGroupsConfig | Unset
        if isinstance(_filter_groups, Unset):
            filter_groups = UNSET
        else:
            filter_groups = FilterGroupsConfig.from_dict(_filter_groups)

        gamma = d.pop("gamma", UNSET)

        _kl_ctrl = d.pop("kl_ctrl", UNSET)
        kl_ctrl: KLControlConfig | Unset
        if isinstance(_kl_ctrl, Unset):
            kl_ctrl = UNSET
        else:
            kl_ctrl = KLControlConfig.from_dict(_kl_ctrl)

        _kl_penalty = d.pop("kl_penalty", UNSET)
        kl_penalty: AlgorithmConfigKlPenalty | Unset
        if isinstance(_kl_penalty, Unset):
            kl_penalty = UNSET
        else:
            kl_penalty = AlgorithmConfigKlPenalty(_kl_penalty)

        lam = d.pop("lam", UNSET)

        norm_adv_by_std_in_grpo = d.pop("norm_adv_by_std_in_grpo", UNSET)

        _rollout_correction = d.pop("rollout_correction", UNSET)
        rollout_correction: RolloutCorrectionConfig | Unset
        if isinstance(_rollout_correction, Unset):
            rollout_correction = UNSET
        else:
            rollout_correction = RolloutCorrectionConfig.from_dict(_rollout_correction)

        use_kl_in_reward = d.pop("use_kl_in_reward", UNSET)

        algorithm_config = cls(
            adv_estimator=adv_estimator,
            filter_groups=filter_groups,
            gamma=gamma,
            kl_ctrl=kl_ctrl,
            kl_penalty=kl_penalty,
            lam=lam,
            norm_adv_by_std_in_grpo=norm_adv_by_std_in_grpo,
            rollout_correction=rollout_correction,
            use_kl_in_reward=use_kl_in_reward,
        )

        return algorithm_config
