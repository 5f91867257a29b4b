from __future__ import annotations

from collections.abc import Mapping
from typing import Any, TypeVar, cast

from attrs import define as _attrs_define

from ..models.rollout_correction_config_rollout_is_type_0 import RolloutCorrectionConfigRolloutIsType0
from ..models.rollout_correction_config_rollout_rs_type_0 import RolloutCorrectionConfigRolloutRsType0
from ..types import UNSET, Unset

T = TypeVar("T", bound="RolloutCorrectionConfig")


@_attrs_define
class RolloutCorrectionConfig:
    """Correct for the gap between the rollout engine's log-probs and the trainer's on the same
    tokens (VERL: `algorithm.rollout_correction`; Liu, Li et al. 2025, "When Speed Kills
    Stability"): importance weights pi_old / pi_rollout in the policy loss.

        Attributes:
            rollout_is (None | RolloutCorrectionConfigRolloutIsType0 | Unset): Truncated importance sampling (TIS): each
                token (`token`) or each sequence (`sequence`, the
                product over its tokens) weighted by the ratio, capped at `rollout_is_threshold` (None: off).
                Unset, with neither it nor `rollout_rs` given and `rollout.mode` one_step_off or async: `token`
                (stale samples; an explicit null keeps it off).
            rollout_is_threshold (float | Unset): Upper cap of the importance weights. Default: 2.0.
            rollout_rs (None | RolloutCorrectionConfigRolloutRsType0 | Unset): Masked importance sampling (MIS, rejection):
                tokens (`token`) or whole sequences (`sequence`)
                whose ratio lies outside [1 / rollout_rs_threshold, rollout_rs_threshold] leave the loss (None: off).
            rollout_rs_threshold (float | Unset): Rejection bound (> 1). Default: 2.0.
    """

    rollout_is: None | RolloutCorrectionConfigRolloutIsType0 | Unset = UNSET
    rollout_is_threshold: float | Unset = 2.0
    rollout_rs: None | RolloutCorrectionConfigRolloutRsType0 | Unset = UNSET
    rollout_rs_threshold: float | Unset = 2.0

    def to_dict(self) -> dict[str, Any]:
        rollout_is: None | str | Unset
        if isinstance(self.rollout_is, Unset):
            rollout_is = UNSET
        elif isinstance(self.rollout_is, RolloutCorrectionConfigRolloutIsType0):
            rollout_is = self.rollout_is.value
        else:
            rollout_is = self.rollout_is

        rollout_is_threshold = self.rollout_is_threshold

        rollout_rs: None | str | Unset
        if isinstance(self.rollout_rs, Unset):
            rollout_rs = UNSET
        elif isinstance(self.rollout_rs, RolloutCorrectionConfigRolloutRsType0):
            rollout_rs = self.rollout_rs.value
        else:
            rollout_rs = self.rollout_rs

        rollout_rs_threshold = self.rollout_rs_threshold

        field_dict: dict[str, Any] = {}

        field_dict.update({})
        if rollout_is is not UNSET:
            field_dict["rollout_is"] = rollout_is
        if rollout_is_threshold is not UNSET:
            field_dict["rollout_is_threshold"] = rollout_is_threshold
        if rollout_rs is not UNSET:
            field_dict["rollout_rs"] = rollout_rs
        if rollout_rs_threshold is not UNSET:
            field_dict["rollout_rs_threshold"] = rollout_rs_threshold

        return field_dict

    @classmethod
    def from_dict(cls: type[T], src_dict: Mapping[str, Any]) -> T:
        d = dict(src_dict)

        def _parse_rollout_is(data: object) -> None | RolloutCorrectionConfigRolloutIsType0 | Unset:
            if data is None:
                return data
            if isinstance(data, Unset):
                return data
            try:
                if not isinstance(data, str):
                    raise TypeError()
                rollout_is_type_0 = RolloutCorrectionConfigRolloutIsType0(data)

                return rollout_is_type_0
            except (TypeError, ValueError, AttributeError, KeyError):
                pass
            return cast(None | RolloutCorrectionConfigRolloutIsType0 | Unset, data)

        rollout_is = _parse_rollout_is(d.pop("rollout_is", UNSET))

        rollout_is_threshold = d.pop("rollout_is_threshold", UNSET)

        def _parse_rollout_rs(data: object) -> None | RolloutCorrectionConfigRolloutRsType0 | Unset:
            if data is None:
                return data
            if isinstance(data, Unset):
                return data
            try:
                if not isinstance(data, str):
                    raise TypeError()
                rollout_rs_type_0 = RolloutCorrectionConfigRolloutRsType0(data)

                return rollout_rs_type_0
            except (TypeError, ValueError, AttributeError, KeyError):
                pass
            return cast(None | RolloutCorrectionConfigRolloutRsType0 | Unset, data)

        rollout_rs = _parse_rollout_rs(d.pop("rollout_rs", UNSET))

        rollout_rs_threshold = d.pop("rollout_rs_threshold", UNSET)

        rollout_correction_config = cls(
            rollout_is=rollout_is,
            rollout_is_threshold=rollout_is_threshold,
            rollout_rs=rollout_rs,
            rollout_rs_threshold=rollout_rs_threshold,
        )

        return rollout_correction_config
