from enum import StrEnum


class MemoryPlanDevice(StrEnum):
    CPU = "cpu"
    GPU = "gpu"

    def __str__(self) -> str:
        return str(self.value)
