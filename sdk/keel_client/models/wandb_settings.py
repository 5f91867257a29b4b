from __future__ import annotations

from collections.abc import Mapping
from typing import Any, TypeVar, cast

from attrs import define as _attrs_define

from ..types import UNSET, Unset

T = TypeVar("T", bound="WandbSettings")


@_attrs_define
class WandbSettings:
    """Where the W&B run goes. The API key is the project secret `WANDB_API_KEY` (never in the job).

    Attributes:
        project (str):
        entity (None | str | Unset):
        name (None | str | Unset): The run's display name (default: the job id).
        tags (list[str] | Unset):
    """

    project: str
    entity: None | str | Unset = UNSET
    name: None | str | Unset = UNSET
    tags: list[str] | Unset = UNSET

    def to_dict(self) -> dict[str, Any]:
        project = self.project

        entity: None | str | Unset
        if isinstance(self.entity, Unset):
            entity = UNSET
        else:
            entity = self.entity

        name: None | str | Unset
        if isinstance(self.name, Unset):
            name = UNSET
        else:
            name = self.name

        tags: list[str] | Unset = UNSET
        if not isinstance(self.tags, Unset):
            tags = self.tags

        field_dict: dict[str, Any] = {}

        field_dict.update(
            {
                "project": project,
            }
        )
        if entity is not UNSET:
            field_dict["entity"] = entity
        if name is not UNSET:
            field_dict["name"] = name
        if tags is not UNSET:
            field_dict["tags"] = tags

        return field_dict

    @classmethod
    def from_dict(cls: type[T], src_dict: Mapping[str, Any]) -> T:
        d = dict(src_dict)
        project = d.pop("project")

        def _parse_entity(data: object) -> None | str | Unset:
            if data is None:
                return data
            if isinstance(data, Unset):
                return data
            return cast(None | str | Unset, data)

        entity = _parse_entity(d.pop("entity", UNSET))

        def _parse_name(data: object) -> None | str | Unset:
            if data is None:
                return data
            if isinstance(data, Unset):
                return data
            return cast(None | str | Unset, data)

        name = _parse_name(d.pop("name", UNSET))

        tags = cast(list[str], d.pop("tags", UNSET))

        wandb_settings = cls(
            project=project,
            entity=entity,
            name=name,
            tags=tags,
        )

        return wandb_settings
