from enum import StrEnum


class ListTrainersStatusType0(StrEnum):
    ACTIVE = "active"
    DELETED = "deleted"
    FAILED = "failed"
    IDLE = "idle"
    RELEASED = "released"

    def __str__(self) -> str:
        return str(self.value)
