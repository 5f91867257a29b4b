from enum import StrEnum


class TrainerPublicStatus(StrEnum):
    ACTIVE = "active"
    DELETED = "deleted"
    FAILED = "failed"
    IDLE = "idle"
    RELEASED = "released"

    def __str__(self) -> str:
        return str(self.value)
