from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, TypeVar, cast

from attrs import define as _attrs_define
from attrs import field as _attrs_field

from ..types import UNSET, Unset

if TYPE_CHECKING:
    from ..models.manifest_file import ManifestFile


T = TypeVar("T", bound="ManifestDatasets")


@_attrs_define
class ManifestDatasets:
    """
    Attributes:
        training_file (ManifestFile | None | Unset):
        validation_file (ManifestFile | None | Unset):
    """

    training_file: ManifestFile | None | Unset = UNSET
    validation_file: ManifestFile | None | Unset = UNSET
    additional_properties: dict[str, Any] = _attrs_field(init=False, factory=dict)

    def to_dict(self) -> dict[str, Any]:
        from ..models.manifest_file import ManifestFile  # noqa: PLC0415

        training_file: dict[str, Any] | None | Unset
        if isinstance(self.training_file, Unset):
            training_file = UNSET
        elif isinstance(self.training_file, ManifestFile):
            training_file = self.training_file.to_dict()
        else:
            training_file = self.training_file

        validation_file: dict[str, Any] | None | Unset
        if isinstance(self.validation_file, Unset):
            validation_file = UNSET
        elif isinstance(self.validation_file, ManifestFile):
            validation_file = self.validation_file.to_dict()
        else:
            validation_file = self.validation_file

        field_dict: dict[str, Any] = {}
        field_dict.update(self.additional_properties)
        field_dict.update({})
        if training_file is not UNSET:
            field_dict["training_file"] = training_file
        if validation_file is not UNSET:
            field_dict["validation_file"] = validation_file

        return field_dict

    @classmethod
    def from_dict(cls: type[T], src_dict: Mapping[str, Any]) -> T:
        from ..models.manifest_file import ManifestFile  # noqa: PLC0415

        d = dict(src_dict)

        def _parse_training_file(data: object) -> ManifestFile | None | Unset:
            if data is None:
                return data
            if isinstance(data, Unset):
                return data
            try:
                if not isinstance(data, dict):
                    raise TypeError()
                training_file_type_0 = ManifestFile.from_dict(data)

                return training_file_type_0
            except (TypeError, ValueError, AttributeError, KeyError):
                pass
            return cast(ManifestFile | None | Unset, data)

        training_file = _parse_training_file(d.pop("training_file", UNSET))

        def _parse_validation_file(data: object) -> ManifestFile | None | Unset:
            if data is None:
                return data
            if isinstance(data, Unset):
                return data
            try:
                if not isinstance(data, dict):
                    raise TypeError()
                validation_file_type_0 = ManifestFile.from_dict(data)

                return validation_file_type_0
            except (TypeError, ValueError, AttributeError, KeyError):
                pass
            return cast(ManifestFile | None | Unset, data)

        validation_file = _parse_validation_file(d.pop("validation_file", UNSET))

        manifest_datasets = cls(
            training_file=training_file,
            validation_file=validation_file,
        )

        manifest_datasets.additional_properties = d
        return manifest_datasets

    @property
    def additional_keys(self) -> list[str]:
        return list(self.additional_properties.keys())

    def __getitem__(self, key: str) -> Any:
        return self.additional_properties[key]

    def __setitem__(self, key: str, value: Any) -> None:
        self.additional_properties[key] = value

    def __delitem__(self, key: str) -> None:
        del self.additional_properties[key]

    def __contains__(self, key: str) -> bool:
        return key in self.additional_properties
