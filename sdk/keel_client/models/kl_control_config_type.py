from enum import StrEnum


class KLControlConfigType(StrEnum):
    ADAPTIVE = "adaptive"
    FIXED = "fixed"

    def __str__(self) -> str:
        return str(self.value)
