from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, Literal, TypeVar, cast

from attrs import define as _attrs_define

from ..types import UNSET, Unset

if TYPE_CHECKING:
    from ..models.sft_config import SFTConfig


T = TypeVar("T", bound="SFTMethod")


@_attrs_define
class SFTMethod:
    """Supervised fine-tuning on `prompt`/`response` rows (file purpose `sft`).

    Attributes:
        type_ (Literal['sft']):
        hyperparameters (SFTConfig | Unset): Supervised fine-tuning: causal-LM loss on response tokens only.
        overrides (list[str] | Unset): VERL-style dotted overrides (`actor_rollout_ref.actor.ppo_epochs=4`), applied
            over `hyperparameters` (the `actor_rollout_ref.` prefix is dropped; values are JSON or YAML scalars). Always
            empty in responses: `hyperparameters` shows the result.
    """

    type_: Literal["sft"]
    hyperparameters: SFTConfig | Unset = UNSET
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
        from ..models.sft_config import SFTConfig  # noqa: PLC0415

        d = dict(src_dict)
        type_ = cast(Literal["sft"], d.pop("type"))
        if type_ != "sft":
            raise ValueError(f"type must match const 'sft', got '{type_}'")

        _hyperparameters = d.pop("hyperparameters", UNSET)
        hyperparameters: SFTConfig | Unset
        if isinstance(_hyperparameters, Unset):
            hyperparameters = UNSET
        else:
            hyperparameters = SFTConfig.from_dict(_hyperparameters)

        overrides = cast(list[str], d.pop("overrides", UNSET))

        sft_method = cls(
            type_=type_,
            hyperparameters=hyperparameters,
            overrides=overrides,
        )

        return sft_method
