from enum import StrEnum


class JobResourcesPlacement(StrEnum):
    PACK = "pack"
    SPREAD = "spread"
    STRICT_SPREAD = "strict_spread"

    def __str__(self) -> str:
        return str(self.value)
