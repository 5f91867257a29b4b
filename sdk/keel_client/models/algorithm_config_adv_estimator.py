from enum import StrEnum


class AlgorithmConfigAdvEstimator(StrEnum):
    GAE = "gae"
    GRPO = "grpo"

    def __str__(self) -> str:
        return str(self.value)
