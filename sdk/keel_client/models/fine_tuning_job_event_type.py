from enum import StrEnum


class FineTuningJobEventType(StrEnum):
    MESSAGE = "message"
    METRICS = "metrics"

    def __str__(self) -> str:
        return str(self.value)
