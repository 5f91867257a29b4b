from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, TypeVar

from attrs import define as _attrs_define

from ..types import UNSET, Unset

if TYPE_CHECKING:
    from ..models.eval_data_config import EvalDataConfig
    from ..models.eval_model_config import EvalModelConfig
    from ..models.eval_rollout_config import EvalRolloutConfig


T = TypeVar("T", bound="EvalConfig")


@_attrs_define
class EvalConfig:
    """Evaluation: sample responses to prompts and score them (no training, no output model).

    Attributes:
        data (EvalDataConfig | Unset): What an evaluation reads, and how long its generations may be (VERL `data`
            names).
        model (EvalModelConfig | Unset): How the evaluated models are held: frozen, in `dtype`.
        pass_threshold (float | Unset): Rule rewards: a sample passes (for pass@k) when its score is at least this.
            Default: 1.0.
        rollout (EvalRolloutConfig | Unset): Sampling (VERL `actor_rollout_ref.rollout` names), with the `hf` backend.
    """

    data: EvalDataConfig | Unset = UNSET
    model: EvalModelConfig | Unset = UNSET
    pass_threshold: float | Unset = 1.0
    rollout: EvalRolloutConfig | Unset = UNSET

    def to_dict(self) -> dict[str, Any]:
        data: dict[str, Any] | Unset = UNSET
        if not isinstance(self.data, Unset):
            data = self.data.to_dict()

        model: dict[str, Any] | Unset = UNSET
        if not isinstance(self.model, Unset):
            model = self.model.to_dict()

        pass_threshold = self.pass_threshold

        rollout: dict[str, Any] | Unset = UNSET
        if not isinstance(self.rollout, Unset):
            rollout = self.rollout.to_dict()

        field_dict: dict[str, Any] = {}

        field_dict.update({})
        if data is not UNSET:
            field_dict["data"] = data
        if model is not UNSET:
            field_dict["model"] = model
        if pass_threshold is not UNSET:
            field_dict["pass_threshold"] = pass_threshold
        if rollout is not UNSET:
            field_dict["rollout"] = rollout

        return field_dict

    @classmethod
    def from_dict(cls: type[T], src_dict: Mapping[str, Any]) -> T:
        from ..models.eval_data_config import EvalDataConfig  # noqa: PLC0415
        from ..models.eval_model_config import EvalModelConfig  # noqa: PLC0415
        from ..models.eval_rollout_config import EvalRolloutConfig  # noqa: PLC0415

        d = dict(src_dict)
        _data = d.pop("data", UNSET)
        data: EvalDataConfig | Unset
        if isinstance(_data, Unset):
            data = UNSET
        else:
            data = EvalDataConfig.from_dict(_data)

        _model = d.pop("model", UNSET)
        model: EvalModelConfig | Unset
        if isinstance(_model, Unset):
            model = UNSET
        else:
            model = EvalModelConfig.from_dict(_model)

        pass_threshold = d.pop("pass_threshold", UNSET)

        _rollout = d.pop("rollout", UNSET)
        rollout: EvalRolloutConfig | Unset
        if isinstance(_rollout, Unset):
            rollout = UNSET
        else:
            rollout = EvalRolloutConfig.from_dict(_rollout)

        eval_config = cls(
            data=data,
            model=model,
            pass_threshold=pass_threshold,
            rollout=rollout,
        )

        return eval_config
