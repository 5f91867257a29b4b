from __future__ import annotations

from collections.abc import Mapping
from typing import Any, TypeVar

from attrs import define as _attrs_define

from ..types import UNSET, Unset

T = TypeVar("T", bound="LoadStateRequest")


@_attrs_define
class LoadStateRequest:
    """
    Attributes:
        path (str): The `path` a `save_state` (or, for sampling, `save_weights_for_sampler`) returned: a Keel model id
            of this project.
        optimizer (bool | Unset): Also load the optimizer state (Adam moments); false loads the weights only. Default:
            True.
    """

    path: str
    optimizer: bool | Unset = True

    def to_dict(self) -> dict[str, Any]:
        path = self.path

        optimizer = self.optimizer

        field_dict: dict[str, Any] = {}

        field_dict.update(
            {
                "path": path,
            }
        )
        if optimizer is not UNSET:
            field_dict["optimizer"] = optimizer

        return field_dict

    @classmethod
    def from_dict(cls: type[T], src_dict: Mapping[str, Any]) -> T:
        d = dict(src_dict)
        path = d.pop("path")

        optimizer = d.pop("optimizer", UNSET)

        load_state_request = cls(
            path=path,
            optimizer=optimizer,
        )

        return load_state_request
