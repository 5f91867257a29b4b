from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, Literal, TypeVar, cast

from attrs import define as _attrs_define
from attrs import field as _attrs_field

from ..models.file_public_format import FilePublicFormat
from ..models.file_public_purpose import FilePublicPurpose
from ..models.file_public_status import FilePublicStatus
from ..types import UNSET, Unset

if TYPE_CHECKING:
    from ..models.file_public_metadata import FilePublicMetadata
    from ..models.file_public_stats import FilePublicStats


T = TypeVar("T", bound="FilePublic")


@_attrs_define
class FilePublic:
    """An uploaded dataset, or a job's results (purpose `eval_results`). Uploads are checked: a stored
    file is always `processed`.

        Attributes:
            bytes_ (int):
            columns (list[str]): The purpose's columns in the file; other columns are ignored.
            created_at (int): Unix seconds.
            filename (str): The uploaded file's base name (never a path).
            format_ (FilePublicFormat):
            id (str):
            metadata (FilePublicMetadata):
            purpose (FilePublicPurpose):
            rows (int | None):
            sha256 (str):
            stats (FilePublicStats):
            status (FilePublicStatus): `processed` for every stored file: a file that fails its checks is refused with a 4xx
                and not stored. `error` is reserved for files found unusable later.
            object_ (Literal['file'] | Unset):  Default: 'file'.
            status_details (None | str | Unset):
    """

    bytes_: int
    columns: list[str]
    created_at: int
    filename: str
    format_: FilePublicFormat
    id: str
    metadata: FilePublicMetadata
    purpose: FilePublicPurpose
    rows: int | None
    sha256: str
    stats: FilePublicStats
    status: FilePublicStatus
    object_: Literal["file"] | Unset = "file"
    status_details: None | str | Unset = UNSET
    additional_properties: dict[str, Any] = _attrs_field(init=False, factory=dict)

    def to_dict(self) -> dict[str, Any]:
        bytes_ = self.bytes_

        columns = self.columns

        created_at = self.created_at

        filename = self.filename

        format_ = self.format_.value

        id = self.id

        metadata = self.metadata.to_dict()

        purpose = self.purpose.value

        rows: int | None
        rows = self.rows

        sha256 = self.sha256

        stats = self.stats.to_dict()

        status = self.status.value

        object_ = self.object_

        status_details: None | str | Unset
        if isinstance(self.status_details, Unset):
            status_details = UNSET
        else:
            status_details = self.status_details

        field_dict: dict[str, Any] = {}
        field_dict.update(self.additional_properties)
        field_dict.update(
            {
                "bytes": bytes_,
                "columns": columns,
                "created_at": created_at,
                "filename": filename,
                "format": format_,
                "id": id,
                "metadata": metadata,
                "purpose": purpose,
                "rows": rows,
                "sha256": sha256,
                "stats": stats,
                "status": status,
            }
        )
        if object_ is not UNSET:
            field_dict["object"] = object_
        if status_details is not UNSET:
            field_dict["status_details"] = status_details

        return field_dict

    @classmethod
    def from_dict(cls: type[T], src_dict: Mapping[str, Any]) -> T:
        from ..models.file_public_metadata import FilePublicMetadata  # noqa: PLC0415
        from ..models.file_public_stats import FilePublicStats  # noqa: PLC0415

        d = dict(src_dict)
        bytes_ = d.pop("bytes")

        columns = cast(list[str], d.pop("columns"))

        created_at = d.pop("created_at")

        filename = d.pop("filename")

        format_ = FilePublicFormat(d.pop("format"))

        id = d.pop("id")

        metadata = FilePublicMetadata.from_dict(d.pop("metadata"))

        purpose = FilePublicPurpose(d.pop("purpose"))

        def _parse_rows(data: object) -> int | None:
            if data is None:
                return data
            return cast(int | None, data)

        rows = _parse_rows(d.pop("rows"))

        sha256 = d.pop("sha256")

        stats = FilePublicStats.from_dict(d.pop("stats"))

        status = FilePublicStatus(d.pop("status"))

        object_ = cast(Literal["file"] | Unset, d.pop("object", UNSET))
        if object_ != "file" and not isinstance(object_, Unset):
            raise ValueError(f"object must match const 'file', got '{object_}'")

        def _parse_status_details(data: object) -> None | str | Unset:
            if data is None:
                return data
            if isinstance(data, Unset):
                return data
            return cast(None | str | Unset, data)

        status_details = _parse_status_details(d.pop("status_details", UNSET))

        file_public = cls(
            bytes_=bytes_,
            columns=columns,
            created_at=created_at,
            filename=filename,
            format_=format_,
            id=id,
            metadata=metadata,
            purpose=purpose,
            rows=rows,
            sha256=sha256,
            stats=stats,
            status=status,
            object_=object_,
            status_details=status_details,
        )

        file_public.additional_properties = d
        return file_public

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
