from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, TypeVar, cast

from attrs import define as _attrs_define

from ..models.reward_spec_function_type_0 import RewardSpecFunctionType0
from ..types import UNSET, Unset

if TYPE_CHECKING:
    from ..models.reward_spec_options import RewardSpecOptions


T = TypeVar("T", bound="RewardSpec")


@_attrs_define
class RewardSpec:
    """PPO's reward: a reward model, or a rule function for verifiable tasks. Exactly one of the two.

    Attributes:
        function (None | RewardSpecFunctionType0 | Unset): A built-in rule reward; `data_source` picks one per row from
            the dataset's `data_source` column.
        model (None | str | Unset): A reward model (Keel model id of kind `reward_model`, hub id or directory).
        options (RewardSpecOptions | Unset): Keyword options of the rule function (e.g. `{"pattern": "..."}` for
            `regex`). Strings are at most
            4096 characters, except `grader`: the `grader` function's grader object as a JSON string (required by
            that function; a python grader's source may be 256 KiB).
    """

    function: None | RewardSpecFunctionType0 | Unset = UNSET
    model: None | str | Unset = UNSET
    options: RewardSpecOptions | Unset = UNSET

    def to_dict(self) -> dict[str, Any]:
        function: None | str | Unset
        if isinstance(self.function, Unset):
            function = UNSET
        elif isinstance(self.function, RewardSpecFunctionType0):
            function = self.function.value
        else:
            function = self.function

        model: None | str | Unset
        if isinstance(self.model, Unset):
            model = UNSET
        else:
            model = self.model

        options: dict[str, Any] | Unset = UNSET
        if not isinstance(self.options, Unset):
            options = self.options.to_dict()

        field_dict: dict[str, Any] = {}

        field_dict.update({})
        if function is not UNSET:
            field_dict["function"] = function
        if model is not UNSET:
            field_dict["model"] = model
        if options is not UNSET:
            field_dict["options"] = options

        return field_dict

    @classmethod
    def from_dict(cls: type[T], src_dict: Mapping[str, Any]) -> T:
        from ..models.reward_spec_options import RewardSpecOptions  # noqa: PLC0415

        d = dict(src_dict)

        def _parse_function(data: object) -> None | RewardSpecFunctionType0 | Unset:
            if data is None:
                return data
            if isinstance(data, Unset):
                return data
            try:
                if not isinstance(data, str):
                    raise TypeError()
                function_type_0 = RewardSpecFunctionType0(data)

                return function_type_0
            except (TypeError, ValueError, AttributeError, KeyError):
                pass
            return cast(None | RewardSpecFunctionType0 | Unset, data)

        function = _parse_function(d.pop("function", UNSET))

        def _parse_model(data: object) -> None | str | Unset:
            if data is None:
                return data
            if isinstance(data, Unset):
                return data
            return cast(None | str | Unset, data)

        model = _parse_model(d.pop("model", UNSET))

        _options = d.pop("options", UNSET)
        options: RewardSpecOptions | Unset
        if isinstance(_options, Unset):
            options = UNSET
        else:
            options = RewardSpecOptions.from_dict(_options)

        reward_spec = cls(
            function=function,
            model=model,
            options=options,
        )

        return reward_spec
