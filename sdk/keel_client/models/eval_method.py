from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, Literal, TypeVar, cast

from attrs import define as _attrs_define

from ..types import UNSET, Unset

if TYPE_CHECKING:
    from ..models.eval_config import EvalConfig
    from ..models.reward_spec import RewardSpec


T = TypeVar("T", bound="EvalMethod")


@_attrs_define
class EvalMethod:
    """Evaluate `model` on prompts (file purpose `prompts`): sample `rollout.n` responses per prompt and
    score them with `reward`. Reports `eval/reward/mean`, pass@k (rule rewards) and, with `compare_to`,
    the win rate against that model; writes an `eval_results` file (`result_files`); no output model.

        Attributes:
            reward (RewardSpec): PPO's reward: a reward model, or a rule function for verifiable tasks. Exactly one of the
                two.
            type_ (Literal['eval']):
            compare_to (None | str | Unset): A model whose responses to the same prompts (same sampling) are judged against
                `model`'s by `reward`:
                `eval/win_rate` (win 1, tie 0.5, loss 0) and its standard error `eval/win_rate_se`.
            hyperparameters (EvalConfig | Unset): Evaluation: sample responses to prompts and score them (no training, no
                output model).
            overrides (list[str] | Unset): VERL-style dotted overrides (`actor_rollout_ref.actor.ppo_epochs=4`), applied
                over `hyperparameters` (the `actor_rollout_ref.` prefix is dropped; values are JSON or YAML scalars). Always
                empty in responses: `hyperparameters` shows the result.
    """

    reward: RewardSpec
    type_: Literal["eval"]
    compare_to: None | str | Unset = UNSET
    hyperparameters: EvalConfig | Unset = UNSET
    overrides: list[str] | Unset = UNSET

    def to_dict(self) -> dict[str, Any]:
        reward = self.reward.to_dict()

        type_ = self.type_

        compare_to: None | str | Unset
        if isinstance(self.compare_to, Unset):
            compare_to = UNSET
        else:
            compare_to = self.compare_to

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
        if compare_to is not UNSET:
            field_dict["compare_to"] = compare_to
        if hyperparameters is not UNSET:
            field_dict["hyperparameters"] = hyperparameters
        if overrides is not UNSET:
            field_dict["overrides"] = overrides

        return field_dict

    @classmethod
    def from_dict(cls: type[T], src_dict: Mapping[str, Any]) -> T:
        from ..models.eval_config import EvalConfig  # noqa: PLC0415
        from ..models.reward_spec import RewardSpec  # noqa: PLC0415

        d = dict(src_dict)
        reward = RewardSpec.from_dict(d.pop("reward"))

        type_ = cast(Literal["eval"], d.pop("type"))
        if type_ != "eval":
            raise ValueError(f"type must match const 'eval', got '{type_}'")

        def _parse_compare_to(data: object) -> None | str | Unset:
            if data is None:
                return data
            if isinstance(data, Unset):
                return data
            return cast(None | str | Unset, data)

        compare_to = _parse_compare_to(d.pop("compare_to", UNSET))

        _hyperparameters = d.pop("hyperparameters", UNSET)
        hyperparameters: EvalConfig | Unset
        if isinstance(_hyperparameters, Unset):
            hyperparameters = UNSET
        else:
            hyperparameters = EvalConfig.from_dict(_hyperparameters)

        overrides = cast(list[str], d.pop("overrides", UNSET))

        eval_method = cls(
            reward=reward,
            type_=type_,
            compare_to=compare_to,
            hyperparameters=hyperparameters,
            overrides=overrides,
        )

        return eval_method
