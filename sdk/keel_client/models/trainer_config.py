from __future__ import annotations

from collections.abc import Mapping
from typing import Any, TypeVar, cast

from attrs import define as _attrs_define

from ..types import UNSET, Unset

T = TypeVar("T", bound="TrainerConfig")


@_attrs_define
class TrainerConfig:
    """Loop length and cadence (VERL: `trainer`).

    Attributes:
        critic_warmup (int | Unset): PPO only: steps that train the critic before the actor starts updating. Default: 0.
        save_freq (int | Unset): Checkpoint every N steps (-1: only at the end). Default: -1.
        test_freq (int | Unset): Validate every N steps (-1: only at the end). Default: -1.
        total_epochs (int | Unset):  Default: 1.
        total_training_steps (int | None | Unset): Overrides `total_epochs` when set.
    """

    critic_warmup: int | Unset = 0
    save_freq: int | Unset = -1
    test_freq: int | Unset = -1
    total_epochs: int | Unset = 1
    total_training_steps: int | None | Unset = UNSET

    def to_dict(self) -> dict[str, Any]:
        critic_warmup = self.critic_warmup

        save_freq = self.save_freq

        test_freq = self.test_freq

        total_epochs = self.total_epochs

        total_training_steps: int | None | Unset
        if isinstance(self.total_training_steps, Unset):
            total_training_steps = UNSET
        else:
            total_training_steps = self.total_training_steps

        field_dict: dict[str, Any] = {}

        field_dict.update({})
        if critic_warmup is not UNSET:
            field_dict["critic_warmup"] = critic_warmup
        if save_freq is not UNSET:
            field_dict["save_freq"] = save_freq
        if test_freq is not UNSET:
            field_dict["test_freq"] = test_freq
        if total_epochs is not UNSET:
            field_dict["total_epochs"] = total_epochs
        if total_training_steps is not UNSET:
            field_dict["total_training_steps"] = total_training_steps

        return field_dict

    @classmethod
    def from_dict(cls: type[T], src_dict: Mapping[str, Any]) -> T:
        d = dict(src_dict)
        critic_warmup = d.pop("critic_warmup", UNSET)

        save_freq = d.pop("save_freq", UNSET)

        test_freq = d.pop("test_freq", UNSET)

        total_epochs = d.pop("total_epochs", UNSET)

        def _parse_total_training_steps(data: object) -> int | None | Unset:
            if data is None:
                return data
            if isinstance(data, Unset):
                return data
            return cast(int | None | Unset, data)

        total_training_steps = _parse_total_training_steps(d.pop("total_training_steps", UNSET))

        trainer_config = cls(
            critic_warmup=critic_warmup,
            save_freq=save_freq,
            test_freq=test_freq,
            total_epochs=total_epochs,
            total_training_steps=total_training_steps,
        )

        return trainer_config
