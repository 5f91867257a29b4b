from __future__ import annotations

from collections.abc import Mapping
from typing import Any, TypeVar

from attrs import define as _attrs_define

from ..types import UNSET, Unset

T = TypeVar("T", bound="MLflowSettings")


@_attrs_define
class MLflowSettings:
    """Where the MLflow run goes. Credentials are the project secrets `MLFLOW_TRACKING_TOKEN` or
    `MLFLOW_TRACKING_USERNAME`/`MLFLOW_TRACKING_PASSWORD`.

        Attributes:
            tracking_uri (str): http(s) on a public address, or under one of the deployment's
                `KEEL_MLFLOW_TRACKING_URI_PREFIXES`.
            experiment (str | Unset):  Default: 'keel'.
    """

    tracking_uri: str
    experiment: str | Unset = "keel"

    def to_dict(self) -> dict[str, Any]:
        tracking_uri = self.tracking_uri

        experiment = self.experiment

        field_dict: dict[str, Any] = {}

        field_dict.update(
            {
                "tracking_uri": tracking_uri,
            }
        )
        if experiment is not UNSET:
            field_dict["experiment"] = experiment

        return field_dict

    @classmethod
    def from_dict(cls: type[T], src_dict: Mapping[str, Any]) -> T:
        d = dict(src_dict)
        tracking_uri = d.pop("tracking_uri")

        experiment = d.pop("experiment", UNSET)

        m_lflow_settings = cls(
            tracking_uri=tracking_uri,
            experiment=experiment,
        )

        return m_lflow_settings
