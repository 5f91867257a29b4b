from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, Literal, TypeVar, cast

from attrs import define as _attrs_define
from attrs import field as _attrs_field

from ..models.trainer_operation_public_kind import TrainerOperationPublicKind
from ..models.trainer_operation_public_status import TrainerOperationPublicStatus
from ..types import UNSET, Unset

if TYPE_CHECKING:
    from ..models.operation_error import OperationError
    from ..models.trainer_operation_public_result_type_0 import TrainerOperationPublicResultType0


T = TypeVar("T", bound="TrainerOperationPublic")


@_attrs_define
class TrainerOperationPublic:
    """One call of a primitive. Operations of a trainer run one at a time in `seq` order; poll this
    (`GET /v1/trainers/{trainer_id}/operations/{operation_id}`, `wait` to long-poll) until `status` is
    `succeeded` (see `result`) or `failed` (see `error`).

        Attributes:
            created_at (int):
            error (None | OperationError):
            finished_at (int | None):
            id (str):
            kind (TrainerOperationPublicKind):
            result (None | TrainerOperationPublicResultType0):
            seq (int):
            started_at (int | None):
            status (TrainerOperationPublicStatus):
            tokens (int):
            trainer_id (str):
            object_ (Literal['trainer.operation'] | Unset):  Default: 'trainer.operation'.
    """

    created_at: int
    error: None | OperationError
    finished_at: int | None
    id: str
    kind: TrainerOperationPublicKind
    result: None | TrainerOperationPublicResultType0
    seq: int
    started_at: int | None
    status: TrainerOperationPublicStatus
    tokens: int
    trainer_id: str
    object_: Literal["trainer.operation"] | Unset = "trainer.operation"
    additional_properties: dict[str, Any] = _attrs_field(init=False, factory=dict)

    def to_dict(self) -> dict[str, Any]:
        from ..models.operation_error import OperationError  # noqa: PLC0415
        from ..models.trainer_operation_public_result_type_0 import TrainerOperationPublicResultType0  # noqa: PLC0415

        created_at = self.created_at

        error: dict[str, Any] | None
        if isinstance(self.error, OperationError):
            error = self.error.to_dict()
        else:
            error = self.error

        finished_at: int | None
        finished_at = self.finished_at

        id = self.id

        kind = self.kind.value

        result: dict[str, Any] | None
        if isinstance(self.result, TrainerOperationPublicResultType0):
            result = self.result.to_dict()
        else:
            result = self.result

        seq = self.seq

        started_at: int | None
        started_at = self.started_at

        status = self.status.value

        tokens = self.tokens

        trainer_id = self.trainer_id

        object_ = self.object_

        field_dict: dict[str, Any] = {}
        field_dict.update(self.additional_properties)
        field_dict.update(
            {
                "created_at": created_at,
                "error": error,
                "finished_at": finished_at,
                "id": id,
                "kind": kind,
                "result": result,
                "seq": seq,
                "started_at": started_at,
                "status": status,
                "tokens": tokens,
                "trainer_id": trainer_id,
            }
        )
        if object_ is not UNSET:
            field_dict["object"] = object_

        return field_dict

    @classmethod
    def from_dict(cls: type[T], src_dict: Mapping[str, Any]) -> T:
        from ..models.operation_error import OperationError  # noqa: PLC0415
        from ..models.trainer_operation_public_result_type_0 import TrainerOperationPublicResultType0  # noqa: PLC0415

        d = dict(src_dict)
        created_at = d.pop("created_at")

        def _parse_error(data: object) -> None | OperationError:
            if data is None:
                return data
            try:
                if not isinstance(data, dict):
                    raise TypeError()
                error_type_0 = OperationError.from_dict(data)

                return error_type_0
            except (TypeError, ValueError, AttributeError, KeyError):
                pass
            return cast(None | OperationError, data)

        error = _parse_error(d.pop("error"))

        def _parse_finished_at(data: object) -> int | None:
            if data is None:
                return data
            return cast(int | None, data)

        finished_at = _parse_finished_at(d.pop("finished_at"))

        id = d.pop("id")

        kind = TrainerOperationPublicKind(d.pop("kind"))

        def _parse_result(data: object) -> None | TrainerOperationPublicResultType0:
            if data is None:
                return data
            try:
                if not isinstance(data, dict):
                    raise TypeError()
                result_type_0 = TrainerOperationPublicResultType0.from_dict(data)

                return result_type_0
            except (TypeError, ValueError, AttributeError, KeyError):
                pass
            return cast(None | TrainerOperationPublicResultType0, data)

        result = _parse_result(d.pop("result"))

        seq = d.pop("seq")

        def _parse_started_at(data: object) -> int | None:
            if data is None:
                return data
            return cast(int | None, data)

        started_at = _parse_started_at(d.pop("started_at"))

        status = TrainerOperationPublicStatus(d.pop("status"))

        tokens = d.pop("tokens")

        trainer_id = d.pop("trainer_id")

        object_ = cast(Literal["trainer.operation"] | Unset, d.pop("object", UNSET))
        if object_ != "trainer.operation" and not isinstance(object_, Unset):
            raise ValueError(f"object must match const 'trainer.operation', got '{object_}'")

        trainer_operation_public = cls(
            created_at=created_at,
            error=error,
            finished_at=finished_at,
            id=id,
            kind=kind,
            result=result,
            seq=seq,
            started_at=started_at,
            status=status,
            tokens=tokens,
            trainer_id=trainer_id,
            object_=object_,
        )

        trainer_operation_public.additional_properties = d
        return trainer_operation_public

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
