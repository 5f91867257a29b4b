from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, TypeVar, cast

from attrs import define as _attrs_define

from ..models.forward_backward_request_loss_fn import ForwardBackwardRequestLossFn
from ..types import UNSET, Unset

if TYPE_CHECKING:
    from ..models.datum import Datum
    from ..models.loss_fn_config import LossFnConfig


T = TypeVar("T", bound="ForwardBackwardRequest")


@_attrs_define
class ForwardBackwardRequest:
    """A batch of datums and the loss to compute on them (the same body for `forward`).

    Attributes:
        data (list[Datum]):
        loss_fn (ForwardBackwardRequestLossFn | Unset):  Default: ForwardBackwardRequestLossFn.CROSS_ENTROPY.
        loss_fn_config (LossFnConfig | None | Unset):
    """

    data: list[Datum]
    loss_fn: ForwardBackwardRequestLossFn | Unset = ForwardBackwardRequestLossFn.CROSS_ENTROPY
    loss_fn_config: LossFnConfig | None | Unset = UNSET

    def to_dict(self) -> dict[str, Any]:
        from ..models.loss_fn_config import LossFnConfig  # noqa: PLC0415

        data = []
        for data_item_data in self.data:
            data_item = data_item_data.to_dict()
            data.append(data_item)

        loss_fn: str | Unset = UNSET
        if not isinstance(self.loss_fn, Unset):
            loss_fn = self.loss_fn.value

        loss_fn_config: dict[str, Any] | None | Unset
        if isinstance(self.loss_fn_config, Unset):
            loss_fn_config = UNSET
        elif isinstance(self.loss_fn_config, LossFnConfig):
            loss_fn_config = self.loss_fn_config.to_dict()
        else:
            loss_fn_config = self.loss_fn_config

        field_dict: dict[str, Any] = {}

        field_dict.update(
            {
                "data": data,
            }
        )
        if loss_fn is not UNSET:
            field_dict["loss_fn"] = loss_fn
        if loss_fn_config is not UNSET:
            field_dict["loss_fn_config"] = loss_fn_config

        return field_dict

    @classmethod
    def from_dict(cls: type[T], src_dict: Mapping[str, Any]) -> T:
        from ..models.datum import Datum  # noqa: PLC0415
        from ..models.loss_fn_config import LossFnConfig  # noqa: PLC0415

        d = dict(src_dict)
        data = []
        _data = d.pop("data")
        for data_item_data in _data:
            data_item = Datum.from_dict(data_item_data)

            data.append(data_item)

        _loss_fn = d.pop("loss_fn", UNSET)
        loss_fn: ForwardBackwardRequestLossFn | Unset
        if isinstance(_loss_fn, Unset):
            loss_fn = UNSET
        else:
            loss_fn = ForwardBackwardRequestLossFn(_loss_fn)

        def _parse_loss_fn_config(data: object) -> LossFnConfig | None | Unset:
            if data is None:
                return data
            if isinstance(data, Unset):
                return data
            try:
                if not isinstance(data, dict):
                    raise TypeError()
                loss_fn_config_type_0 = LossFnConfig.from_dict(data)

                return loss_fn_config_type_0
            except (TypeError, ValueError, AttributeError, KeyError):
                pass
            return cast(LossFnConfig | None | Unset, data)

        loss_fn_config = _parse_loss_fn_config(d.pop("loss_fn_config", UNSET))

        forward_backward_request = cls(
            data=data,
            loss_fn=loss_fn,
            loss_fn_config=loss_fn_config,
        )

        return forward_backward_request
