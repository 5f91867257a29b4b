from enum import StrEnum


class RewardFilterConfigMode(StrEnum):
    BEST_RANDOM = "best_random"
    BEST_WORST = "best_worst"

    def __str__(self) -> str:
        return str(self.value)
