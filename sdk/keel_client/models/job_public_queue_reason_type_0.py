from enum import StrEnum


class JobPublicQueueReasonType0(StrEnum):
    WAITING_FOR_RESOURCES = "waiting_for_resources"

    def __str__(self) -> str:
        return str(self.value)
