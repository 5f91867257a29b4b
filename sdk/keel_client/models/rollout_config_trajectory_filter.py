from enum import StrEnum


class RolloutConfigTrajectoryFilter(StrEnum):
    ALL = "all"
    UNCONSUMED = "unconsumed"

    def __str__(self) -> str:
        return str(self.value)
