from __future__ import annotations

from collections.abc import Mapping
from io import BytesIO
from typing import Any, TypeVar

from attrs import define as _attrs_define
from attrs import field as _attrs_field

from .. import types
from ..models.upload_file_file_upload_purpose import UploadFileFileUploadPurpose
from ..types import UNSET, File, Unset

T = TypeVar("T", bound="UploadFileFileUpload")


@_attrs_define
class UploadFileFileUpload:
    """
    Attributes:
        file (File): A parquet or JSON Lines file (the format is told by its content).
        purpose (UploadFileFileUploadPurpose): preference: prompt, chosen, rejected (+ margin); prompts: prompt (+
            ground_truth, data_source); sft: prompt, response; fine-tune: OpenAI's fine-tuning JSON Lines (chat, dpo or
            reinforcement rows, told apart by their fields; errors are 400s).
        metadata (str | Unset): A JSON object of up to 16 string pairs (keys up to 64 characters, values up to 512).
    """

    file: File
    purpose: UploadFileFileUploadPurpose
    metadata: str | Unset = UNSET
    additional_properties: dict[str, Any] = _attrs_field(init=False, factory=dict)

    def to_dict(self) -> dict[str, Any]:
        file = self.file.to_tuple()

        purpose = self.purpose.value

        metadata = self.metadata

        field_dict: dict[str, Any] = {}
        field_dict.update(self.additional_properties)
        field_dict.update(
            {
                "file": file,
                "purpose": purpose,
            }
        )
        if metadata is not UNSET:
            field_dict["metadata"] = metadata

        return field_dict

    def to_multipart(self) -> types.RequestFiles:
        files: types.RequestFiles = []

        files.append(("file", self.file.to_tuple()))

        files.append(("purpose", (None, str(self.purpose.value).encode(), "text/plain")))

        if not isinstance(self.metadata, Unset):
            files.append(("metadata", (None, str(self.metadata).encode(), "text/plain")))

        for prop_name, prop in self.additional_properties.items():
            files.append((prop_name, (None, str(prop).encode(), "text/plain")))

        return files

    @classmethod
    def from_dict(cls: type[T], src_dict: Mapping[str, Any]) -> T:
        d = dict(src_dict)
        file = File(payload=BytesIO(d.pop("file")))

        purpose = UploadFileFileUploadPurpose(d.pop("purpose"))

        metadata = d.pop("metadata", UNSET)

        upload_file_file_upload = cls(
            file=file,
            purpose=purpose,
            metadata=metadata,
        )

        upload_file_file_upload.additional_properties = d
        return upload_file_file_upload

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
