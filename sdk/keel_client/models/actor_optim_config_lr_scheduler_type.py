from enum import StrEnum


class ActorOptimConfigLrSchedulerType(StrEnum):
    CONSTANT = "constant"
    COSINE = "cosine"
    LINEAR = "linear"

    def __str__(self) -> str:
        return str(self.value)
