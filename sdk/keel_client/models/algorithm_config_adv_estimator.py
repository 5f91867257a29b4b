from enum import StrEnum


class AlgorithmConfigAdvEstimator(StrEnum):
    GAE = "gae"
    GRPO = "grpo"
    REINFORCE_PLUS_PLUS = "reinforce_plus_plus"
    REINFORCE_PLUS_PLUS_BASELINE = "reinforce_plus_plus_baseline"
    REMAX = "remax"
    RLOO = "rloo"

    def __str__(self) -> str:
        return str(self.value)
