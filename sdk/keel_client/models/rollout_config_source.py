from enum import StrEnum


class RolloutConfigSource(StrEnum):
    GENERATE = "generate"
    TRAJECTORIES = "trajectories"

    def __str__(self) -> str:
        return str(self.value)
