from enum import StrEnum


class DownloadCheckpointContentIncludeType0(StrEnum):
    TRAINING_STATE = "training_state"

    def __str__(self) -> str:
        return str(self.value)
