"""Text every request schema refuses: the NUL character. PostgreSQL cannot store it in text or JSONB (a
500 there, while SQLite keeps it), and no name, URL or metadata value needs it; so every string a
request body carries is checked here, by the base model every request schema extends, and path ids
and query strings by `api.middleware`."""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, field_validator
from pydantic_core import PydanticCustomError

NUL = "\x00"
MESSAGE = "must not contain the NUL character (\\u0000)"


def has_nul(value: Any) -> bool:
    """Whether a string in `value` (nested lists and dicts, keys included) holds NUL; models are left to
    their own check."""
    stack = [value]
    while stack:
        item = stack.pop()
        if isinstance(item, str):
            if NUL in item:
                return True
        elif isinstance(item, dict):
            stack.extend(item.keys())
            stack.extend(item.values())
        elif isinstance(item, list | tuple | set | frozenset):
            stack.extend(item)
    return False


class NulFree(BaseModel):
    """Refuses NUL in every field (422 at the field) of the models that extend it."""

    @field_validator("*", mode="after")
    @classmethod
    def _refuse_nul(cls, value: Any) -> Any:
        if has_nul(value):
            raise PydanticCustomError("nul_character", MESSAGE)
        return value
