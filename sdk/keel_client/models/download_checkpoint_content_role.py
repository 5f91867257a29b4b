from enum import StrEnum


class DownloadCheckpointContentRole(StrEnum):
    ACTOR = "actor"
    CRITIC = "critic"

    def __str__(self) -> str:
        return str(self.value)
