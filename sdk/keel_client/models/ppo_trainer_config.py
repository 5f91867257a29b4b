from __future__ import annotations

from collections.abc import Mapping
from typing import Any, TypeVar, cast

from attrs import define as _attrs_define

from ..types import UNSET, Unset

T = TypeVar("T", bound="PPOTrainerConfig")


@_attrs_define
class PPOTrainerConfig:
    """`TrainerConfig` for PPO (3 epochs by default, as in the recipe).

    Attributes:
        critic_warmup (int | Unset): PPO only: steps that train the critic before the actor starts updating. Default: 0.
        max_actor_ckpt_to_keep (int | None | Unset): Keep only the newest N checkpoints (supervised methods: the
            model's); older ones are deleted,
            files and all, as new ones are recorded, except those a queued or running job uses (None: keep all).
        max_critic_ckpt_to_keep (int | None | Unset): PPO: keep the critic part of only the newest N checkpoints (None:
            keep all).
        max_duration_s (float | None | Unset): Wall-clock budget of the whole run, earlier attempts included: past it
            the job saves a
            checkpoint at the next step boundary and fails with `max_duration_exceeded` (None: no limit).
        save_freq (int | Unset): Checkpoint every N steps (-1: only at the end). Default: -1.
        test_freq (int | Unset): Validate every N steps (-1: only at the end). Default: -1.
        total_epochs (int | Unset):  Default: 3.
        total_training_steps (int | None | Unset): Overrides `total_epochs` when set.
        val_before_train (bool | Unset): PPO: validate once before the first step (logged at step 0), the baseline every
            later
            validation is read against (with validation data; a resumed run does not repeat it). Default: True.
    """

    critic_warmup: int | Unset = 0
    max_actor_ckpt_to_keep: int | None | Unset = UNSET
    max_critic_ckpt_to_keep: int | None | Unset = UNSET
    max_duration_s: float | None | Unset = UNSET
    save_freq: int | Unset = -1
    test_freq: int | Unset = -1
    total_epochs: int | Unset = 3
    total_training_steps: int | None | Unset = UNSET
    val_before_train: bool | Unset = True

    def to_dict(self) -> dict[str, Any]:
        critic_warmup = self.critic_warmup

        max_actor_ckpt_to_keep: int | None | Unset
        if isinstance(self.max_actor_ckpt_to_keep, Unset):
            max_actor_ckpt_to_keep = UNSET
        else:
            max_actor_ckpt_to_keep = self.max_actor_ckpt_to_keep

        max_critic_ckpt_to_keep: int | None | Unset
        if isinstance(self.max_critic_ckpt_to_keep, Unset):
            max_critic_ckpt_to_keep = UNSET
        else:
            max_critic_ckpt_to_keep = self.max_critic_ckpt_to_keep

        max_duration_s: float | None | Unset
        if isinstance(self.max_duration_s, Unset):
            max_duration_s = UNSET
        else:
            max_duration_s = self.max_duration_s

        save_freq = self.save_freq

        test_freq = self.test_freq

        total_epochs = self.total_epochs

        total_training_steps: int | None | Unset
        if isinstance(self.total_training_steps, Unset):
            total_training_steps = UNSET
        else:
            total_training_steps = self.total_training_steps

        val_before_train = self.val_before_train

        field_dict: dict[str, Any] = {}

        field_dict.update({})
        if critic_warmup is not UNSET:
            field_dict["critic_warmup"] = critic_warmup
        if max_actor_ckpt_to_keep is not UNSET:
            field_dict["max_actor_ckpt_to_keep"] = max_actor_ckpt_to_keep
        if max_critic_ckpt_to_keep is not UNSET:
            field_dict["max_critic_ckpt_to_keep"] = max_critic_ckpt_to_keep
        if max_duration_s is not UNSET:
            field_dict["max_duration_s"] = max_duration_s
        if save_freq is not UNSET:
            field_dict["save_freq"] = save_freq
        if test_freq is not UNSET:
            field_dict["test_freq"] = test_freq
        if total_epochs is not UNSET:
            field_dict["total_epochs"] = total_epochs
        if total_training_steps is not UNSET:
            field_dict["total_training_steps"] = total_training_steps
        if val_before_train is not UNSET:
            field_dict["val_before_train"] = val_before_train

        return field_dict

    @classmethod
    def from_dict(cls: type[T], src_dict: Mapping[str, Any]) -> T:
        d = dict(src_dict)
        critic_warmup = d.pop("critic_warmup", UNSET)

        def _parse_max_actor_ckpt_to_keep(data: object) -> int | None | Unset:
            if data is None:
                return data
            if isinstance(data, Unset):
                return data
            return cast(int | None | Unset, data)

        max_actor_ckpt_to_keep = _parse_max_actor_ckpt_to_keep(d.pop("max_actor_ckpt_to_keep", UNSET))

        def _parse_max_critic_ckpt_to_keep(data: object) -> int | None | Unset:
            if data is None:
                return data
            if isinstance(data, Unset):
                return data
            return cast(int | None | Unset, data)

        max_critic_ckpt_to_keep = _parse_max_critic_ckpt_to_keep(d.pop("max_critic_ckpt_to_keep", UNSET))

        def _parse_max_duration_s(data: object) -> float | None | Unset:
            if data is None:
                return data
            if isinstance(data, Unset):
                return data
            return cast(float | None | Unset, data)

        max_duration_s = _parse_max_duration_s(d.pop("max_duration_s", UNSET))

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

        val_before_train = d.pop("val_before_train", UNSET)

        ppo_trainer_config = cls(
            critic_warmup=critic_warmup,
            max_actor_ckpt_to_keep=max_actor_ckpt_to_keep,
            max_critic_ckpt_to_keep=max_critic_ckpt_to_keep,
            max_duration_s=max_duration_s,
            save_freq=save_freq,
            test_freq=test_freq,
            total_epochs=total_epochs,
            total_training_steps=total_training_steps,
            val_before_train=val_before_train,
        )

        return ppo_trainer_config
