from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, TypeVar, cast

from attrs import define as _attrs_define

from ..models.integration_type import IntegrationType
from ..types import UNSET, Unset

if TYPE_CHECKING:
    from ..models.m_lflow_settings import MLflowSettings
    from ..models.wandb_settings import WandbSettings


T = TypeVar("T", bound="Integration")


@_attrs_define
class Integration:
    """An experiment tracker that gets every metric of the job at its step, mirrored by the workers from
    the job's event log (training never waits on it). `tensorboard` writes event files, downloadable at
    `GET /v1/jobs/{job_id}/tensorboard`.

        Attributes:
            type_ (IntegrationType):
            mlflow (MLflowSettings | None | Unset): Required for `type: mlflow`, and only there.
            wandb (None | Unset | WandbSettings): Required for `type: wandb`, and only there.
    """

    type_: IntegrationType
    mlflow: MLflowSettings | None | Unset = UNSET
    wandb: None | Unset | WandbSettings = UNSET

    def to_dict(self) -> dict[str, Any]:
        from ..models.m_lflow_settings import MLflowSettings  # noqa: PLC0415
        from ..models.wandb_settings import WandbSettings  # noqa: PLC0415

        type_ = self.type_.value

        mlflow: dict[str, Any] | None | Unset
        if isinstance(self.mlflow, Unset):
            mlflow = UNSET
        elif isinstance(self.mlflow, MLflowSettings):
            mlflow = self.mlflow.to_dict()
        else:
            mlflow = self.mlflow

        wandb: dict[str, Any] | None | Unset
        if isinstance(self.wandb, Unset):
            wandb = UNSET
        elif isinstance(self.wandb, WandbSettings):
            wandb = self.wandb.to_dict()
        else:
            wandb = self.wandb

        field_dict: dict[str, Any] = {}

        field_dict.update(
            {
                "type": type_,
            }
        )
        if mlflow is not UNSET:
            field_dict["mlflow"] = mlflow
        if wandb is not UNSET:
            field_dict["wandb"] = wandb

        return field_dict

    @classmethod
    def from_dict(cls: type[T], src_dict: Mapping[str, Any]) -> T:
        from ..models.m_lflow_settings import MLflowSettings  # noqa: PLC0415
        from ..models.wandb_settings import WandbSettings  # noqa: PLC0415

        d = dict(src_dict)
        type_ = IntegrationType(d.pop("type"))

        def _parse_mlflow(data: object) -> MLflowSettings | None | Unset:
            if data is None:
                return data
            if isinstance(data, Unset):
                return data
            try:
                if not isinstance(data, dict):
                    raise TypeError()
                mlflow_type_0 = MLflowSettings.from_dict(data)

                return mlflow_type_0
            except (TypeError, ValueError, AttributeError, KeyError):
                pass
            return cast(MLflowSettings | None | Unset, data)

        mlflow = _parse_mlflow(d.pop("mlflow", UNSET))

        def _parse_wandb(data: object) -> None | Unset | WandbSettings:
            if data is None:
                return data
            if isinstance(data, Unset):
                return data
            try:
                if not isinstance(data, dict):
                    raise TypeError()
                wandb_type_0 = WandbSettings.from_dict(data)

                return wandb_type_0
            except (TypeError, ValueError, AttributeError, KeyError):
                pass
            return cast(None | Unset | WandbSettings, data)

        wandb = _parse_wandb(d.pop("wandb", UNSET))

        integration = cls(
            type_=type_,
            mlflow=mlflow,
            wandb=wandb,
        )

        return integration
