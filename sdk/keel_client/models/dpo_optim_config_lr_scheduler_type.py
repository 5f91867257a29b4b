from enum import StrEnum


class DPOOptimConfigLrSchedulerType(StrEnum):
    CONSTANT = "constant"
    COSINE = "cosine"
    LINEAR = "linear"

    def __str__(self) -> str:
        return str(self.value)
