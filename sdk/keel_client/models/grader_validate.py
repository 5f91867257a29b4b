from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, TypeVar

from attrs import define as _attrs_define

if TYPE_CHECKING:
    from ..models.grader_validate_grader import GraderValidateGrader


T = TypeVar("T", bound="GraderValidate")


@_attrs_define
class GraderValidate:
    """
    Attributes:
        grader (GraderValidateGrader):
    """

    grader: GraderValidateGrader

    def to_dict(self) -> dict[str, Any]:
        grader = self.grader.to_dict()

        field_dict: dict[str, Any] = {}

        field_dict.update(
            {
                "grader": grader,
            }
        )

        return field_dict

    @classmethod
    def from_dict(cls: type[T], src_dict: Mapping[str, Any]) -> T:
        from ..models.grader_validate_grader import GraderValidateGrader  # noqa: PLC0415

        d = dict(src_dict)
        grader = GraderValidateGrader.from_dict(d.pop("grader"))

        grader_validate = cls(
            grader=grader,
        )

        return grader_validate
