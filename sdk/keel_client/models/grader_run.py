from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, TypeVar, cast

from attrs import define as _attrs_define

from ..types import UNSET, Unset

if TYPE_CHECKING:
    from ..models.grader_run_grader import GraderRunGrader
    from ..models.grader_run_item_type_0 import GraderRunItemType0
    from ..models.grader_run_model_sample_type_1 import GraderRunModelSampleType1


T = TypeVar("T", bound="GraderRun")


@_attrs_define
class GraderRun:
    """
    Attributes:
        grader (GraderRunGrader):
        model_sample (GraderRunModelSampleType1 | str):
        item (GraderRunItemType0 | None | Unset):
        reference_answer (Any | Unset):
    """

    grader: GraderRunGrader
    model_sample: GraderRunModelSampleType1 | str
    item: GraderRunItemType0 | None | Unset = UNSET
    reference_answer: Any | Unset = UNSET

    def to_dict(self) -> dict[str, Any]:
        from ..models.grader_run_item_type_0 import GraderRunItemType0  # noqa: PLC0415
        from ..models.grader_run_model_sample_type_1 import GraderRunModelSampleType1  # noqa: PLC0415

        grader = self.grader.to_dict()

        model_sample: dict[str, Any] | str
        if isinstance(self.model_sample, GraderRunModelSampleType1):
            model_sample = self.model_sample.to_dict()
        else:
            model_sample = self.model_sample

        item: dict[str, Any] | None | Unset
        if isinstance(self.item, Unset):
            item = UNSET
        elif isinstance(self.item, GraderRunItemType0):
            item = self.item.to_dict()
        else:
            item = self.item

        reference_answer = self.reference_answer

        field_dict: dict[str, Any] = {}

        field_dict.update(
            {
                "grader": grader,
                "model_sample": model_sample,
            }
        )
        if item is not UNSET:
            field_dict["item"] = item
        if reference_answer is not UNSET:
            field_dict["reference_answer"] = reference_answer

        return field_dict

    @classmethod
    def from_dict(cls: type[T], src_dict: Mapping[str, Any]) -> T:
        from ..models.grader_run_grader import GraderRunGrader  # noqa: PLC0415
        from ..models.grader_run_item_type_0 import GraderRunItemType0  # noqa: PLC0415
        from ..models.grader_run_model_sample_type_1 import GraderRunModelSampleType1  # noqa: PLC0415

        d = dict(src_dict)
        grader = GraderRunGrader.from_dict(d.pop("grader"))

        def _parse_model_sample(data: object) -> GraderRunModelSampleType1 | str:
            try:
                if not isinstance(data, dict):
                    raise TypeError()
                model_sample_type_1 = GraderRunModelSampleType1.from_dict(data)

                return model_sample_type_1
            except (TypeError, ValueError, AttributeError, KeyError):
                pass
            return cast(GraderRunModelSampleType1 | str, data)

        model_sample = _parse_model_sample(d.pop("model_sample"))

        def _parse_item(data: object) -> GraderRunItemType0 | None | Unset:
            if data is None:
                return data
            if isinstance(data, Unset):
                return data
            try:
                if not isinstance(data, dict):
                    raise TypeError()
                item_type_0 = GraderRunItemType0.from_dict(data)

                return item_type_0
            except (TypeError, ValueError, AttributeError, KeyError):
                pass
            return cast(GraderRunItemType0 | None | Unset, data)

        item = _parse_item(d.pop("item", UNSET))

        reference_answer = d.pop("reference_answer", UNSET)

        grader_run = cls(
            grader=grader,
            model_sample=model_sample,
            item=item,
            reference_answer=reference_answer,
        )

        return grader_run
