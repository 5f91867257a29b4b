from enum import StrEnum


class JobResourcesExecutor(StrEnum):
    LOCAL = "local"
    RAY = "ray"

    def __str__(self) -> str:
        return str(self.value)
