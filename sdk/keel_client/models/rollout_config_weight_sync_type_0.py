from enum import StrEnum


class RolloutConfigWeightSyncType0(StrEnum):
    COLLECTIVE = "collective"
    OBJECT_STORE = "object_store"

    def __str__(self) -> str:
        return str(self.value)
